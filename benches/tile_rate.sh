#!/usr/bin/env bash
# The AVX2 matmul tiles' rate against the CPU's multiplier peak and against
# the bound each tile's instruction mix allows, one core
# (benches/tile_rate.c says what it prints). Compiled with the flags
# build.rs gives the engines; pinned to CPU ${1:-0}.
#
#     bash benches/tile_rate.sh [cpu]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
case "$(uname -m)" in
  x86_64 | amd64) ;;
  *) echo "the AVX2 tiles are x86-64 code; nothing to measure on $(uname -m)" >&2; exit 1 ;;
esac
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cc -O3 -ffast-math -fopenmp -mavx2 -mfma -mf16c -o "$out/tile_rate" "$here/tile_rate.c" -lm
if command -v taskset >/dev/null; then
  OMP_NUM_THREADS=1 taskset -c "${1:-0}" "$out/tile_rate"
else
  OMP_NUM_THREADS=1 "$out/tile_rate"
fi
