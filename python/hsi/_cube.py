"""_cube.py — hsi.open, hsi.wrap, hsi.Cube (zero-copy numpy views over the
mapped file, DLPack), hsi.stats and hsi.write_envi. Not preprocessing
(_pipeline.py) or training (_run.py)."""
import ctypes
import math
import numbers
import os
import sys

import numpy as np

from . import _lib
from ._lib import Handle, check, fs, lib, text

_INTERLEAVES = ("bsq", "bil", "bip")


class _View:
    """What numpy sees: the array interface of one cube's (band, line, sample)
    data. np.asarray(view) gives an array whose .base is this object, which
    holds the C handle (and the Cube) alive for as long as the array lives."""

    __slots__ = ("__array_interface__", "handle", "cube")

    def __init__(self, cube, writable=False):
        self.handle = cube._handle()
        self.cube = cube
        self.__array_interface__ = cube._interface(readonly=not writable)


class Cube:
    """A hyperspectral cube opened by libhsi (hsi.open) or wrapped around a
    numpy array (hsi.wrap). Logical axes are (band, line, sample) whatever
    the file's interleave; `.array` is a read-only view of the mapped file
    (no copy), with the file's byte order as the dtype's ('>u2')."""

    def __init__(self, handle, source=None):
        self._h = handle
        self._exported = None  # the Handle, once __array_interface__ was handed out
        self._source = source
        p = handle.ptr
        sh, st = (ctypes.c_int64 * 3)(), (ctypes.c_int64 * 3)()
        lib.hsi_hcube_shape(p, sh)
        lib.hsi_hcube_strides(p, st)
        self._shape = tuple(int(x) for x in sh)
        self._strides = tuple(int(x) for x in st)
        dt = np.dtype(text(lib.hsi_hcube_dtype(p)))
        self._swapped = bool(lib.hsi_hcube_swapped(p))
        self._dtype = dt.newbyteorder("S") if self._swapped else dt
        self._meta = None

    # ------------------------------------------------------------ lifetime

    def _handle(self):
        if self._h is None:
            raise ValueError("operation on a closed hsi.Cube")
        return self._h

    def _ptr(self):
        return self._handle().ptr

    def close(self):
        """Releases this object's hold on the C handle. Arrays taken from the
        cube keep the mapping alive until they are gone, so they stay valid."""
        self._h = None

    @property
    def closed(self):
        return self._h is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self._h is None:
            return "<hsi.Cube (closed)>"
        name = self.header_path or self.data_path or self._source or "memory"
        return "<hsi.Cube %r %s %s %s (bands, lines, samples)=%s>" % (
            os.path.basename(name) if name else name, self.format, self.interleave,
            self._dtype.str if self._swapped else self._dtype.name, self._shape)

    # ------------------------------------------------------------ layout

    @property
    def shape(self):
        """(bands, lines, samples)."""
        return self._shape

    @property
    def strides(self):
        """Byte strides of the (band, line, sample) axes."""
        return self._strides

    @property
    def dtype(self):
        """numpy dtype, in the file's byte order (e.g. dtype('>u2'))."""
        return self._dtype

    @property
    def swapped(self):
        """True when the elements are stored in the non-native byte order."""
        return self._swapped

    @property
    def ndim(self):
        return 3

    @property
    def size(self):
        return self._shape[0] * self._shape[1] * self._shape[2]

    @property
    def nbytes(self):
        return self.size * self._dtype.itemsize

    @property
    def n_bands(self):
        return self._shape[0]

    @property
    def n_lines(self):
        return self._shape[1]

    @property
    def n_samples(self):
        return self._shape[2]

    @property
    def interleave(self):
        return text(lib.hsi_hcube_interleave(self._ptr()))

    @property
    def format(self):
        return text(lib.hsi_hcube_format(self._ptr()))

    @property
    def header_path(self):
        return text(lib.hsi_hcube_header_path(self._ptr())) or None

    @property
    def data_path(self):
        return text(lib.hsi_hcube_data_path(self._ptr())) or None

    def buffer_range(self):
        """(address, size in bytes) of the whole mapping or buffer the data lie
        in: np.byte_bounds(cube.array) lies inside it (zero-copy)."""
        n = ctypes.c_size_t()
        base = lib.hsi_hcube_buffer(self._ptr(), ctypes.byref(n))
        return (base or 0), n.value

    # ------------------------------------------------------------ numpy

    def _interface(self, readonly=True):
        ptr = lib.hsi_hcube_data(self._ptr())
        if not ptr:
            raise _lib.HsiError("hsi.Cube: the C handle has no data pointer")
        return {"version": 3, "shape": self._shape, "typestr": self._dtype.str,
                "descr": self._dtype.descr, "strides": self._strides,
                "data": (ptr, bool(readonly))}

    @property
    def __array_interface__(self):
        # an array made from this interface has the Cube as its base: from now
        # on close() must not let the handle go before the Cube itself does
        self._exported = self._handle()
        return self._interface()

    @property
    def array(self):
        """Read-only (band, line, sample) numpy view over the data (no copy)."""
        return np.asarray(_View(self))

    def bsq(self):
        """(band, line, sample) view: the same as .array."""
        return self.array

    def bil(self):
        """(line, band, sample) view, no copy."""
        return self.array.transpose(1, 0, 2)

    def bip(self):
        """(line, sample, band) view, no copy (SPy's open_memmap() order)."""
        return self.array.transpose(1, 2, 0)

    def __getitem__(self, index):
        return self.array[index]

    def __len__(self):
        return self._shape[0]

    # DLPack (torch.from_dlpack(cube), np.from_dlpack(cube))
    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """Exports the data without a copy. DLPack has no read-only flag: the
        consumer must not write to the tensor (the file is mapped read-only).
        copy=True exports a private native-order copy instead."""
        if dl_device is not None and tuple(dl_device) != (1, 0):
            raise BufferError("hsi.Cube lives in host memory; cannot export to device %r"
                              % (dl_device,))
        if copy:
            return np.array(self.array, dtype=self._dtype.newbyteorder("=")).__dlpack__()
        if self._swapped:
            raise BufferError(
                "hsi.Cube: the data are stored as %s (non-native byte order) and DLPack has no "
                "byte order; convert first: np.asarray(cube).astype(%r), or pass copy=True"
                % (self._dtype.str, self._dtype.newbyteorder("=").str))
        # numpy refuses to export read-only arrays: export a writable alias of
        # the same memory; its base keeps the handle alive
        return np.asarray(_View(self, writable=True)).__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0

    # ------------------------------------------------------------ metadata

    @property
    def meta(self):
        """Every header key in file order -> its value text (braces removed)."""
        if self._meta is None:
            p = self._ptr()
            d = {}
            for i in range(lib.hsi_hcube_meta_count(p)):
                k = lib.hsi_hcube_meta_key(p, i)
                if k is None:
                    break
                d[text(k)] = text(lib.hsi_hcube_meta_value(p, i))
            self._meta = d
        return dict(self._meta)

    def meta_get(self, key, default=None):
        """The value text of a header key (any letter case), or default."""
        v = lib.hsi_hcube_meta_get(self._ptr(), key.encode())
        return default if v is None else text(v)

    def _per_band(self, ptr):
        if not ptr:
            return None
        return np.ctypeslib.as_array(ptr, shape=(self._shape[0],)).copy()

    @property
    def wavelengths(self):
        """(bands) float64, nanometres when the header's units were known
        (see .wavelengths_nm); None when the header has none."""
        return self._per_band(lib.hsi_hcube_wavelengths(self._ptr()))

    @property
    def wavelengths_nm(self):
        """True when .wavelengths are nanometres."""
        return bool(lib.hsi_hcube_wavelengths_nm(self._ptr()))

    @property
    def fwhm(self):
        return self._per_band(lib.hsi_hcube_fwhm(self._ptr()))

    @property
    def bbl(self):
        """(bands) bool, True = good band; None when the header has no bbl."""
        v = self._per_band(lib.hsi_hcube_bbl(self._ptr()))
        return None if v is None else v != 0

    @property
    def band_names(self):
        p = self._ptr()
        names = [lib.hsi_hcube_band_name(p, b) for b in range(self._shape[0])]
        if all(n is None for n in names):
            return None
        return [text(n) if n is not None else None for n in names]

    @property
    def ignore_value(self):
        v = ctypes.c_double()
        return v.value if lib.hsi_hcube_ignore_value(self._ptr(), ctypes.byref(v)) else None

    @property
    def geotransform(self):
        """GDAL's 6-number geotransform of the map info, or None."""
        gt = (ctypes.c_double * 6)()
        return tuple(gt) if lib.hsi_hcube_geotransform(self._ptr(), gt) else None

    @property
    def crs(self):
        """The coordinate system as WKT, or None."""
        p = ctypes.c_void_p()
        check(lib.hsi_hcube_crs_wkt(self._ptr(), ctypes.byref(p)), "hsi_hcube_crs_wkt")
        return _lib.take_string(p)

    @property
    def class_names(self):
        """Classification files: the name of each class value 0..n-1, else None."""
        p = self._ptr()
        n = lib.hsi_hcube_n_classes(p)
        if n <= 0:
            return None
        return [text(lib.hsi_hcube_class_name(p, k)) for k in range(n)]

    @property
    def class_colors(self):
        """Classification files: (r, g, b) of each class (None where unknown)."""
        p = self._ptr()
        n = lib.hsi_hcube_n_classes(p)
        if n <= 0:
            return None
        out = []
        for k in range(n):
            rgb = (ctypes.c_uint8 * 3)()
            out.append(tuple(int(x) for x in rgb) if lib.hsi_hcube_class_color(p, k, rgb)
                       else None)
        return out

    @property
    def warnings(self):
        """The reader's warnings (not fatal), as a list of strings."""
        p = self._ptr()
        out = []
        while True:
            w = lib.hsi_hcube_warning(p, len(out))
            if w is None:
                return out
            out.append(text(w))


