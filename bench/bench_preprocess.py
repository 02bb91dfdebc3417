#!/usr/bin/python3
"""bench_preprocess.py - the whole `hsi preprocess --normalize zscore --pca 30`
command (statistics, PCA fit, projection, write) on uint16 BIL cubes of
several sizes, in and out of the page cache, beside the same job written
with numpy + scikit-learn (peer_preprocess.py, each Python given), and the
machine's bound for the job measured in the same run (bench_preprocess
bound: OpenBLAS ssyrk or the VNNI int16 covariance rate, sgemm, memcpy,
the disk read). Runs alternate
hsi / peers; medians and min-max of the repeats; peak RSS. Figures, never
pass/fail.

usage: bench_preprocess.py HSI BENCH_BIN DIR SIZES_MIB PYTHON...
"""
import json
import os
import subprocess
import sys
import time

hsi, tool, d, sizes = sys.argv[1], sys.argv[2], sys.argv[3], [int(s) for s in sys.argv[4].split()]
pythons = sys.argv[5:]
here = os.path.dirname(os.path.abspath(__file__))
B, S, K = 200, 1024, 30
REPS = int(os.environ.get("HSI_BENCH_REPEATS", "3"))


def drop_cache(path):
    """Evicts a file's clean pages (no root needed): the next read is the disk's."""
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def warm(path):
    with open(path, "rb") as f:
        while f.read(8 << 20):
            pass


def timed(cmd):
    """(wall s, peak RSS MiB, exit code) of one run under /usr/bin/time."""
    r = subprocess.run(["/usr/bin/time", "-f", "%e %M"] + cmd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    last = r.stderr.strip().splitlines()[-1].split()
    if r.returncode:
        sys.stderr.write(r.stderr[-2000:])
    return float(last[0]), int(last[1]) / 1024.0, r.returncode


def disk_rate(path):
    drop_cache(path)
    t0 = time.perf_counter()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(8 << 20)
            if not b:
                break
            n += len(b)
    return n / (time.perf_counter() - t0) / 1e9


def mem_available():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def version(py):
    r = subprocess.run([py, "-c", "import numpy, sklearn; print(numpy.__version__, sklearn.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


peers = [(py, version(py)) for py in pythons]
peers = [(py, v) for py, v in peers if v]
rows = []
for mib in sizes:
    L = mib * 2**20 // (B * S * 2)
    name = "prep_%dmib" % mib
    src = os.path.join(d, name)
    subprocess.run([tool, "gen", d, name, str(B), str(L), str(S)], check=True)
    nbytes = B * L * S * 2
    out_bytes = K * L * S * 4
    bound = json.loads(subprocess.run([tool, "bound", str(B), str(L * S), str(K)], check=True,
                                      capture_output=True, text=True).stdout)
    disk = disk_rate(src)
    # the covariance: OpenBLAS ssyrk, or int16 pair products where the CPU has VNNI (the cube is uint16)
    cov = min(bound["ssyrk_s"], bound["vnni_cov_s"]) if bound.get("vnni_cov_s", 0) > 0 else bound["ssyrk_s"]
    compute = cov + bound["sgemm_proj_s"] + out_bytes / bound["memcpy_GBps"] / 1e9
    b_warm = compute + 2 * nbytes / bound["memcpy_GBps"] / 1e9
    b_cold = max(nbytes / disk / 1e9, cov) + compute - cov + nbytes / bound["memcpy_GBps"] / 1e9
    fits = 8 * nbytes < 0.7 * mem_available()  # the peer holds ~4 float32 copies
    for mode in ("warm", "cold"):
        res = {"hsi": []}
        for r in range(REPS):
            runs = [("hsi", [hsi, "preprocess", src + ".hdr", os.path.join(d, "out_hsi.hdr"), "--overwrite",
                             "--normalize", "zscore", "--pca", str(K)])]
            if fits:
                for py, v in peers:
                    runs.append(("numpy %s + sklearn %s" % tuple(v.split()),
                                 [py, os.path.join(here, "peer_preprocess.py"), src, os.path.join(d, "out_peer.bsq"),
                                  str(B), str(L), str(S), str(K)]))
            for label, cmd in runs:
                if mode == "cold":
                    drop_cache(src)
                else:
                    warm(src)
                res.setdefault(label, []).append(timed(cmd))
        for label, v in res.items():
            walls = sorted(x[0] for x in v)
            rows.append({"MiB": mib, "mode": mode, "who": label, "median_s": walls[len(walls) // 2],
                         "min_s": walls[0], "max_s": walls[-1], "rss_MiB": max(x[1] for x in v),
                         "failed": sum(1 for x in v if x[2]), "bound_s": b_warm if mode == "warm" else b_cold,
                         "GBps": nbytes / walls[len(walls) // 2] / 1e9})
        if not fits:
            rows.append({"MiB": mib, "mode": mode, "who": "peers skipped (need ~%d GiB)" % (8 * nbytes >> 30)})
    for f in (src, src + ".hdr", os.path.join(d, "out_hsi.hdr"), os.path.join(d, "out_hsi"),
              os.path.join(d, "out_peer.bsq")):
        if os.path.exists(f):
            os.remove(f)
    sys.stderr.write("# %d MiB done; bound %s, disk %.2f GB/s\n" % (mib, bound, disk))

with open("/proc/loadavg") as f:
    load = " ".join(f.read().split()[:3])
print("\nissue 16: `hsi preprocess --normalize zscore --pca %d` whole command, uint16 BIL, %d bands x %d samples"
      % (K, B, S))
print("bound = the covariance (OpenBLAS ssyrk, or int16 pair products by VNNI where the CPU has them, the"
      " faster) + sgemm (projection) + reads and write at memcpy; cold: the disk read overlapped with the"
      " covariance. %d alternating repeats; load average at the end %s" % (REPS, load))
print("%6s %5s %-34s %8s %15s %7s %8s %8s %9s" % ("MiB", "cache", "who", "median s", "min-max", "GB/s",
                                                   "RSS MiB", "bound s", "x bound"))
for r in rows:
    if "median_s" not in r:
        print("%6d %5s %s" % (r["MiB"], r["mode"], r["who"]))
        continue
    print("%6d %5s %-34s %8.3f %7.3f-%-7.3f %7.2f %8.0f %8.3f %9.2f%s" % (
        r["MiB"], r["mode"], r["who"], r["median_s"], r["min_s"], r["max_s"], r["GBps"], r["rss_MiB"],
        r["bound_s"], r["bound_s"] / r["median_s"], "  (%d failed)" % r["failed"] if r["failed"] else ""))
json.dump(rows, open(os.path.join(here, "out", "preprocess.json"), "w"), indent=1)
