#!/usr/bin/env bash
# The main job, from a fresh machine: installs what is missing, builds hmg,
# installs it into HMG_BIN_DIR (default ~/.local/bin) and runs it on its
# embedded store (default: $XDG_DATA_HOME/hmg, or HMG_STORE).
# With no arguments it serves HTTP on 127.0.0.1:7411 (MCP at /mcp, GraphQL and
# its explorer at /graphql, SPARQL at /sparql; Ctrl-C stops it); any arguments
# are passed to hmg instead (e.g. `memorize "…"`, `mcp`, `stats`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
cargo build --release --locked --features e5 --bin hmg
# Installed where a shell finds it (HMG_BIN_DIR, default ~/.local/bin), so
# `hmg …` works afterwards without this script; without debug sections (103
# → 49 MB; the build keeps them for the tests' backtraces).
BIN_DIR="${HMG_BIN_DIR:-$HOME/.local/bin}"
mkdir -p "$BIN_DIR"
objcopy --strip-debug "$CARGO_TARGET_DIR/release/hmg" "$BIN_DIR/.hmg.new"
mv -f "$BIN_DIR/.hmg.new" "$BIN_DIR/hmg"
case ":$PATH:" in
  *":$BIN_DIR:"*) ;;
  *) echo "run.sh: hmg is installed in $BIN_DIR, which is not on your PATH; add it (export PATH=\"$BIN_DIR:\$PATH\")" >&2 ;;
esac
HMG="$BIN_DIR/hmg"
cd "${HMG_WORKDIR:-$OLDPWD}"
if [ $# -eq 0 ]; then
  "$HMG" stats
  exec "$HMG" serve
fi
exec "$HMG" "$@"
