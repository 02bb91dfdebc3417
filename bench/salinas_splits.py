#!/usr/bin/python3
"""salinas_splits.py - explicit train/test label maps (.mat, one uint8
variable each) for bench/accuracy_salinas_a.sh, read by `hsi train
--train-labels --test-labels` and by bench/svm_baseline.py --split-files.
Not part of the library; a bench tool.

  dev GT.mat FRAC DEV_FRAC SEED OUTDIR
      stratified random: FRAC of each class for training, another DEV_FRAC
      for a development set written as the "test" map. Used only to choose
      training settings, on seeds the reported runs do not use.
  fields GT.mat FRAC GUARD SEED OUTDIR
      spatially disjoint: Salinas-A's classes are long diagonal fields; for
      each class a window of consecutive pixels along the field's long axis
      (FRAC of the class, at a seeded random position) is training; every
      labelled pixel closer than GUARD (Chebyshev) to any training pixel is
      dropped; all the others are test. GUARD = 2r + 1 = P for P x P patches
      means no test patch shares a pixel with a training patch.
Writes OUTDIR/train.mat (train_gt) and OUTDIR/test.mat (test_gt), and
prints per-class counts."""
import os
import sys

import numpy as np
import scipy.io
from scipy.ndimage import binary_dilation


def load_gt(path):
    m = scipy.io.loadmat(path)
    keys = [k for k in m if not k.startswith("__")]
    return m[keys[0]].astype(np.int64)


def save(outdir, gt, tr, te):
    os.makedirs(outdir, exist_ok=True)
    scipy.io.savemat(os.path.join(outdir, "train.mat"),
                     {"train_gt": np.where(tr, gt, 0).astype(np.uint8)}, do_compression=True)
    scipy.io.savemat(os.path.join(outdir, "test.mat"),
                     {"test_gt": np.where(te, gt, 0).astype(np.uint8)}, do_compression=True)
    for c in np.unique(gt[gt > 0]):
        print("class %2d  train %4d  test %4d  dropped %4d" % (
            c, (tr & (gt == c)).sum(), (te & (gt == c)).sum(),
            ((gt == c) & ~tr & ~te).sum()))
    print("all       train %4d  test %4d" % (tr.sum(), te.sum()))


def dev(gt, frac, dev_frac, seed):
    rng = np.random.default_rng(seed)
    tr = np.zeros(gt.shape, bool)
    te = np.zeros(gt.shape, bool)
    for c in np.unique(gt[gt > 0]):
        idx = rng.permutation(np.flatnonzero(gt.ravel() == c))
        k = max(1, int(np.floor(frac * len(idx) + 0.5)))
        d = max(1, int(np.floor(dev_frac * len(idx) + 0.5)))
        tr.ravel()[idx[:k]] = True
        te.ravel()[idx[k:k + d]] = True
    return tr, te


def fields(gt, frac, guard, seed):
    rng = np.random.default_rng(seed)
    tr = np.zeros(gt.shape, bool)
    ys, xs = np.indices(gt.shape)
    for c in np.unique(gt[gt > 0]):
        m = gt == c
        pts = np.stack([ys[m], xs[m]], 1).astype(float)
        ctr = pts - pts.mean(0)
        axis = np.linalg.svd(ctr, full_matrices=False)[2][0]  # long axis of the field
        s = ctr @ axis
        order = np.argsort(s)
        k = max(1, int(np.floor(frac * len(order) + 0.5)))
        start = rng.integers(0, len(order) - k + 1)
        sel = order[start:start + k]
        tr[ys[m][sel], xs[m][sel]] = True
    near = binary_dilation(tr, structure=np.ones((3, 3), bool), iterations=max(guard - 1, 0)) \
        if guard > 1 else tr.copy()
    te = (gt > 0) & ~near
    return tr, te


def main():
    if len(sys.argv) != 7 or sys.argv[1] not in ("dev", "fields"):
        sys.exit(__doc__)
    mode, gtp, a, b, seed, outdir = sys.argv[1:]
    gt = load_gt(gtp)
    if mode == "dev":
        tr, te = dev(gt, float(a), float(b), int(seed))
    else:
        tr, te = fields(gt, float(a), int(b), int(seed))
    save(outdir, gt, tr, te)


if __name__ == "__main__":
    main()
