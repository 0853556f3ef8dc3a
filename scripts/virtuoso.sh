#!/usr/bin/env bash
# A throwaway Virtuoso Open Source 7 (Debian's `virtuoso-opensource`) for the
# remote-store tests: its own database directory, free loopback ports, SPARQL
# update granted to a test account (HTTP Digest at /sparql-auth).
#
#   scripts/virtuoso.sh install     # installs the package if missing (scripts/test.sh runs this)
#   scripts/virtuoso.sh start DIR   # installs the package if missing, starts, prints env
#   scripts/virtuoso.sh stop DIR    # shuts it down (checkpoint) and removes DIR
#   scripts/virtuoso.sh restart DIR # stops the server process and starts it again on the same data
#
# HMG_TEST_VIRTUOSO_MAX_ROWS sets its result cap (ResultSetMaxRows;
# default 10,000,000), for the test of a store that cuts answers.
#
# `start` prints, for `eval`:
#   HMG_TEST_VIRTUOSO_QUERY   http://127.0.0.1:PORT/sparql-auth (query + update, Digest)
#   HMG_TEST_VIRTUOSO_USER / HMG_TEST_VIRTUOSO_PASSWORD
#   HMG_TEST_VIRTUOSO_DIR     the database directory (for stop/restart)
set -euo pipefail

command_name="${1:-}"
dir="${2:-}"
[ "$command_name" = install ] || [ -n "$dir" ] || { echo "usage: $0 install | start|stop|restart DIR" >&2; exit 2; }

install_package() {
  command -v virtuoso-t >/dev/null 2>&1 && command -v isql-vt >/dev/null 2>&1 && return 0
  echo "virtuoso: installing Debian's virtuoso-opensource" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq >&2 || true
  # The package's own service is not started in a container; only its binaries are used.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq virtuoso-opensource >/dev/null
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# 0: ready; 2: the server exited (its log says why); 1: not ready in 60 s.
wait_ready() {
  local port="$1" http="$2"
  for _ in $(seq 1 120); do
    if isql-vt "$port" dba dba exec="select 1;" >/dev/null 2>&1 \
      && curl -s -o /dev/null "http://127.0.0.1:$http/sparql?query=ASK%7B%7D"; then
      return 0
    fi
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      return 2
    fi
    sleep 0.5
  done
  echo "virtuoso: not ready after 60 s; log:" >&2
  tail -20 "$dir/virtuoso.log" >&2 || true
  return 1
}

launch() {
  # The background subshell becomes the server (exec), with none of our
  # descriptors: a caller reading our output is not kept waiting by it.
  (cd "$dir" || exit 1; exec virtuoso-t +foreground +configfile "$dir/virtuoso.ini" >"$dir/stdout.log" 2>&1 </dev/null) &
  echo $! >"$dir/pid"
}

case "$command_name" in
  install)
    install_package
    ;;
  start)
    install_package
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    # A free port can be taken again between the check and Virtuoso's bind
    # (tests run side by side): then it exits at once, and gets new ports.
    for attempt in 1 2 3 4 5; do
      port="$(free_port)"
      http="$(free_port)"
      # The packaged configuration, with every file in DIR and our ports; a
      # result cap far above any test tenant (Virtuoso truncates silently at
      # ResultSetMaxRows); no refusal on the cost *estimate* (its estimator
      # refuses the audit chain's OPTIONALs as "exceeds 400 s" on an empty store).
      sed -e "s#/var/lib/virtuoso-opensource-7/db#$dir#g" \
          -e "s#^ServerPort *= *1111#ServerPort = $port#" \
          -e "s#^ServerPort *= *8890#ServerPort = 127.0.0.1:$http#" \
          -e "s#^DirsAllowed *= *#DirsAllowed = $dir, #" \
          -e "s#^ResultSetMaxRows *=.*#ResultSetMaxRows = ${HMG_TEST_VIRTUOSO_MAX_ROWS:-10000000}#" \
          -e "s#^MaxQueryExecutionTime *=.*#MaxQueryExecutionTime = 0#" \
          -e "s#^MaxQueryCostEstimationTime *=.*#MaxQueryCostEstimationTime = 0#" \
          /etc/virtuoso-opensource-7/virtuoso.ini >"$dir/virtuoso.ini"
      echo "$port" >"$dir/port"
      echo "$http" >"$dir/http"
      rm -f "$dir/virtuoso.lck"
      launch
      status=0
      wait_ready "$port" "$http" || status=$?
      [ "$status" -eq 0 ] && break
      if [ "$status" -eq 2 ] && grep -q "Failed to start listening" "$dir/virtuoso.log" 2>/dev/null && [ "$attempt" -lt 5 ]; then
        echo "virtuoso: port $port or $http was taken; trying others" >&2
        : >"$dir/virtuoso.log"
        continue
      fi
      echo "virtuoso: did not start; log:" >&2
      tail -20 "$dir/virtuoso.log" >&2 || true
      exit 1
    done
    isql-vt "$port" dba dba exec="DB.DBA.USER_CREATE('hmg', 'hmg-test-secret'); GRANT SPARQL_UPDATE TO \"hmg\"; GRANT SPARQL_SELECT TO \"hmg\";" >/dev/null
    echo "export HMG_TEST_VIRTUOSO_QUERY='http://127.0.0.1:$http/sparql-auth'"
    echo "export HMG_TEST_VIRTUOSO_USER='hmg'"
    echo "export HMG_TEST_VIRTUOSO_PASSWORD='hmg-test-secret'"
    echo "export HMG_TEST_VIRTUOSO_DIR='$dir'"
    ;;
  restart)
    port="$(cat "$dir/port")"
    http="$(cat "$dir/http")"
    kill -9 "$(cat "$dir/pid")" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$(cat "$dir/pid")" 2>/dev/null || break; sleep 0.1; done
    rm -f "$dir/virtuoso.lck"
    launch
    if ! wait_ready "$port" "$http"; then
      echo "virtuoso: did not restart; log:" >&2
      tail -20 "$dir/virtuoso.log" >&2 || true
      exit 1
    fi
    ;;
  stop)
    if [ -f "$dir/port" ]; then
      isql-vt "$(cat "$dir/port")" dba dba exec="shutdown;" >/dev/null 2>&1 || true
      for _ in $(seq 1 50); do kill -0 "$(cat "$dir/pid")" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$(cat "$dir/pid")" 2>/dev/null || true
    fi
    rm -rf "$dir"
    ;;
  *)
    echo "usage: $0 start|stop|restart DIR" >&2
    exit 2
    ;;
esac
