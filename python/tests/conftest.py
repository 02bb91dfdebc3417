"""Shared fixtures: the repository's paths, the CLI, small ENVI cubes written
by hand (numpy + a header), one training run reused by several tests."""
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYDIR)
# test the package of this checkout (it finds build/libhsi.so.0, or $HSI_LIBRARY)
sys.path.insert(0, PYDIR)

import hsi  # noqa: E402

SCENE = os.path.join(REPO, "data_samples", "scene.hdr")
GT = os.path.join(REPO, "data_samples", "scene_gt.hdr")
# the build whose CLI the results are compared with ($HSI_BUILD, as `make
# test-python` passes it, else the checkout's build/)
BUILD = os.path.abspath(os.environ.get("HSI_BUILD") or os.path.join(REPO, "build"))
CLI = os.path.join(BUILD, "hsi")
SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")

ENVI_CODE = {"u1": 1, "i2": 2, "i4": 3, "f4": 4, "f8": 5, "c8": 6, "c16": 9, "u2": 12, "u4": 13,
             "i8": 14, "u8": 15}


def run_cli(*args):
    """Runs the hsi CLI; skips when it is not built, fails with its stderr."""
    if not os.path.exists(CLI):
        pytest.skip("%s is not built" % CLI)
    p = subprocess.run([CLI] + [str(a) for a in args], capture_output=True, text=True)
    assert p.returncode == 0, "hsi %s: exit %d\n%s" % (" ".join(map(str, args)), p.returncode,
                                                        p.stderr)
    return p.stdout


def write_raw_envi(path_hdr, bsq, interleave="bsq", byte_order=0, header_offset=0, extra=""):
    """Writes a (bands, lines, samples) array as ENVI by hand (no hsi):
    data in the given interleave and byte order. Returns the header path."""
    bsq = np.asarray(bsq)
    dt = bsq.dtype.newbyteorder(">" if byte_order else "<")
    order = {"bsq": (0, 1, 2), "bil": (1, 0, 2), "bip": (1, 2, 0)}[interleave]
    data = np.ascontiguousarray(bsq.transpose(order)).astype(dt)
    base = path_hdr[:-4]
    with open(base, "wb") as f:
        f.write(b"\0" * header_offset)
        f.write(data.tobytes())
    B, L, S = bsq.shape
    with open(path_hdr, "w") as f:
        f.write("ENVI\nsamples = %d\nlines = %d\nbands = %d\nheader offset = %d\n"
                "file type = ENVI Standard\ndata type = %d\ninterleave = %s\nbyte order = %d\n%s"
                % (S, L, B, header_offset, ENVI_CODE[bsq.dtype.str[1:]], interleave, byte_order,
                   extra))
    return path_hdr


@pytest.fixture(scope="session")
def scene():
    return hsi.open(SCENE)


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """One short run (2 epochs, 3 % training pixels) with its progress events."""
    out = str(tmp_path_factory.mktemp("run") / "run")
    events = []
    metrics = hsi.train(SCENE, GT, out, progress=events.append, epochs=2, train=0.03)
    return {"out": out, "metrics": metrics, "events": events}
