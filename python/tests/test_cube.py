"""hsi.open / hsi.Cube: zero-copy views for every interleave and byte order,
metadata, DLPack, lifetime, write_envi, and errors that never crash."""
import gc
import os

import numpy as np
import pytest

import hsi
from conftest import GT, SCENE, write_raw_envi


def inside_buffer(cube, arr):
    lo, hi = np.byte_bounds(arr)
    base, size = cube.buffer_range()
    return base <= lo and hi <= base + size


def test_scene_header_and_shape(scene):
    assert scene.shape == (128, 96, 96)
    assert scene.dtype == np.dtype("uint16")
    assert scene.interleave == "bil" and scene.format == "envi"
    assert scene.header_path.endswith("scene.hdr")
    assert scene.data_path.endswith("scene.img")
    meta = scene.meta
    assert list(meta)[:4] == ["description", "samples", "lines", "bands"]
    assert meta["samples"] == "96" and meta["data type"] == "12"
    assert scene.meta_get("DATA TYPE") == "12"  # any letter case
    assert scene.meta_get("no such key") is None
    wl = scene.wavelengths
    assert wl.shape == (128,) and wl[0] == 400 and wl[-1] == 2500 and scene.wavelengths_nm
    assert np.allclose(scene.fwhm, 18.188976377952756)
    assert scene.bbl is None and scene.band_names is None and scene.ignore_value is None
    assert scene.geotransform is None and scene.crs is None
    assert scene.class_names is None and scene.warnings == []


def test_classification_file():
    gt = hsi.open(GT)
    assert gt.shape == (1, 96, 96) and gt.dtype == np.uint8
    assert gt.class_names[:2] == ["Unlabelled", "Bare soil"] and len(gt.class_names) == 9
    assert gt.class_colors[1] == (160, 110, 60)
    assert set(np.unique(gt.array)) <= set(range(9))


def test_zero_copy_scene(scene):
    a = scene.array
    assert a.shape == (128, 96, 96) and not a.flags.writeable and not a.flags.owndata
    assert a.strides == scene.strides == (192, 24576, 2)  # BIL as strides
    assert inside_buffer(scene, a)
    assert a.__array_interface__["data"][0] == scene._interface()["data"][0]
    assert np.shares_memory(a, scene.bip()) and np.shares_memory(a, scene.bil())
    assert scene.bip().shape == (96, 96, 128) and scene.bil().shape == (96, 128, 96)
    assert np.shares_memory(np.asarray(scene), a)
    assert np.array_equal(scene[5], a[5])
    raw = np.fromfile(scene.data_path, "<u2").reshape(96, 128, 96)  # BIL on disk
    assert np.array_equal(a, raw.transpose(1, 0, 2))
    with pytest.raises(ValueError):
        a[0, 0, 0] = 1  # read-only


@pytest.mark.parametrize("interleave", ["bsq", "bil", "bip"])
@pytest.mark.parametrize("byte_order", [0, 1])
@pytest.mark.parametrize("dtype", ["u2", "f4", "i2"])
def test_zero_copy_interleave_byte_order(tmp_path, interleave, byte_order, dtype):
    rng = np.random.default_rng(7)
    ref = (rng.random((5, 7, 9)) * 1000).astype(dtype)
    hdr = write_raw_envi(str(tmp_path / "c.hdr"), ref, interleave, byte_order,
                         header_offset=16)
    c = hsi.open(hdr)
    assert c.shape == (5, 7, 9) and c.interleave == interleave
    want = np.dtype(dtype).newbyteorder(">" if byte_order else "<")
    assert c.dtype == want and c.dtype.str == want.str and c.swapped == (not want.isnative)
    a = c.array
    assert a.dtype.str == want.str  # not converted, so not copied
    assert inside_buffer(c, a) and not a.flags.owndata
    assert np.array_equal(a, ref)
    assert np.array_equal(c.bip(), ref.transpose(1, 2, 0))
    assert np.array_equal(c.bil(), ref.transpose(1, 0, 2))
    assert np.shares_memory(a, c.bip())
    # a writable copy, changed, leaves the file alone
    w = np.array(c)
    assert w.flags.writeable and not np.shares_memory(w, a)
    w[...] = 0
    assert np.array_equal(hsi.open(hdr).array, ref)


