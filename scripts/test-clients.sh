#!/usr/bin/env bash
# Installs the real clients the test suite drives against `hmg`, outside the
# repository (nothing of them is committed), and prints the environment the
# tests read:
#   HMG_TEST_PYTHON     a Python with the official MCP SDK (mcp 2.3.0)
#   HMG_TEST_INSPECTOR  the MCP Inspector CLI (npm @modelcontextprotocol/inspector 0.15.0)
#   HMG_TEST_NODE_MODULES  node_modules with playwright-core (drives Debian's chromium)
#   HMG_TEST_SCHEMATHESIS  the schemathesis CLI (PyPI schemathesis 4.32.5, its own venv)
# The Python also has SPARQLWrapper (a real SPARQL client).
# Safe to run again; only missing pieces are installed. Usage:
#   eval "$(scripts/test-clients.sh)"
set -euo pipefail
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
DATA="${XDG_DATA_HOME:-$HOME/.local/share}/hmg"
CLIENTS="$DATA/test-clients"
mkdir -p "$CLIENTS"

need_apt=()
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "test-clients: installing ${need_apt[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

VENV="$CLIENTS/python"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '2.3.0' or m.version('SPARQLWrapper') != '2.0.0')" 2>/dev/null; then
  echo "test-clients: installing the MCP Python SDK and SPARQLWrapper from PyPI" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==2.3.0" "SPARQLWrapper==2.0.0" >&2
fi

# schemathesis has many dependencies of its own: a separate venv keeps them
# from moving the MCP SDK's.
SCHEMATHESIS_VENV="$CLIENTS/schemathesis"
[ -x "$SCHEMATHESIS_VENV/bin/python" ] || python3 -m venv "$SCHEMATHESIS_VENV"
if ! "$SCHEMATHESIS_VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('schemathesis') != '4.32.5')" 2>/dev/null; then
  echo "test-clients: installing schemathesis from PyPI" >&2
  "$SCHEMATHESIS_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==4.32.5" >&2
fi

NODE="$CLIENTS/node"
INSPECTOR="$NODE/node_modules/.bin/mcp-inspector"
if [ ! -x "$INSPECTOR" ]; then
  echo "test-clients: installing the MCP Inspector from npm" >&2
  npm install --silent --no-audit --no-fund --prefix "$NODE" "@modelcontextprotocol/inspector@0.15.0" >&2
fi
[ -x "$INSPECTOR" ] || { echo "test-clients: $INSPECTOR is missing after installation" >&2; exit 1; }
if [ ! -d "$NODE/node_modules/playwright-core" ]; then
  echo "test-clients: installing playwright-core from npm" >&2
  npm install --silent --no-audit --no-fund --prefix "$NODE" "playwright-core@1" >&2
fi

echo "export HMG_TEST_PYTHON='$VENV/bin/python'"
echo "export HMG_TEST_INSPECTOR='$INSPECTOR'"
echo "export HMG_TEST_NODE_MODULES='$NODE/node_modules'"
echo "export HMG_TEST_SCHEMATHESIS='$SCHEMATHESIS_VENV/bin/schemathesis'"
