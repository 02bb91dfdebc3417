#!/usr/bin/env python3
"""From Spectral Python (SPy) habits to hsi, cell by cell (run it as a script,
or paste the cells into a notebook). Each cell shows the SPy line as a
comment and the hsi equivalent below it.

    python examples/spy_to_hsi.py [CUBE.hdr LABELS.hdr]   (default: data_samples/)
"""
import os
import sys
import tempfile

import numpy as np

import hsi

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(os.path.dirname(here))
cube_path = sys.argv[1] if len(sys.argv) > 2 else os.path.join(repo, "data_samples", "scene.hdr")
labels_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(repo, "data_samples",
                                                                 "scene_gt.hdr")

# %% open a cube
# SPy:  img = spectral.open_image(cube_path)          # or envi.open(hdr)
cube = hsi.open(cube_path)
print(cube)
# SPy:  img.metadata["wavelength"], img.bands.centers
print("wavelengths (nm):", cube.wavelengths[:3], "...", "interleave:", cube.interleave)
print("header keys:", list(cube.meta)[:6], "...")

# %% the data, without reading the file
# SPy:  arr = img.open_memmap()        # (lines, samples, bands)
arr = cube.bip()                        # (lines, samples, bands) view of the mapped file
bsq = cube.array                        # (bands, lines, samples), the same memory
print("view shape", arr.shape, "shares memory:", np.shares_memory(arr, bsq))
# SPy:  img.read_band(10), img.read_pixel(20, 30)
band10, pixel = cube.array[10], cube.bip()[20, 30]

# %% per-band statistics, on the labelled pixels only
# SPy:  stats = spectral.calc_stats(img, mask=gt != 0)   # mean + covariance
s = hsi.stats(cube, mask=labels_path)
print("band 0: mean %.1f std %.1f over %d pixels" % (s["mean"][0], s["std"][0], s["count"][0]))

# %% PCA (with z-score normalisation), fitted on the labelled pixels
# SPy:  pc = spectral.principal_components(img); reduced = pc.reduce(num=30).transform(img)
pipe = hsi.Pipeline(normalize="zscore", pca=30).fit(cube, mask=labels_path)
features = pipe.transform(cube)         # (30, lines, samples) float32, one fused pass
print("PCA: %d components explain %.2f %% of the variance"
      % (pipe.n_components_, 100 * pipe.explained_variance_ratio_.sum()))

# %% write a cube (SPy: envi.save_image(hdr, arr, metadata=...))
out = tempfile.mkdtemp(prefix="hsi-example-")
hsi.write_envi(os.path.join(out, "pc.hdr"), features,
               meta={"band names": ["PC%d" % (k + 1) for k in range(30)]})

# %% train a classifier (SPy has none: people move to scikit-learn / PyTorch here)
def show(event):                        # tqdm works too: bar.update() on "epoch"
    if event.kind == "epoch":
        print("epoch %d/%d loss %.3f" % (event.epoch, event.epochs, event.loss))
    # returning True would stop training after this epoch (so does Ctrl-C)


metrics = hsi.train(cube_path, labels_path, os.path.join(out, "run"), progress=show, epochs=5,
                    train=0.05)
print("test OA %.2f %%, kappa %.3f" % (100 * metrics["oa"], metrics["kappa"]))

# %% predict a map and score it
run = hsi.Run.load(os.path.join(out, "run"))
label_map = run.predict(cube)           # (lines, samples) int32 label values
print("predicted classes:", np.unique(label_map), "OA on test pixels: %.4f"
      % run.evaluate(cube, labels_path, on="test")["oa"])

# %% the same model in PyTorch (fine-tuning, inspection)
try:
    import hsi.torch
except ImportError:
    print("(PyTorch not installed: skipping hsi.torch)")
else:
    model = hsi.torch.load(os.path.join(out, "run"))
    feats = run.pipeline.transform(cube)
    same = (hsi.torch.predict(model, feats) == label_map).mean()
    print("PyTorch reproduces %.2f %% of hsi's map" % (100 * same))
print("outputs in", out)