def test_array_outlives_cube(tmp_path):
    ref = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    hdr = write_raw_envi(str(tmp_path / "l.hdr"), ref)
    before = hsi._lib.live["cube"]
    a = hsi.open(hdr).array
    gc.collect()
    assert a.sum() == ref.sum()
    cube = hsi.open(hdr)
    b = cube.bip()
    del cube
    gc.collect()
    assert np.array_equal(b, ref.transpose(1, 2, 0))
    # close() with views alive: the views stay valid, the handle goes with them
    cube = hsi.open(hdr)
    v = cube.array
    raw = np.asarray(cube)  # made from the Cube's own __array_interface__
    cube.close()
    cube.close()  # twice is fine
    assert cube.closed and "closed" in repr(cube)
    with pytest.raises(ValueError, match="closed"):
        cube.array
    gc.collect()
    assert v.sum() == ref.sum() and raw.sum() == ref.sum()
    assert hsi._lib.live["cube"] > before
    del a, b, v, raw, cube
    gc.collect()
    assert hsi._lib.live["cube"] == before  # every handle freed, once


def test_context_manager(tmp_path):
    hdr = write_raw_envi(str(tmp_path / "m.hdr"), np.ones((1, 2, 2), np.uint8))
    with hsi.open(hdr) as c:
        assert c.array.sum() == 4
    assert c.closed


def test_dlpack_numpy(scene):
    n = np.from_dlpack(scene)  # uint16: numpy takes it (torch 1.13 has no uint16)
    assert np.shares_memory(n, scene.array) and np.array_equal(n, scene.array)
    assert n.strides == scene.strides
    assert scene.__dlpack_device__() == (1, 0)


def test_dlpack_torch_int16(tmp_path):
    torch = pytest.importorskip("torch")
    ref = np.arange(-30, 30, dtype=np.int16).reshape(3, 4, 5)
    c = hsi.open(write_raw_envi(str(tmp_path / "i.hdr"), ref, "bil"))
    t = torch.from_dlpack(c)
    assert t.dtype == torch.int16 and tuple(t.shape) == ref.shape
    assert t.data_ptr() == c.array.__array_interface__["data"][0]  # no copy
    assert torch.equal(t, torch.from_numpy(ref))
    del c
    import gc as _gc
    _gc.collect()
    assert int(t.sum()) == int(ref.sum())  # the tensor keeps the mapping alive


def test_dlpack_float_and_swapped(tmp_path):
    torch = pytest.importorskip("torch")
    ref = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    c = hsi.open(write_raw_envi(str(tmp_path / "f.hdr"), ref, "bip"))
    t = torch.from_dlpack(c)
    assert torch.equal(t, torch.from_numpy(ref))
    assert tuple(s * 4 for s in t.stride()) == c.strides
    big = hsi.open(write_raw_envi(str(tmp_path / "b.hdr"), ref, "bsq", byte_order=1))
    with pytest.raises(BufferError, match="byte order"):
        torch.from_dlpack(big)
    cp = np.from_dlpack(_Copy(big))
    assert np.array_equal(cp, ref) and cp.dtype.isnative


class _Copy:
    """What a consumer asking for a copy passes (the DLPack 2023 keyword)."""

    def __init__(self, c):
        self.c = c

    def __dlpack__(self, stream=None):
        return self.c.__dlpack__(copy=True)

    def __dlpack_device__(self):
        return self.c.__dlpack_device__()