# ---------------------------------------------------------------- opening

def open(path, var=None):  # noqa: A001 (hsi.open, like spectral.open_image)
    """Opens any cube hsi reads (ENVI .hdr, PI .spe, MATLAB .mat, GDAL
    rasters). var: the .mat variable or GDAL subdataset (None = choose). Raw
    formats are mapped, not read."""
    p = os.fspath(path)
    if not isinstance(p, (str, bytes)):
        raise TypeError("hsi.open: path must be a str or path-like, not %s" % type(path).__name__)
    if var is not None and not isinstance(var, str):
        raise TypeError("hsi.open: var must be a str or None")
    out = ctypes.c_void_p()
    st = lib.hsi_hcube_open(ctypes.byref(out), fs(p), var.encode() if var else None)
    if st != 0:
        err = _lib.error(st, "hsi_hcube_open")
        if st == _lib.ERR_IO and not os.path.exists(p):
            err = _lib.HsiNotFoundError(str(err), st)
        raise err
    return Cube(Handle("cube", out.value), source=os.fsdecode(p))


_WRAP_KINDS = "uifc"


def wrap(array):
    """A Cube over a 3-D (band, line, sample) numpy array, without a copy
    (any strides, either byte order). The Cube keeps the array alive."""
    if isinstance(array, Cube):
        return array
    a = np.asarray(array)
    if a.ndim != 3:
        raise ValueError("hsi: expected a 3-D (bands, lines, samples) array, got shape %s"
                         % (a.shape,))
    if a.size == 0:
        raise ValueError("hsi: the array is empty (shape %s)" % (a.shape,))
    if a.dtype.kind not in _WRAP_KINDS or a.dtype.fields is not None:
        raise TypeError("hsi: arrays of dtype %s are not supported (integers, floats, complex)"
                        % a.dtype)
    native = a.dtype.newbyteorder("=") if not a.dtype.isnative else a.dtype
    shape = (ctypes.c_int64 * 3)(*a.shape)
    strides = (ctypes.c_int64 * 3)(*a.strides)
    out = ctypes.c_void_p()
    check(lib.hsi_hcube_wrap(ctypes.byref(out), ctypes.c_void_p(a.__array_interface__["data"][0]),
                             native.name.encode(), shape, strides, 0 if a.dtype.isnative else 1),
          "hsi_hcube_wrap")
    return Cube(Handle("cube", out.value, keep=a))


