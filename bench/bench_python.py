#!/usr/bin/env python3
"""hsi from Python beside what Python users use instead, in one run, on the
same files: open a 16 GiB sparse ENVI cube (hsi, SPy, rasterio); per-band
mean and std of a 512 MiB uint16 cube (hsi.stats, numpy on a plain
np.memmap and on SPy's memmap, rasterio); z-score + PCA 30 of a 512 x 512 x 200 uint16 cube (hsi.Pipeline,
scikit-learn StandardScaler + PCA(svd_solver="covariance_eigh") when
scikit-learn >= 1.5, else "full"). Prints medians (min - max) of alternating
repeats and the ratios; figures, not pass/fail. The machine's memcpy rate
is measured in the same run as the yardstick.

usage: bench_python.py WORKDIR [REPEATS]"""
import os
import statistics
import sys
import time

import numpy as np

import hsi

work = sys.argv[1]
R = int(sys.argv[2]) if len(sys.argv) > 2 else 5
os.makedirs(work, exist_ok=True)


def header(path, B, L, S, il="bsq"):
    with open(path, "w") as f:
        f.write(f"ENVI\nsamples = {S}\nlines = {L}\nbands = {B}\nheader offset = 0\n"
                f"file type = ENVI Standard\ndata type = 12\ninterleave = {il}\nbyte order = 0\n")


big = os.path.join(work, "big.hdr")
if not os.path.exists(big[:-4] + ".img"):
    header(big, 1024, 4096, 2048)
    with open(big[:-4] + ".img", "wb") as f:
        f.truncate(1024 * 4096 * 2048 * 2)
mid = os.path.join(work, "mid.hdr")
if not os.path.exists(mid[:-4] + ".img"):
    header(mid, 128, 1024, 2048)
    rng = np.random.default_rng(1)
    (rng.random((128, 1024, 2048)) * 4000).astype("<u2").tofile(mid[:-4] + ".img")
pcaf = os.path.join(work, "pca.hdr")
if not os.path.exists(pcaf[:-4] + ".img"):
    header(pcaf, 200, 512, 512)
    rng = np.random.default_rng(2)
    base = rng.random((8, 512 * 512))
    mix = rng.random((200, 8))
    (mix @ base * 1000 + rng.random((200, 512 * 512)) * 50).astype("<u2").reshape(200, 512, 512).tofile(pcaf[:-4] + ".img")
for p in (mid, pcaf):  # page-cache them
    with open(p[:-4] + ".img", "rb") as f:
        while f.read(1 << 24):
            pass


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench(cases):
    """cases: {name: fn}; runs them in turn R times (alternating) after one warm-up."""
    for fn in cases.values():
        fn()
    times = {k: [] for k in cases}
    for _ in range(R):
        for k, fn in cases.items():
            times[k].append(timed(fn))
    return times


def report(title, times, unit=1.0, what="s"):
    print(f"\n{title}")
    meds = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"  {k:34s} {meds[k] * unit:10.4g} {what}  ({min(v) * unit:.4g} - {max(v) * unit:.4g})")
    h = meds.get("hsi")
    if h:
        for k, m in meds.items():
            if k != "hsi":
                print(f"  hsi is {m / h:6.2f}x {k}")


import importlib
vers = []
for m in ("numpy", "spectral", "rasterio", "sklearn"):
    try:
        vers.append("%s %s" % (m, importlib.import_module(m).__version__))
    except ImportError:
        pass
print("peers:", ", ".join(vers), "| load average %.2f %.2f %.2f" % os.getloadavg())

# the machine's yardstick: memcpy of 512 MiB
src = np.ones(1 << 28, np.uint16)
dst = np.empty_like(src)
t = min(timed(lambda: np.copyto(dst, src)) for _ in range(3))
print(f"memcpy (numpy copyto, 512 MiB): {src.nbytes / t / 1e9:.2f} GB/s")
del src, dst

cases = {"hsi": lambda: hsi.open(big).close()}
try:
    import spectral.io.envi as envi
    cases["SPy envi.open + open_memmap"] = lambda: envi.open(big).open_memmap()
except ImportError:
    print("(SPy absent)")
try:
    import rasterio
    def rio_open():
        with rasterio.open(big[:-4] + ".img") as ds:
            ds.count
    cases["rasterio.open"] = rio_open
except ImportError:
    rasterio = None
    print("(rasterio absent)")
report("open a 16 GiB sparse ENVI cube (1024 x 4096 x 2048 uint16)", bench(cases), 1e3, "ms")

cube = hsi.open(mid)
nbytes = 128 * 1024 * 2048 * 2
cases = {"hsi": lambda: hsi.stats(cube)}
raw = np.memmap(mid[:-4] + ".img", dtype="<u2", mode="r", shape=(128, 1024 * 2048))
cases["numpy on np.memmap (band rows)"] = lambda: (raw.mean(axis=1), raw.std(axis=1))
try:
    spy = envi.open(mid).open_memmap()  # (lines, samples, bands)
    def np_stats():
        a = spy.reshape(-1, spy.shape[2])
        a.mean(axis=0), a.std(axis=0)
    cases["numpy on SPy's memmap"] = np_stats
except NameError:
    pass
if rasterio:
    def rio_stats():
        with rasterio.open(mid[:-4] + ".img") as ds:
            a = ds.read()
        a.mean(axis=(1, 2)), a.std(axis=(1, 2))
    cases["rasterio read + numpy"] = rio_stats
ts = bench(cases)
report("per-band mean + std, 512 MiB uint16 BSQ (128 x 1024 x 2048), page-cached", ts)
print(f"  hsi.stats: {nbytes / statistics.median(ts['hsi']) / 1e9:.2f} GB/s")

pc = hsi.open(pcaf)
cases = {"hsi": lambda: hsi.Pipeline(normalize="zscore", pca=30).fit(pc).transform(pc)}
try:
    import sklearn
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import StandardScaler
    ver = tuple(int(x) for x in sklearn.__version__.split(".")[:2])
    solver = "covariance_eigh" if ver >= (1, 5) else "full"
    X = np.asarray(pc).reshape(200, -1).T  # (pixels, bands) view
    def sk():
        Z = StandardScaler().fit_transform(X.astype(np.float32))
        PCA(30, svd_solver=solver).fit_transform(Z)
    cases[f"scikit-learn {sklearn.__version__} ({solver})"] = sk
except ImportError:
    print("(scikit-learn absent)")
report("z-score + PCA 30, fit + transform, 512 x 512 x 200 uint16", bench(cases))
