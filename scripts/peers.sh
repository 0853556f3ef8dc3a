#!/usr/bin/env bash
# Installs the peer memory systems HMG is measured against, outside the
# repository (nothing of them is committed), and prints the environment the
# side-by-side benches read:
#   HMG_PEERS_PYTHON   a Python with mem0ai 2.2.1 (FAISS), ONNX Runtime and
#                      tokenizers (mem0's embedder: the all-MiniLM-L6-v2 that
#                      scripts/setup.sh installs), and the MCP Python SDK
#                      (the client that drives `hmg mcp`)
# Safe to run again; only missing pieces are installed. Usage:
#   eval "$(scripts/peers.sh)"
#   $HMG_PEERS_PYTHON benches/peers/mem0_side_by_side.py --hmg "$(command -v hmg)"
set -euo pipefail
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
DATA="${XDG_DATA_HOME:-$HOME/.local/share}/hmg"
VENV="$DATA/peers"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mem0ai') != '2.2.1' or m.version('mcp') != '2.3.0')" 2>/dev/null; then
  echo "peers: installing mem0ai, faiss-cpu, onnxruntime, tokenizers and the MCP SDK from PyPI" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "mem0ai==2.2.1" "faiss-cpu==1.15.1" "onnxruntime==1.24.4" "tokenizers==0.23.3" "mcp==2.3.0" >&2
fi
echo "export HMG_PEERS_PYTHON=$VENV/bin/python"