def as_cube(obj):
    """A Cube from a Cube, a path or an array (wrapped, no copy)."""
    if isinstance(obj, Cube):
        obj._handle()
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return open(obj)
    if obj is None or isinstance(obj, (numbers.Number, bytes)):
        raise TypeError("hsi: expected a Cube, a path or a (bands, lines, samples) array, not %s"
                        % type(obj).__name__)
    return wrap(obj)


def _plane(obj, shape, what):
    """A (lines, samples) numpy array from a Cube of one band, a path, or an
    array (2-D, or 3-D with one band)."""
    if isinstance(obj, (str, os.PathLike)):
        obj = open(obj)
    a = np.asarray(obj.array if isinstance(obj, Cube) else obj)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 2 or tuple(a.shape) != tuple(shape):
        raise ValueError("hsi: %s must be (lines, samples) = %s, got shape %s"
                         % (what, tuple(shape), a.shape))
    return a


def mask_array(mask, shape):
    """(lines * samples) uint8 C-contiguous 0/1 mask, or None."""
    if mask is None:
        return None
    a = _plane(mask, shape, "mask")
    return np.ascontiguousarray(a != 0, dtype=np.uint8)


def _ptr(a):
    return ctypes.c_void_p(a.__array_interface__["data"][0]) if a is not None else None


