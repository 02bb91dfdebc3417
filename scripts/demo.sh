#!/usr/bin/env bash
# make demo: the whole pipeline on the bundled synthetic scene — look at it,
# train cnn2d with the no-leak protocol, print the metrics and where the map
# picture is. Run from the repository root after `make`.
set -euo pipefail
cd "$(dirname "$0")/.."
HSI=./build/hsi
OUT=${DEMO_OUT:-build/demo}
mkdir -p "$OUT"
echo "== hsi info data_samples/scene.hdr"
$HSI info data_samples/scene.hdr
echo
echo "== hsi quicklook (true colour) -> $OUT/scene.png"
$HSI quicklook data_samples/scene.hdr "$OUT/scene.png" --overwrite
echo
echo "== hsi train: cnn2d, 10 % of each class for training (the last epoch is kept),"
echo "   z-score + PCA 30 fitted on the training pixels only, 11 x 11 patches"
start=$(date +%s%N)
$HSI train data_samples/scene.hdr data_samples/scene_gt.hdr --out "$OUT/cnn2d" --overwrite \
    --model cnn2d --pca 30 --patch 11 --train 0.1 --epochs ${DEMO_EPOCHS:-25} --seed 1
end=$(date +%s%N)
echo
ms=$(( (end - start) / 1000000 ))
printf "demo: trained and mapped in %d.%01d s\n" $((ms / 1000)) $(((ms % 1000) / 100))
echo "metrics:     $OUT/cnn2d/metrics.json"
echo "map picture: $OUT/cnn2d/map.png"
