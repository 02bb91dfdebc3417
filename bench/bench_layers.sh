#!/usr/bin/env bash
# bench_layers.sh — `hsi bench layers` (the cnn2d layer kernels, forward and
# backward) and the same layers in PyTorch (bench/torch_layers.py), same batch,
# patch and threads, in the same run; prints both and the ratios (torch time /
# hsi time: above 1 means hsi is faster). Part of `make bench` (bench/run.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
T=${THREADS:-2}
ARGS="--batch 128 --bands 30 --patch 11 --threads $T --reps 10"
ours=$(./build/hsi bench layers $ARGS --json) || exit 1
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "hsi:   $ours"
    echo "torch: not installed (python3-torch); no ratio"
    exit 0
fi
theirs=$(/usr/bin/python3 bench/torch_layers.py $ARGS) || exit 1
/usr/bin/python3 - "$ours" "$theirs" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("batch %d, %d threads; ms, best of 10; ratio = torch / hsi" % (a["batch"], a["threads"]))
print("%-8s %9s %9s %6s   %9s %9s %6s" % ("layer", "hsi fwd", "torch fwd", "ratio",
                                        "hsi bwd", "torch bwd", "ratio"))
for x, y in zip(a["layers"], b["layers"]):
    print("%-8s %9.3f %9.3f %5.2fx   %9.3f %9.3f %5.2fx" % (
        x["name"], x["fwd_ms"], y["fwd_ms"], y["fwd_ms"] / x["fwd_ms"],
        x["bwd_ms"], y["bwd_ms"], y["bwd_ms"] / x["bwd_ms"]))
print("total    hsi %.3f ms  torch %.3f ms  ratio %.2fx" % (
    a["total_ms"], b["total_ms"], b["total_ms"] / a["total_ms"]))
PY
