#!/usr/bin/env bash
# bench_model.sh — `hsi bench model cnn2d` and the same model in PyTorch
# (bench/torch_cnn2d.py; the current PyTorch from PyPI and Debian's, see
# bench/torch_env.sh), same batch, input and threads, alternating REPEAT
# times in the same run (this machine's speed drifts by tens of percent over
# minutes, so one pair of runs says little); prints every pair's ratio and the
# ratio of the best runs. Part of `make bench` (bench/run.sh).
# Env: THREADS (2), REPEAT (3).
set -uo pipefail
cd "$(dirname "$0")/.."
T=${THREADS:-2}
R=${REPEAT:-3}
ARGS="--batch 128 --bands 30 --patch 11 --classes 16 --threads $T"
. bench/torch_env.sh
lines=()
for r in $(seq "$R"); do
    ours=$(./build/hsi bench model cnn2d $ARGS --json) || exit 1
    echo "hsi:   $ours"
    lines+=("$ours")
    for py in "${TORCH_PYS[@]}"; do
        theirs=$("$py" bench/torch_cnn2d.py $ARGS) || exit 1
        echo "torch: $theirs"
        lines+=("$theirs")
    done
done
if [ ${#TORCH_PYS[@]} = 0 ]; then
    echo "torch: not installed (python3-torch, or PyPI); no ratio"
    exit 0
fi
printf '%s\n' "${lines[@]}" | /usr/bin/python3 -c '
import json, sys
runs = {}
for line in sys.stdin:
    d = json.loads(line)
    runs.setdefault(d.get("framework", "hsi"), []).append(d)
for k in ("train_samples_per_s", "infer_samples_per_s"):
    a = [d[k] for d in runs["hsi"]]
    for who, theirs in runs.items():
        if who == "hsi":
            continue
        b = [d[k] for d in theirs]
        pairs = " ".join("%.2fx" % (x / y) for x, y in zip(a, b))
        print("cnn2d %-20s hsi %9.1f  %s %9.1f  ratio %.2fx (best of %d each; pairs: %s)"
              % (k, max(a), who, max(b), max(a) / max(b), len(a), pairs))
'
