#!/usr/bin/env bash
# bench_model.sh — `hsi bench model cnn2d` and the same model in PyTorch
# (bench/torch_cnn2d.py), same batch, input and threads, in the same run;
# prints both and the ratios. Part of `make bench` (bench/run.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
T=${THREADS:-2}
ARGS="--batch 128 --bands 30 --patch 11 --classes 16 --threads $T"
ours=$(./build/hsi bench model cnn2d $ARGS --json) || exit 1
echo "hsi:   $ours"
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    theirs=$(/usr/bin/python3 bench/torch_cnn2d.py $ARGS) || exit 1
    echo "torch: $theirs"
    /usr/bin/python3 - "$ours" "$theirs" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for k in ("train_samples_per_s", "infer_samples_per_s"):
    print("cnn2d %-20s hsi %9.1f  torch %9.1f  ratio %.2fx" % (k, a[k], b[k], a[k] / b[k]))
PY
else
    echo "torch: not installed (python3-torch); no ratio"
fi
