"""hsi's views against independent readers: Spectral Python (SPy), GDAL and
scipy.io.loadmat, on data_samples/ and on the real files of ../shared/data
(skipped when that folder is absent)."""
import glob
import os
import struct

import numpy as np
import pytest

import hsi
from conftest import SCENE, SHARED, write_raw_envi

ENVI_DIR = os.path.join(SHARED, "envi")


def real_envi_headers():
    """Headers in shared/data/envi that have their data file beside them."""
    if not os.path.isdir(ENVI_DIR):
        return []
    out = []
    for hdr in sorted(glob.glob(os.path.join(ENVI_DIR, "*", "*.hdr"))):
        base = hdr[:-4]
        if any(os.path.exists(base + ext) for ext in ("", ".img", ".dat", ".raw", ".sli")):
            out.append(hdr)
    return out


REAL = real_envi_headers()
needs_shared = pytest.mark.skipif(not REAL, reason="../shared/data/envi is absent")


def spy_bip(hdr):
    envi = pytest.importorskip("spectral.io.envi")
    return envi.open(hdr).open_memmap()  # (lines, samples, bands)


def gdal_bsq(path):
    gdal = pytest.importorskip("osgeo.gdal")
    gdal.UseExceptions()
    ds = gdal.Open(path)
    a = ds.ReadAsArray()
    return a[None] if a.ndim == 2 else a  # (bands, lines, samples)


def test_scene_equals_spy(scene):
    ref = spy_bip(SCENE)
    assert ref.shape == scene.bip().shape
    assert np.array_equal(np.asarray(ref), scene.bip())


def test_scene_equals_gdal(scene):
    ref = gdal_bsq(scene.data_path)
    assert ref.shape == scene.shape and np.array_equal(ref, scene.array)


@pytest.mark.parametrize("interleave", ["bsq", "bil", "bip"])
def test_big_endian_equals_spy_and_gdal(tmp_path, interleave):
    ref = (np.arange(3 * 5 * 7) * 97 % 60000).astype(np.uint16).reshape(3, 5, 7)
    hdr = write_raw_envi(str(tmp_path / "be.hdr"), ref, interleave, byte_order=1)
    c = hsi.open(hdr)
    assert c.dtype.str == ">u2"
    assert np.array_equal(np.asarray(spy_bip(hdr)), c.bip())
    assert np.array_equal(gdal_bsq(c.data_path), c.array)


@needs_shared
@pytest.mark.parametrize("hdr", REAL, ids=[os.path.basename(h) for h in REAL])
def test_real_envi_files(hdr):
    c = hsi.open(hdr)
    a = c.array
    lo, hi = np.byte_bounds(a)
    base, size = c.buffer_range()
    assert base <= lo and hi <= base + size  # a view of the mapping
    compared = 0
    envi = pytest.importorskip("spectral.io.envi")
    try:
        obj = envi.open(hdr)
        # a spectral library: (spectra, bands) = hsi's (lines, samples) of one band
        ref = (np.asarray(obj.spectra)[:, :, None] if hasattr(obj, "spectra")
               else np.asarray(obj.open_memmap()))
    except Exception:  # SPy refuses some real headers (no `byte order`)
        ref = None
    if ref is not None:
        assert ref.shape == c.bip().shape
        assert np.array_equal(ref, c.bip(), equal_nan=a.dtype.kind == "f")
        compared += 1
    try:
        g = gdal_bsq(c.data_path)
    except pytest.skip.Exception:
        raise
    except Exception:
        g = None
    if g is not None and g.shape == c.shape:
        assert np.array_equal(g, a, equal_nan=a.dtype.kind == "f")
        compared += 1
    assert compared, "neither SPy nor GDAL read %s" % hdr
    wl = c.meta_get("wavelength")
    if wl is not None and len(wl.split(",")) == c.shape[0]:  # (a library's are per sample)
        header = np.array([float(v) for v in wl.replace("\n", " ").split(",")])
        units = (c.meta_get("wavelength units") or "").strip().lower()
        factor = 1000.0 if c.wavelengths_nm and units in ("micrometers", "um", "microns") \
            else 1.0
        assert c.wavelengths.shape == (c.shape[0],)
        assert np.allclose(c.wavelengths, header * factor)


@needs_shared
def test_real_metadata():
    d = os.path.join(ENVI_DIR, "isofit_avirisng_topoflux")
    obs = hsi.open(os.path.join(d, "ang20160910t185702_obs_ortdem_mod.hdr"))
    assert obs.ignore_value == -9999
    assert obs.geotransform is not None and obs.crs
    small = os.path.join(ENVI_DIR, "isofit_avirisng_small_chunk")
    o = hsi.open(os.path.join(small, "ang20170323t202244_obs_7000-7010.hdr"))
    assert o.band_names is not None and len(o.band_names) == 11 and o.dtype == np.float64


@pytest.mark.skipif(not os.path.exists(os.path.join(SHARED, "salinas_a",
                                                    "SalinasA_corrected.mat")),
                    reason="../shared/data/salinas_a is absent")
def test_mat_equals_scipy():
    sio = pytest.importorskip("scipy.io")
    path = os.path.join(SHARED, "salinas_a", "SalinasA_corrected.mat")
    ref = sio.loadmat(path)["salinasA_corrected"]  # (rows, cols, bands)
    c = hsi.open(path)
    assert c.format == "mat" and c.bip().shape == ref.shape
    assert np.array_equal(c.bip(), ref)
    gt = hsi.open(os.path.join(SHARED, "salinas_a", "SalinasA_gt.mat"))
    assert np.array_equal(gt.array[0], sio.loadmat(os.path.join(SHARED, "salinas_a",
                                                                "SalinasA_gt.mat"))["salinasA_gt"])


SPE2 = sorted(glob.glob(os.path.join(SHARED, "spe", "v2x", "*")))


@pytest.mark.skipif(not SPE2, reason="../shared/data/spe is absent")
@pytest.mark.parametrize("path", SPE2, ids=[os.path.basename(p) for p in SPE2])
def test_spe_v2_values(path):
    """The elements hsi maps are the file's data block (4100-byte header),
    whatever axis order it gives them: equal as sorted multisets."""
    raw = open(path, "rb").read()
    xdim = struct.unpack_from("<H", raw, 42)[0]
    ydim = struct.unpack_from("<H", raw, 656)[0]
    frames = struct.unpack_from("<i", raw, 1446)[0]
    code = struct.unpack_from("<h", raw, 108)[0]
    dt = {0: "<f4", 1: "<i4", 2: "<i2", 3: "<u2"}[code]
    data = np.frombuffer(raw, dt, count=xdim * ydim * frames, offset=4100)
    c = hsi.open(path)
    assert c.format == "spe" and c.size == data.size
    assert np.array_equal(np.sort(c.array, axis=None), np.sort(data))
