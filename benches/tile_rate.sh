#!/usr/bin/env bash
# The AVX2 matmul tiles' rate against the CPU's multiplier peak, one core
# (benches/tile_rate.c says what it prints). Compiled with the flags
# build.rs gives the engines; pinned to CPU ${1:-0}.
#
#     bash benches/tile_rate.sh [cpu]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cc -O3 -ffast-math -fopenmp -mavx2 -mfma -mf16c -o "$out/tile_rate" "$here/tile_rate.c" -lm
if command -v taskset >/dev/null; then
  OMP_NUM_THREADS=1 taskset -c "${1:-0}" "$out/tile_rate"
else
  OMP_NUM_THREADS=1 "$out/tile_rate"
fi
