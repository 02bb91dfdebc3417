#!/usr/bin/python3
"""bench_kernels.py - the comparison half of bench_kernels.sh: times SPy,
GDAL and scikit-learn on the very files bench_kernels.c wrote and timed,
and prints hsi's figures beside theirs as ratios. Figures, not tests.

usage: bench_kernels.py DIR HSI_JSON
"""
import json
import os
import sys
import time

import numpy as np

d, js = sys.argv[1], sys.argv[2]
h = json.load(open(js))
B, L, S = h["cube"]
gb = h["cube_bytes"] / 1e9
res = {}


def best(f, reps=2):
    t = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        t = min(t, time.perf_counter() - t0)
    return t


try:
    import spectral
except ImportError:
    spectral = None
try:
    from osgeo import gdal
    gdal.UseExceptions()
except ImportError:
    gdal = None

for il in ("bsq", "bil", "bip"):
    path = os.path.join(d, "stats_u16." + il)
    if spectral:
        img = spectral.open_image(path + ".hdr")

        def spy_stats():
            a = img.open_memmap()  # (lines, samples, bands) view of the file
            a.mean(axis=(0, 1))
            a.std(axis=(0, 1))
            a.min(axis=(0, 1))
            a.max(axis=(0, 1))
        res["spy_stats_" + il + "_s"] = best(spy_stats, 1)
    if gdal:
        def gdal_stats():
            ds = gdal.Open(path)
            for b in range(1, ds.RasterCount + 1):
                ds.GetRasterBand(b).ComputeStatistics(False)
            ds = None
        res["gdal_stats_" + il + "_s"] = best(gdal_stats, 1)
    print("# compared stats on", il, {k: round(v, 3) for k, v in res.items() if il in k}, file=sys.stderr)

# PCA 30 on 512 x 512 x 200 (BIP files), float32 and uint16
from sklearn.decomposition import PCA
for name in ("f32", "u16"):
    dt = np.float32 if name == "f32" else np.uint16
    cube = np.fromfile(os.path.join(d, "pca_%s.bip" % name), dtype=dt).reshape(512, 512, 200)
    X = cube.reshape(-1, 200)
    if spectral:
        def spy_pca():
            pc = spectral.principal_components(cube)
            pc.reduce(num=30).transform(cube)
        res["spy_pca30_%s_s" % name] = best(spy_pca, 1)
    res["sklearn_full_pca30_%s_s" % name] = best(lambda: PCA(30, svd_solver="full").fit_transform(X), 1)
    res["sklearn_randomized_pca30_%s_s" % name] = best(
        lambda: PCA(30, svd_solver="randomized", random_state=0).fit_transform(X), 1)

print("\nissue 4 kernels benchmark (%d threads, uint16 cube %d x %d x %d = %.0f MiB)"
      % (h["threads"], B, L, S, h["cube_bytes"] / 2**20))
print("memcpy at start: %.2f GB/s on %d threads (%.2f on one); per interleave, timed beside each run: %s"
      % (h["memcpy_GBps"], h["threads"], h["memcpy_1thread_GBps"],
         ", ".join("%s %.2f" % (il, h["memcpy_%s_GBps" % il]) for il in ("bsq", "bil", "bip"))))
with open("/proc/loadavg") as f:
    print("load average during the run: " + " ".join(f.read().split()[:3]))
print("%-5s %-26s %8s %8s %9s %8s %8s" % ("", "pass", "s", "GB/s", "/memcpy", "xSPy", "xGDAL"))
for il in ("bsq", "bil", "bip"):
    t = h["stats_%s_s" % il]
    mc = h["memcpy_%s_GBps" % il]
    spy = res.get("spy_stats_%s_s" % il)
    gd = res.get("gdal_stats_%s_s" % il)
    print("%-5s %-26s %8.3f %8.2f %9.2f %8s %8s" % (il, "stats (mean/std/min/max)", t, gb / t, gb / t / mc,
          "%.1f" % (spy / t) if spy else "-", "%.1f" % (gd / t) if gd else "-"))
    for k, lab in (("fused_zscore_only", "fused zscore -> f32"), ("fused_zscore_pca30", "fused zscore+PCA30 -> f32"),
                   ("cov_fit", "PCA fit (cov pass)")):
        t2 = h["%s_%s_s" % (k, il)]
        print("%-5s %-26s %8.3f %8.2f %9.2f" % (il, lab, t2, gb / t2, gb / t2 / mc))
    print("%-5s %-26s %8.3f %8.2f  (GB per CPU-second of the stats pass)" % (il, "  stats CPU time", h["stats_%s_cpu_s" % il],
          gb / h["stats_%s_cpu_s" % il]))
    if spy or gd:
        print("%-5s %-26s %8s %8s" % (il, "  SPy memmap+numpy / GDAL", "%.3f" % spy if spy else "-", "%.3f" % gd if gd else "-"))
print("(zscore -> f32 reads 2 bytes and writes 4 per uint16 value, memcpy 2 and 2: its limit is 2/3 of memcpy)")
print("\nPCA 30 components, fit + transform, 512 x 512 x 200 (seconds)")
print("%-5s %8s %8s %8s %8s %10s %10s %10s" % ("", "hsi fit", "hsi tr", "hsi", "SPy", "skl full", "skl rand", "x fastest"))
for name in ("f32", "u16"):
    t = h["pca30_%s_total_s" % name]
    others = [v for k, v in res.items() if k.endswith("pca30_%s_s" % name)]
    print("%-5s %8.3f %8.3f %8.3f %8s %10.3f %10.3f %10.1f" % (
        name, h["pca30_%s_fit_s" % name], h["pca30_%s_transform_s" % name], t,
        "%.3f" % res["spy_pca30_%s_s" % name] if "spy_pca30_%s_s" % name in res else "-",
        res["sklearn_full_pca30_%s_s" % name], res["sklearn_randomized_pca30_%s_s" % name], min(others) / t))
json.dump(res, open(os.path.splitext(js)[0] + "_python.json", "w"), indent=1)