# ---------------------------------------------------------------- statistics

def stats(cube, mask=None):
    """Per-band statistics over the pixels where mask is nonzero (mask:
    (lines, samples) array, a label Cube or path; None = all), skipping the
    ignore value and NaN: dict of (bands) arrays mean, std, min, max (float64)
    and count (int64)."""
    c = as_cube(cube)
    m = mask_array(mask, c.shape[1:])
    n = c.shape[0]
    out = {k: np.empty(n, np.float64) for k in ("mean", "std", "min", "max")}
    out["count"] = np.empty(n, np.int64)
    d = ctypes.POINTER(ctypes.c_double)
    check(lib.hsi_hcube_stats(c._ptr(), _ptr(m), *(out[k].ctypes.data_as(d) for k in
                                                   ("mean", "std", "min", "max")),
                              out["count"].ctypes.data_as(ctypes.POINTER(ctypes.c_int64))),
          "hsi_hcube_stats")
    return out


# ---------------------------------------------------------------- writing

def _scalar_text(v):
    if isinstance(v, (bytes, bytearray)):
        return v.decode()
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
        f = float(v)
        return repr(f) if math.isfinite(f) else str(f)
    return str(v)


def _value_text(v):
    if isinstance(v, np.ndarray):
        v = v.ravel().tolist()
    if isinstance(v, (list, tuple)):
        return "{" + ", ".join(_scalar_text(x) for x in v) + "}"
    return _scalar_text(v)


def write_envi(path, array, meta=None, interleave="bsq", dtype=None):
    """Writes an ENVI cube (header at `path`, data beside it without the
    .hdr), atomically. array: a Cube, a (bands, lines, samples) array or a
    (lines, samples) one (one band). meta: header key -> value; lists and
    tuples become "{a, b, c}". dtype: numpy dtype of the file, None = the
    array's; a non-native byte order ('>u2') writes the file big-endian
    ("byte order = 1"). Returns the header path."""
    p = os.fspath(path)
    if isinstance(array, Cube):
        c = array
    else:
        a = np.asarray(array)
        if a.ndim == 2:
            a = a[None]
        c = wrap(a)
    if interleave is None:
        interleave = "bsq"
    if not isinstance(interleave, str) or interleave.lower() not in _INTERLEAVES:
        raise ValueError("hsi.write_envi: interleave must be one of bsq, bil, bip (got %r)"
                         % (interleave,))
    dname = None
    meta = {k: v for k, v in dict(meta or {}).items() if str(k).strip().lower() != "byte order"}
    if dtype is not None:
        dt = np.dtype(dtype)
        dname = dt.name.encode()
        if dt.itemsize > 1:
            big = dt.byteorder == ">" or (dt.byteorder == "=" and sys.byteorder == "big")
            meta["byte order"] = 1 if big else 0
    keys = [str(k).encode() for k, v in meta.items() if v is not None]
    vals = [_value_text(v).encode() for v in meta.values() if v is not None]
    n = len(keys)
    karr = (ctypes.c_char_p * max(n, 1))(*keys)
    varr = (ctypes.c_char_p * max(n, 1))(*vals)
    check(lib.hsi_hcube_write_envi(c._ptr(), fs(p), interleave.lower().encode(), dname, karr,
                                   varr, n), "hsi_hcube_write_envi")
    return os.fsdecode(p)
