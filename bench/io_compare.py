#!/usr/bin/python3
"""The same per-band-sum pass as `hsi bench io`, done the way users do it
today: SPy (open_memmap + numpy) and GDAL (ReadAsArray per band), on the
cubes hsi created. Reads hsi's JSON on stdin, prints a side-by-side table
with ratios. Run by bench/run.sh with Debian's /usr/bin/python3."""
import json
import sys
import time

hsi = json.load(sys.stdin)
d = hsi["dir"]
mib = hsi["cube_bytes"] // (1024 * 1024)
nbytes = hsi["cube_bytes"]
rows = []


def best_of(fn, reps=3):
    best = 1e30
    out = None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


try:
    import numpy as np
    import spectral.io.envi as envi

    for il in ("bsq", "bil", "bip"):
        img = envi.open(f"{d}/cube_{mib}mib_{il}.hdr", f"{d}/cube_{mib}mib_{il}")
        mm = img.open_memmap(interleave="source")
        # per-band sum; axis order depends on the source interleave
        band_axis = {"bsq": 0, "bil": 1, "bip": 2}[il]
        axes = tuple(a for a in range(3) if a != band_axis)
        t, s = best_of(lambda: mm.sum(axis=axes, dtype=np.uint64))
        rows.append(("SPy open_memmap + numpy", il, nbytes / t / 1e9, int(s.sum())))
except Exception as e:  # report, do not hide
    print(f"SPy comparison skipped: {e}", file=sys.stderr)

try:
    from osgeo import gdal
    import numpy as np

    gdal.UseExceptions()
    for il in ("bsq", "bil", "bip"):
        ds = gdal.Open(f"{d}/cube_{mib}mib_{il}")

        def gdal_pass():
            tot = 0
            for b in range(ds.RasterCount):
                tot += int(ds.GetRasterBand(b + 1).ReadAsArray().sum(dtype=np.uint64))
            return tot

        t, s = best_of(gdal_pass, reps=2)
        rows.append(("GDAL ReadAsArray per band", il, nbytes / t / 1e9, s))
except Exception as e:
    print(f"GDAL comparison skipped: {e}", file=sys.stderr)

print(f"\nper-band sum over a {mib} MiB uint16 cube ({hsi['threads']} threads for hsi)")
print(f"{'tool':28s} {'layout':6s} {'GB/s':>8s} {'hsi is':>10s}  checksum")
for il in ("bsq", "bil", "bip"):
    g = hsi["pass_gbs"][il]
    print(f"{'hsi':28s} {il:6s} {g:8.2f} {'':>10s}  {hsi['checksum']}")
    for name, l2, gbs, s in rows:
        if l2 == il:
            ok = "" if s == hsi["checksum"] else "  (checksum differs!)"
            print(f"{name:28s} {il:6s} {gbs:8.2f} {g / gbs:9.1f}x  {s}{ok}")
print(f"{'memcpy (same run)':28s} {'':6s} {hsi['memcpy_gbs']:8.2f}")
print(f"open time: {hsi['open_us_small']:.1f} us ({mib} MiB), "
      f"{hsi['open_us_sparse16g']:.1f} us (16 GiB sparse)")
