#!/usr/bin/env bash
# Issue 2 benchmark: open time (512 MiB and 16 GiB sparse cubes) and a full
# per-band-sum pass per interleave, hsi vs memcpy vs SPy vs GDAL.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out
./build/hsi bench io --json "$@" > bench/out/io.json
/usr/bin/python3 bench/io_compare.py < bench/out/io.json