def test_wrap_numpy_no_copy():
    a = np.arange(3 * 4 * 5, dtype=np.int32).reshape(3, 4, 5)[:, ::-1, ::2]
    c = hsi.wrap(a)
    assert c.format == "memory" and c.shape == a.shape and c.strides == a.strides
    assert np.shares_memory(c.array, a) and np.array_equal(c.array, a)
    assert c.meta == {}


def test_write_envi_roundtrip(tmp_path, scene):
    a = scene.array[:4, :10, :12]
    meta = {"wavelength": scene.wavelengths[:4], "wavelength units": "Nanometers",
            "band names": ["a", "b", "c", "d"], "description": "from python", "data gain": 1}
    for il in ("bsq", "bil", "bip"):
        p = hsi.write_envi(str(tmp_path / ("w_%s.hdr" % il)), a, meta, interleave=il,
                           dtype="float32")
        c = hsi.open(p)
        assert c.interleave == il and c.dtype == np.float32
        assert np.array_equal(c.array, a.astype(np.float32))
        assert np.allclose(c.wavelengths, scene.wavelengths[:4])
        assert c.band_names == ["a", "b", "c", "d"]
        assert c.meta["description"] == "from python"
    p = hsi.write_envi(str(tmp_path / "map.hdr"), np.eye(5, dtype=np.uint8))  # 2-D: one band
    assert hsi.open(p).shape == (1, 5, 5)
    with pytest.raises(ValueError, match="interleave"):
        hsi.write_envi(str(tmp_path / "x.hdr"), a, interleave="bsx")
    # a big-endian dtype writes a big-endian file: its bytes are numpy's '>u2'
    p = hsi.write_envi(str(tmp_path / "be.hdr"), a, dtype=">u2")
    be = hsi.open(p)
    assert be.meta["byte order"] == "1" and be.dtype == np.dtype(">u2") and be.swapped
    raw = np.fromfile(str(tmp_path / "be"), dtype=">u2").reshape(a.shape)
    assert np.array_equal(raw, a) and np.array_equal(be.array, a)


def test_bad_paths_and_arguments(tmp_path):
    with pytest.raises(hsi.HsiError) as e:
        hsi.open(str(tmp_path / "missing.hdr"))
    assert isinstance(e.value, FileNotFoundError) and "missing.hdr" in str(e.value)
    bad = tmp_path / "bad.hdr"
    bad.write_text("ENVI\nsamples = 4\nlines = 4\nbands = 0\ndata type = 12\ninterleave = bsq\n")
    (tmp_path / "bad").write_bytes(b"\0" * 32)
    with pytest.raises(hsi.HsiError, match="bands"):
        hsi.open(str(bad))
    short = tmp_path / "short.hdr"
    short.write_text("ENVI\nsamples = 40\nlines = 40\nbands = 3\ndata type = 12\n"
                     "interleave = bsq\nbyte order = 0\n")
    (tmp_path / "short").write_bytes(b"\0" * 100)
    with pytest.raises(hsi.HsiError) as e:
        hsi.open(str(short))
    assert str(e.value) and e.value.status < 0
    not_envi = tmp_path / "text.hdr"
    not_envi.write_text("hello\n")
    with pytest.raises(hsi.HsiError):
        hsi.open(str(not_envi))
    with pytest.raises(TypeError):
        hsi.open(42)
    with pytest.raises(TypeError):
        hsi.open(SCENE, var=3)
    with pytest.raises(ValueError):
        hsi.wrap(np.zeros((2, 3)))
    with pytest.raises(ValueError):
        hsi.wrap(np.zeros((0, 3, 3)))
    with pytest.raises(TypeError):
        hsi.wrap(np.zeros((1, 2, 2), bool))
    with pytest.raises(hsi.HsiError, match="float16"):
        hsi.wrap(np.zeros((1, 2, 2), np.float16))
    with pytest.raises(TypeError):
        hsi.as_cube(None)


def test_path_like(tmp_path):
    import pathlib
    c = hsi.open(pathlib.Path(SCENE))
    assert c.shape == (128, 96, 96)
    assert os.path.samefile(c.header_path, SCENE)
