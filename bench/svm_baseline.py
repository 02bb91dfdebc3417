#!/usr/bin/python3
"""svm_baseline.py - the user's alternative to `hsi train` on a labelled .mat
scene: scikit-learn RBF SVM on standardised spectra (scaler fitted on the
training pixels only), C and gamma chosen by stratified k-fold CV on the
training pixels only, scored on every other labelled pixel. Not a test; the
numbers go to bench/results/. Run with Debian's python3-sklearn/-scipy:

  /usr/bin/python3 bench/svm_baseline.py CUBE.mat GT.mat --fractions 0.05 0.01 --seeds 1 2 3 4 5
  ... --roles-cmd 'CMD {frac} {seed} {out}'   score on the split hsi made instead
                                             (CMD writes raw uint8 roles, see split_roles.c)
  ... --split-files 'DIR{seed}'              train.mat/test.mat from salinas_splits.py

Splits: by default its own stratified random split (per class round(f * n),
at least 1 training and 1 test pixel). With --roles-cmd the training pixels
are hsi's train + validation pixels (the same labelled budget the CNN had)
and the test pixels are hsi's test pixels, so both are scored on the same
pixels. Prints one JSON line per run and a summary (mean +- std)."""
import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np
import scipy.io
from sklearn.metrics import cohen_kappa_score, confusion_matrix
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC


def load_mat(path, var=None):
    m = scipy.io.loadmat(path)
    keys = [k for k in m if not k.startswith("__")]
    if var is None:
        if len(keys) != 1:
            sys.exit("%s: variables %s; say which with --var/--gt-var" % (path, keys))
        var = keys[0]
    return m[var]


def own_split(y, frac, seed):
    """Stratified random: per class round(frac * n) training pixels (>= 1, and
    >= 1 left for test), the rest test. y: (n,) labels > 0."""
    rng = np.random.default_rng(seed)
    tr = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        k = int(np.floor(frac * len(idx) + 0.5))
        k = min(max(k, 1), len(idx) - 1)
        tr.extend(rng.choice(idx, k, replace=False))
    tr = np.sort(np.array(tr))
    te = np.setdiff1d(np.arange(len(y)), tr)
    return tr, te


def metrics(yt, yp, classes):
    cm = confusion_matrix(yt, yp, labels=classes)
    rec = np.diag(cm) / np.maximum(cm.sum(1), 1)
    return {"oa": float(np.trace(cm) / cm.sum()), "aa": float(rec.mean()),
            "kappa": float(cohen_kappa_score(yt, yp, labels=classes)),
            "recall": [round(float(r), 4) for r in rec]}


def run_one(X, y, tr, te, classes, threads):
    t0 = time.perf_counter()
    sc = StandardScaler().fit(X[tr])
    Xtr, Xte = sc.transform(X[tr]), sc.transform(X[te])
    n_min = np.bincount(np.searchsorted(classes, y[tr])).min()
    folds = int(min(5, n_min))
    grid = {"C": [1, 10, 100, 1000, 10000], "gamma": [1e-4, 1e-3, 1e-2, 1e-1, "scale"]}
    if folds >= 2:
        gs = GridSearchCV(SVC(kernel="rbf"), grid, cv=StratifiedKFold(folds, shuffle=True,
                                                                      random_state=0),
                          n_jobs=threads)
        gs.fit(Xtr, y[tr])
        best, clf = gs.best_params_, gs.best_estimator_
    else:  # a class with one training pixel: no CV possible, sklearn defaults
        best = {"C": 1.0, "gamma": "scale"}
        clf = SVC(kernel="rbf", **best).fit(Xtr, y[tr])
    t_fit = time.perf_counter() - t0
    yp = clf.predict(Xte)
    t_all = time.perf_counter() - t0
    r = metrics(y[te], yp, classes)
    r.update({"C": best["C"], "gamma": best["gamma"], "cv_folds": folds, "n_train": int(len(tr)),
              "n_test": int(len(te)), "fit_s": round(t_fit, 2), "total_s": round(t_all, 2)})
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cube")
    ap.add_argument("gt")
    ap.add_argument("--var")
    ap.add_argument("--gt-var")
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.01])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--roles-cmd", help="command writing hsi's split roles: {frac} {seed} {out}")
    ap.add_argument("--split-files", help="folder pattern with {seed}: train.mat + test.mat "
                    "(bench/salinas_splits.py)")
    ap.add_argument("--label", default="")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    cube = load_mat(a.cube, a.var).astype(np.float64)  # (lines, samples, bands)
    gt = load_mat(a.gt, a.gt_var).astype(np.int64)    # (lines, samples)
    if cube.shape[:2] != gt.shape:
        sys.exit("cube %s and labels %s differ in lines x samples" % (cube.shape, gt.shape))
    flat = cube.reshape(-1, cube.shape[2])
    gflat = gt.ravel()
    lab = np.flatnonzero(gflat > 0)
    X, y = flat[lab], gflat[lab]
    classes = np.unique(y)
    split_name = "hsi" if a.roles_cmd else "files" if a.split_files else "own"
    for frac in a.fractions:
        runs = []
        for seed in a.seeds:
            if a.roles_cmd:
                with tempfile.NamedTemporaryFile(suffix=".u8") as f:
                    cmd = a.roles_cmd.format(frac=frac, seed=seed, out=f.name)
                    subprocess.run(shlex.split(cmd), check=True, stdout=subprocess.DEVNULL)
                    roles = np.fromfile(f.name, np.uint8)
                if roles.size != gflat.size:
                    sys.exit("roles file has %d pixels, scene %d" % (roles.size, gflat.size))
                rl = roles[lab]
                tr, te = np.flatnonzero((rl == 1) | (rl == 2)), np.flatnonzero(rl == 3)
            elif a.split_files:
                d = a.split_files.format(seed=seed)
                trm = load_mat(d + "/train.mat").ravel()[lab]
                tem = load_mat(d + "/test.mat").ravel()[lab]
                tr, te = np.flatnonzero(trm > 0), np.flatnonzero(tem > 0)
            else:
                tr, te = own_split(y, frac, seed)
            r = run_one(X, y, tr, te, classes, a.threads)
            r.update({"method": "svm-rbf", "split": a.label or split_name, "fraction": frac,
                      "seed": seed})
            print(json.dumps(r), flush=True)
            runs.append(r)
        oa, aa, ka = (np.array([r[k] for r in runs]) for k in ("oa", "aa", "kappa"))
        tt = np.array([r["total_s"] for r in runs])
        print("SUMMARY svm-rbf split=%s fraction=%g seeds=%d  OA %.2f +- %.2f  AA %.2f +- %.2f  "
              "kappa %.4f +- %.4f  time/run %.1f s  train px %d  test px %d"
              % (a.label or split_name, frac, len(runs), 100 * oa.mean(), 100 * oa.std(ddof=1) if len(runs) > 1 else 0,
                 100 * aa.mean(), 100 * aa.std(ddof=1) if len(runs) > 1 else 0, ka.mean(),
                 ka.std(ddof=1) if len(runs) > 1 else 0, tt.mean(),
                 round(np.mean([r["n_train"] for r in runs])),
                 round(np.mean([r["n_test"] for r in runs]))), flush=True)


if __name__ == "__main__":
    main()
