#!/usr/bin/env bash
# The main job, from a fresh machine: installs what is missing, builds hmg and
# runs it on its embedded store (default: $XDG_DATA_HOME/hmg, or HMG_STORE).
# With no arguments it serves HTTP on 127.0.0.1:7411 (MCP at /mcp, GraphQL and
# its explorer at /graphql, SPARQL at /sparql; Ctrl-C stops it); any arguments
# are passed to hmg instead (e.g. `memorize "…"`, `mcp`, `stats`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
cargo build --release --locked --features e5 --bin hmg
HMG="$CARGO_TARGET_DIR/release/hmg"
cd "${HMG_WORKDIR:-$OLDPWD}"
if [ $# -eq 0 ]; then
  "$HMG" stats
  exec "$HMG" serve
fi
exec "$HMG" "$@"
