#!/usr/bin/env bash
# accuracy_salinas_a.sh — issue 6 acceptance on real data: `hsi train` on
# Salinas-A (../shared/data/salinas_a/*.mat) beside the user's alternative
# (scikit-learn RBF SVM, bench/svm_baseline.py), in the same run. Long (tens
# of minutes on 2 cores): not part of `make bench`; run it by hand, once.
# Figures, never pass/fail. Results: bench/out/accuracy/ (one directory per
# run with metrics.json) and a summary table on stdout.
#
#   bash bench/accuracy_salinas_a.sh [STEP...]     steps: svm cnn2d disjoint hybridsn tune
#                                                  (default: svm cnn2d disjoint hybridsn)
# Env: HSI (default ./build/hsi), SEEDS ("1 2 3 4 5"), CNN_OPTS (extra hsi train
# options for cnn2d), HYB_EPOCHS (epoch cap for hybridsn, default 10),
# OUT (default bench/out/accuracy).
set -uo pipefail
cd "$(dirname "$0")/.."
HSI=${HSI:-./build/hsi}
PY=/usr/bin/python3
DATA=${HSI_SHARED_DATA:-../shared/data}/salinas_a
CUBE=$DATA/SalinasA_corrected.mat
GT=$DATA/SalinasA_gt.mat
OUT=${OUT:-bench/out/accuracy}
SEEDS=${SEEDS:-1 2 3 4 5}
CNN_OPTS=${CNN_OPTS:-}
HYB_EPOCHS=${HYB_EPOCHS:-10}
STEPS=${*:-svm cnn2d disjoint hybridsn}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}
[ -f "$CUBE" ] || { echo "accuracy: $CUBE not found (the shared data folder)"; exit 1; }
$PY -c "import sklearn, scipy" 2>/dev/null || { echo "accuracy: needs Debian's python3-sklearn"; exit 1; }
mkdir -p "$OUT"

# bench/split_roles.c: hsi's own split for the SVM (same pixels as the CNN)
LDLIBS=$(make -s --no-print-directory --eval 'print-ldlibs: ; @echo $(LDLIBS)' print-ldlibs)
CFLAGS=$(make -s --no-print-directory --eval 'print-cflags: ; @echo $(CFLAGS)' print-cflags | sed 's/-MMD -MP//')
cc $CFLAGS bench/split_roles.c build/libhsi.a $LDLIBS -o build/split_roles || exit 1

# one `hsi train` run; prints a JSON line from its metrics.json + wall time
train() { # NAME ARGS...
    local name=$1; shift
    local t0=$(date +%s.%N)
    if ! $HSI train "$@" --out "$OUT/$name" --overwrite --quiet > "$OUT/$name.log" 2>&1; then
        echo "{\"run\": \"$name\", \"failed\": true}"; tail -3 "$OUT/$name.log"; return 0
    fi
    local t1=$(date +%s.%N)
    $PY - "$OUT/$name/metrics.json" "$name" "$(echo "$t1 - $t0" | bc)" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print(json.dumps({"run": sys.argv[2], "oa": m["oa"], "aa": m["aa"], "kappa": m["kappa"],
                  "best_epoch": m.get("best_epoch"), "epochs_run": m.get("epochs_run"),
                  "train_s": round(m["timings_s"]["train"], 1), "wall_s": round(float(sys.argv[3]), 1),
                  "n": m.get("split_counts")}))
PY
}

# mean +- sample std over runs whose name starts with PREFIX
summary() { # LABEL PREFIX
    $PY - "$OUT" "$1" "$2" <<'PY'
import glob, json, os, sys
import numpy as np
out, label, prefix = sys.argv[1:]
ms, walls = [], []
for d in sorted(glob.glob(os.path.join(out, prefix + "*"))):
    f = os.path.join(d, "metrics.json")
    if os.path.isdir(d) and os.path.exists(f):
        m = json.load(open(f))
        ms.append((m["oa"], m["aa"], m["kappa"], m["timings_s"]["total"], m["timings_s"]["train"],
                   m["split_counts"]["train"], m["split_counts"]["val"], m["split_counts"]["test"]))
if not ms:
    print("SUMMARY %-34s no runs" % label); sys.exit()
a = np.array(ms)
sd = lambda v: v.std(ddof=1) if len(v) > 1 else 0.0
print("SUMMARY %-34s runs %d  OA %.2f +- %.2f  AA %.2f +- %.2f  kappa %.4f +- %.4f  "
      "time/run %.1f s (train %.1f s)  px train %d val %d test %d"
      % (label, len(a), 100 * a[:, 0].mean(), 100 * sd(a[:, 0]), 100 * a[:, 1].mean(),
         100 * sd(a[:, 1]), a[:, 2].mean(), sd(a[:, 2]), a[:, 3].mean(), a[:, 4].mean(),
         a[:, 5].mean(), a[:, 6].mean(), a[:, 7].mean()))
PY
}

