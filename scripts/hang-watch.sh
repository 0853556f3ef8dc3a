#!/usr/bin/env bash
# Watches the test processes cargo runs from the target directory $1. One
# that has run longer than HMG_TEST_HANG_MINUTES (default 25; the longest
# test binary, the integration tests, takes about 5 minutes on a 2-core
# machine) has hung: its threads' stacks are printed (gdb when installed,
# else what the kernel shows) and it is killed, so the suite fails with the
# evidence instead of holding CI until its time limit. Runs until killed
# (scripts/test.sh).
set -u
deps="$1/release/deps"
limit=$(( ${HMG_TEST_HANG_MINUTES:-25} * 60 ))

stacks() {
  local pid=$1
  if command -v gdb >/dev/null 2>&1; then
    timeout 120 gdb -p "$pid" -batch -nx -ex "set pagination off" -ex "thread apply all bt 25" 2>/dev/null \
      | grep -E '^(Thread|#)' | head -n 600
  else
    for task in /proc/"$pid"/task/*; do
      echo "thread ${task##*/} $(cat "$task/comm" 2>/dev/null) waiting in $(cat "$task/wchan" 2>/dev/null)"
      cat "$task/stack" 2>/dev/null
    done
  fi
}

while sleep 15; do
  for proc in /proc/[0-9]*; do
    exe=$(readlink "$proc/exe" 2>/dev/null) || continue
    [[ $exe == "$deps"/* ]] || continue
    pid=${proc#/proc/}
    age=$(ps -o etimes= -p "$pid" 2>/dev/null | tr -d ' ')
    [[ -n $age && $age -ge $limit ]] || continue
    echo "hang-watch: ${exe##*/} (pid $pid) has run ${age} s, past ${limit} s; every thread's stack:" >&2
    stacks "$pid" >&2
    echo "hang-watch: killing pid $pid" >&2
    kill -9 "$pid" 2>/dev/null
  done
done
