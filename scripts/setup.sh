#!/usr/bin/env bash
# Installs everything HMG needs on a fresh Debian machine with a Rust
# toolchain: system packages for RocksDB's bindings. Safe to run again.
set -euo pipefail

need_apt=()
dpkg -s libclang-dev >/dev/null 2>&1 || need_apt+=(libclang-dev)
command -v git >/dev/null 2>&1 || need_apt+=(git)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