ROLES="build/split_roles $GT - random {frac} 0.1 {seed} 11 16 {out}"
for step in $STEPS; do
case $step in
svm)
    echo "== SVM (RBF, standardised spectra, C/gamma by CV on the training pixels)"
    $PY bench/svm_baseline.py "$CUBE" "$GT" --fractions 0.05 0.01 --seeds $SEEDS --label own-random
    $PY bench/svm_baseline.py "$CUBE" "$GT" --fractions 0.05 0.01 --seeds $SEEDS \
        --roles-cmd "$ROLES" --label hsi-random
    ;;
cnn2d)
    echo "== hsi train cnn2d, default no-leak protocol ${CNN_OPTS:+(+ $CNN_OPTS)}"
    for f in 0.05 0.01; do
        for s in $SEEDS; do train "cnn2d_r${f}_s$s" "$CUBE" "$GT" --train $f --seed $s $CNN_OPTS; done
        summary "cnn2d random $f" "cnn2d_r${f}_s"
    done
    ;;
disjoint)
    echo "== spatially disjoint: hsi --split disjoint as shipped"
    train "cnn2d_hsidisjoint_default" "$CUBE" "$GT" --split disjoint --seed 1 --epochs 1
    echo "== spatially disjoint: a window of each field for training, guard band 11 px (P = 11)"
    for s in $SEEDS; do
        $PY bench/salinas_splits.py fields "$GT" 0.05 11 $s "$OUT/split_fields_s$s" > "$OUT/split_fields_s$s.txt"
        train "cnn2d_fields_s$s" "$CUBE" --train-labels "$OUT/split_fields_s$s/train.mat" \
            --test-labels "$OUT/split_fields_s$s/test.mat" --seed $s $CNN_OPTS
    done
    tail -1 "$OUT/split_fields_s1.txt"
    summary "cnn2d disjoint fields 0.05" "cnn2d_fields_s"
    $PY bench/svm_baseline.py "$CUBE" "$GT" --fractions 0.05 --seeds $SEEDS --label fields \
        --split-files "$OUT/split_fields_s{seed}"
    ;;
hybridsn)
    echo "== hybridsn, epochs capped at $HYB_EPOCHS (5 M parameters, 2 cores), seed 1"
    train "hybridsn_paper_s1" "$CUBE" "$GT" --model hybridsn --train 0.3 --patch 25 --pca 15 \
        --fit-on all --whiten --epochs $HYB_EPOCHS --seed 1
    summary "hybridsn paper (30%, 25, PCA15 all)" "hybridsn_paper_s"
    train "hybridsn_ours_s1" "$CUBE" "$GT" --model hybridsn --train 0.05 --patch 25 --pca 15 \
        --epochs $HYB_EPOCHS --seed 1
    summary "hybridsn ours (5%, 25, PCA15 train)" "hybridsn_ours_s"
    ;;
tune)
    # Training settings chosen on a development set: seeds 101-103 (not the
    # reported ones), FRAC of each class for training, another 10 % held out
    # as the "test" map of an explicit split. The reported runs' test pixels
    # are never looked at here.
    TUNE_SETS=${TUNE_SETS:-"default|"}
    for f in 0.05 0.01; do
        for s in 101 102 103; do
            $PY bench/salinas_splits.py dev "$GT" $f 0.1 $s "$OUT/dev_${f}_s$s" > /dev/null
        done
        IFS=';' read -ra sets <<< "$TUNE_SETS"
        for set in "${sets[@]}"; do
            tag=${set%%|*}; opts=${set#*|}
            for s in 101 102 103; do
                train "tune_${tag}_${f}_s$s" "$CUBE" --train-labels "$OUT/dev_${f}_s$s/train.mat" \
                    --test-labels "$OUT/dev_${f}_s$s/test.mat" --seed $s $opts
            done
            summary "tune $tag $f (dev OA)" "tune_${tag}_${f}_s"
        done
    done
    ;;
*) echo "unknown step $step"; exit 2 ;;
esac
done
