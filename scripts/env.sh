# Sourced by the scripts: one target directory outside the clone, reused by
# every build and test run (RocksDB then compiles once per machine).
# Models live under $HOME (XDG data dir); make sure it is set, as the tests
# look there too.
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/hmg-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
mkdir -p "$CARGO_TARGET_DIR"
