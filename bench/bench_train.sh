#!/usr/bin/env bash
# bench_train.sh — issue 6 training benchmark: `hsi bench model` for cnn2d and
# hybridsn beside the same architecture in PyTorch (bench/torch_train.py: same
# batch, input, AdamW, thread count; the current PyTorch from PyPI and Debian's,
# see bench/torch_env.sh), in the same run, hsi and PyTorch
# alternating so both see the same machine load; then `hsi profile train` on
# data_samples/ for the loader wait as a share of the step time. Part of
# `make bench` (bench/run.sh). Figures, never pass/fail.
# Env: THREADS (2), REPEAT (2: each measurement is the best of REPEAT).
# hybridsn warms up 2 steps: the engine's graph arena grows during the first
# step and is merged into one block at the second, which would otherwise be
# timed (about 600 MB of fresh pages).
set -uo pipefail
cd "$(dirname "$0")/.."
T=${THREADS:-2}
R=${REPEAT:-2}
export OPENBLAS_NUM_THREADS=$T
. bench/torch_env.sh
mkdir -p bench/out
results=()
for spec in "cnn2d --batch 128 --bands 30 --patch 11 --steps 20" \
            "hybridsn --batch 64 --bands 30 --patch 25 --steps 5 --warmup 2"; do
    set -- $spec
    model=$1; shift
    for r in $(seq "$R"); do
        ours=$(./build/hsi bench model "$model" "$@" --classes 16 --threads "$T" --json) || exit 1
        echo "hsi   $ours"
        results+=("$ours")
        for py in "${TORCH_PYS[@]}"; do
            theirs=$("$py" bench/torch_train.py "$model" "$@" --classes 16 --threads "$T") || exit 1
            echo "torch $theirs"
            results+=("$theirs")
        done
    done
done
printf '%s\n' "${results[@]}" | /usr/bin/python3 -c '
import json, sys
best, who_all = {}, []
for line in sys.stdin:
    d = json.loads(line)
    who = d.get("framework", "hsi")
    if who not in who_all:
        who_all.append(who)
    for k in ("train_samples_per_s", "infer_samples_per_s"):
        key = (d["model"], k, who)
        best[key] = max(best.get(key, 0), d[k])
for model in ("cnn2d", "hybridsn"):
    for k in ("train_samples_per_s", "infer_samples_per_s"):
        a = best[(model, k, "hsi")]
        peers = ["%s %9.1f (hsi %.2fx)" % (w, best[(model, k, w)], a / best[(model, k, w)])
                 for w in who_all if w != "hsi"]
        print("%-8s %-20s hsi %9.1f  %s" % (model, k, a, "  ".join(peers) or "torch n/a"))
'
[ ${#TORCH_PYS[@]} -gt 0 ] || echo "torch: not installed (python3-torch, or PyPI); no ratio"

echo "== hsi profile train (cnn2d, data_samples/, --workers 1): loader wait share of the step time"
OUTD=$(mktemp -d -t hsi-bench-train.XXXXXX)
trap 'rm -rf "$OUTD"' EXIT
./build/hsi profile train data_samples/scene.hdr data_samples/scene_gt.hdr --out "$OUTD/p" \
    --train 0.1 --epochs ${PROFILE_EPOCHS:-5} --patience 0 --seed 1 --threads "$T" --quiet > "$OUTD/profile.txt" 2>&1 \
    || { cat "$OUTD/profile.txt"; exit 1; }
cat "$OUTD/profile.txt"
/usr/bin/python3 - "$OUTD/p/profile.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
w, f, b, o = (p[k] for k in ("loader wait", "forward", "backward", "optimizer"))
print("loader wait %.3f s of a step time %.3f s (wait + forward + backward + optimizer): %.1f %%"
      % (w, w + f + b + o, 100 * w / max(w + f + b + o, 1e-12)))
PY
