#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing, then
# runs every test in the one release-like profile the binary also uses.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
eval "$(scripts/test-clients.sh)"
# The remote-store tests start their own Virtuoso instances (scripts/virtuoso.sh).
scripts/virtuoso.sh install
source scripts/env.sh
cargo fmt --check
cargo clippy --release --locked --features e5 --all-targets -- -D warnings
# A test process that hangs is stopped with its threads' stacks printed,
# rather than holding CI until its time limit.
scripts/hang-watch.sh "$CARGO_TARGET_DIR" &
watch=$!
trap 'kill "$watch" 2>/dev/null' EXIT
cargo test --release --locked --features e5 "$@"
