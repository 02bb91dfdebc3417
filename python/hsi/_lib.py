"""_lib.py — finds and loads libhsi.so, declares every function of the C API
(pipeline/capi.h) for ctypes, and turns a failed call into an exception.
Not the Python API (hsi/_cube.py, _pipeline.py, _run.py): nothing here knows about numpy.

Search order for the library:
  1. $HSI_LIBRARY (a path; an error when it does not load)
  2. hsi/_lib/libhsi.so.0, bundled inside the package by `make python`
  3. <repository>/build/libhsi.so.0 when the package runs from a checkout
  4. ctypes.util.find_library("hsi") (an installed libhsi)
ctypes releases the GIL for the duration of every foreign call; callbacks
(the training progress) take it again while they run.
"""
import ctypes
import ctypes.util
import os
from ctypes import (CFUNCTYPE, POINTER, c_char_p, c_double, c_int, c_int64, c_size_t, c_uint8,
                    c_void_p)

ABI_VERSION = 1  # HSI_ABI_VERSION of the capi.h this package was written against

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("HSI_LIBRARY")
    if env:
        return [("HSI_LIBRARY", env)]
    out = [("bundled", os.path.join(_HERE, "_lib", "libhsi.so.0")),
           ("checkout", os.path.join(os.path.dirname(os.path.dirname(_HERE)), "build",
                                     "libhsi.so.0"))]
    found = ctypes.util.find_library("hsi")
    if found:
        out.append(("system", found))
    return out


def _load():
    tried = []
    for where, path in _candidates():
        if where in ("bundled", "checkout") and not os.path.exists(path):
            tried.append("%s: %s (absent)" % (where, path))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            if where == "HSI_LIBRARY":
                raise ImportError("hsi: HSI_LIBRARY=%s does not load: %s" % (path, e)) from None
            tried.append("%s: %s (%s)" % (where, path, e))
    raise ImportError("hsi: libhsi.so not found; build it with `make` (or `make python`), or "
                      "set HSI_LIBRARY to its path. Tried:\n  " + "\n  ".join(tried))


lib, path = _load()

c_status = c_int
c_int64_p = POINTER(c_int64)
c_double_p = POINTER(c_double)
c_int_p = POINTER(c_int)
c_uint8_p = POINTER(c_uint8)

# typedef int (*hsi_progress_fn)(void *ctx, int kind, const char *text, int epoch, int epochs,
#                                double loss, double train_acc, double val_oa, double lr);
PROGRESS_FN = CFUNCTYPE(c_int, c_void_p, c_int, c_char_p, c_int, c_int, c_double, c_double,
                        c_double, c_double)

# name: (restype, argtypes) — every function of capi.h, plus the three of core.h it names
_PROTOTYPES = {
    # versions, strings, errors
    "hsi_version": (c_char_p, []),
    "hsi_abi_version": (c_int, []),
    "hsi_string_free": (None, [c_void_p]),
    "hsi_last_error": (c_char_p, []),
    "hsi_status_name": (c_char_p, [c_int]),
    "hsi_set_quiet": (None, [c_int]),
    "hsi_is_quiet": (c_int, []),
    # cubes
    "hsi_hcube_open": (c_status, [POINTER(c_void_p), c_char_p, c_char_p]),
    "hsi_hcube_wrap": (c_status, [POINTER(c_void_p), c_void_p, c_char_p, c_int64_p, c_int64_p,
                                  c_int]),
    "hsi_hcube_free": (None, [c_void_p]),
    "hsi_hcube_shape": (None, [c_void_p, c_int64_p]),
    "hsi_hcube_strides": (None, [c_void_p, c_int64_p]),
    "hsi_hcube_dtype": (c_char_p, [c_void_p]),
    "hsi_hcube_swapped": (c_int, [c_void_p]),
    "hsi_hcube_data": (c_void_p, [c_void_p]),
    "hsi_hcube_buffer": (c_void_p, [c_void_p, POINTER(c_size_t)]),
    "hsi_hcube_interleave": (c_char_p, [c_void_p]),
    "hsi_hcube_format": (c_char_p, [c_void_p]),
    "hsi_hcube_header_path": (c_char_p, [c_void_p]),
    "hsi_hcube_data_path": (c_char_p, [c_void_p]),
    "hsi_hcube_meta_count": (c_int, [c_void_p]),
    "hsi_hcube_meta_key": (c_char_p, [c_void_p, c_int]),
    "hsi_hcube_meta_value": (c_char_p, [c_void_p, c_int]),
    "hsi_hcube_meta_get": (c_char_p, [c_void_p, c_char_p]),
    "hsi_hcube_wavelengths": (c_double_p, [c_void_p]),
    "hsi_hcube_wavelengths_nm": (c_int, [c_void_p]),
    "hsi_hcube_fwhm": (c_double_p, [c_void_p]),
    "hsi_hcube_bbl": (c_int_p, [c_void_p]),
    "hsi_hcube_band_name": (c_char_p, [c_void_p, c_int64]),
    "hsi_hcube_ignore_value": (c_int, [c_void_p, c_double_p]),
    "hsi_hcube_geotransform": (c_int, [c_void_p, c_double_p]),
    "hsi_hcube_crs_wkt": (c_status, [c_void_p, POINTER(c_void_p)]),
    "hsi_hcube_n_classes": (c_int, [c_void_p]),
    "hsi_hcube_class_name": (c_char_p, [c_void_p, c_int]),
    "hsi_hcube_class_color": (c_int, [c_void_p, c_int, c_uint8_p]),
    "hsi_hcube_warning": (c_char_p, [c_void_p, c_int]),
    # statistics, writing
    "hsi_hcube_stats": (c_status, [c_void_p, c_void_p, c_double_p, c_double_p, c_double_p,
                                   c_double_p, c_int64_p]),
    "hsi_hcube_write_envi": (c_status, [c_void_p, c_char_p, c_char_p, c_char_p,
                                        POINTER(c_char_p), POINTER(c_char_p), c_int]),
    # preprocessing
    "hsi_hprep_fit": (c_status, [POINTER(c_void_p), c_void_p, c_void_p, c_char_p, c_char_p,
                                 c_int, c_char_p, c_int64, c_double, c_int]),
    "hsi_hprep_load": (c_status, [POINTER(c_void_p), c_char_p]),
    "hsi_hprep_save": (c_status, [c_void_p, c_char_p]),
    "hsi_hprep_free": (None, [c_void_p]),
    "hsi_hprep_n_out": (c_int64, [c_void_p]),
    "hsi_hprep_n_in": (c_int64, [c_void_p]),
    "hsi_hprep_n_bands": (c_int64, [c_void_p]),
    "hsi_hprep_bands": (c_int64_p, [c_void_p]),
    "hsi_hprep_normalize": (c_char_p, [c_void_p]),
    "hsi_hprep_whiten": (c_int, [c_void_p]),
    "hsi_hprep_components": (c_double_p, [c_void_p]),
    "hsi_hprep_mean": (c_double_p, [c_void_p]),
    "hsi_hprep_explained_variance": (c_double_p, [c_void_p]),
    "hsi_hprep_explained_variance_ratio": (c_double_p, [c_void_p]),
    "hsi_hprep_transform": (c_status, [c_void_p, c_void_p, c_void_p]),
    # training
    "hsi_train_json": (c_status, [c_char_p, c_char_p, c_char_p, c_char_p, PROGRESS_FN, c_void_p,
                                  POINTER(c_void_p)]),
    # run directories
    "hsi_hrun_load": (c_status, [POINTER(c_void_p), c_char_p]),
    "hsi_hrun_free": (None, [c_void_p]),
    "hsi_hrun_model": (c_char_p, [c_void_p]),
    "hsi_hrun_patch": (c_int, [c_void_p]),
    "hsi_hrun_n_features": (c_int, [c_void_p]),
    "hsi_hrun_n_classes": (c_int, [c_void_p]),
    "hsi_hrun_class_label": (c_int64, [c_void_p, c_int]),
    "hsi_hrun_class_name": (c_char_p, [c_void_p, c_int]),
    "hsi_hrun_prep": (c_void_p, [c_void_p]),
    "hsi_hrun_has_split": (c_int, [c_void_p]),
    "hsi_hrun_split_shape": (c_int, [c_void_p, c_void_p, c_void_p]),
    "hsi_hrun_roles": (c_status, [c_void_p, c_void_p, c_int64, c_int64]),
    "hsi_hrun_predict": (c_status, [c_void_p, c_void_p, c_void_p, c_int]),
    "hsi_hrun_evaluate": (c_status, [c_void_p, c_void_p, c_void_p, c_int64, c_int64, c_char_p,
                                     POINTER(c_void_p)]),
}

_missing = []
for _name, (_res, _args) in _PROTOTYPES.items():
    try:
        _f = getattr(lib, _name)
    except AttributeError:
        _missing.append(_name)
        continue
    _f.restype = _res
    _f.argtypes = _args
if _missing:
    raise ImportError("hsi: %s lacks %d function(s) of the C API: %s (an older libhsi?)"
                      % (path, len(_missing), ", ".join(_missing)))

_abi = lib.hsi_abi_version()
if _abi != ABI_VERSION:
    raise ImportError("hsi: %s has C API version %d, this package needs %d (rebuild, or "
                      "reinstall the package from the same checkout)" % (path, _abi, ABI_VERSION))

VERSION = lib.hsi_version().decode()


def text(b):
    """A C string (bytes or None) as str: UTF-8, else Latin-1 (old headers)."""
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.decode("latin-1")


def fs(path):
    """A path argument as bytes for the C side."""
    return os.fsencode(os.fspath(path))


def take_string(p):
    """A malloc'd char * (c_void_p) as str, freed with hsi_string_free."""
    if not p.value:
        return None
    try:
        return text(ctypes.string_at(p.value))
    finally:
        lib.hsi_string_free(p)
        p.value = None


# ---------------------------------------------------------------- errors

class HsiError(RuntimeError):
    """A call into libhsi failed: the message is hsi_last_error() (file, key,
    expected vs. found); .status is the hsi_status code, .status_name its name."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status
        self.status_name = text(lib.hsi_status_name(status)) if status is not None else None


class HsiArgumentError(HsiError, ValueError):
    """HSI_ERR_ARG (and HSI_ERR_UNSUPPORTED): a bad argument or an unhandled case."""


class HsiNotFoundError(HsiError, FileNotFoundError):
    """HSI_ERR_NOT_FOUND: a file, key or variable that does not exist."""

    def __str__(self):  # OSError's __str__ would print the args tuple
        return self.args[0] if self.args else ""


ERR_ARG, ERR_IO, ERR_NOT_FOUND, ERR_UNSUPPORTED = -1, -2, -7, -5
_CLASS_OF = {ERR_ARG: HsiArgumentError, ERR_UNSUPPORTED: HsiArgumentError,
             ERR_NOT_FOUND: HsiNotFoundError}


def error(status, what=None):
    """The exception for a failed call; read right after it, on the same thread."""
    msg = text(lib.hsi_last_error()) or ""
    if not msg:
        msg = "%s failed (%s)" % (what or "hsi call", text(lib.hsi_status_name(status)))
    cls = _CLASS_OF.get(status, HsiError)
    return cls(msg, status)


def check(status, what=None):
    if status != 0:
        raise error(status, what)


# ---------------------------------------------------------------- handles

# live handles per kind, for the tests' "freed once" checks
live = {"cube": 0, "prep": 0, "run": 0}

_FREE = {"cube": "hsi_hcube_free", "prep": "hsi_hprep_free", "run": "hsi_hrun_free"}


def _free(kind, ptr):
    getattr(lib, _FREE[kind])(ptr)
    live[kind] -= 1


class Handle:
    """Owns one C handle: freed exactly once, when the last Python object that
    refers to this Handle (a Cube, a numpy view over its data, a Pipeline view
    of a run) is gone, or at interpreter exit. `keep` holds whatever the C
    object points into (the numpy array under hsi_hcube_wrap)."""

    __slots__ = ("ptr", "kind", "keep", "_fin", "__weakref__")

    def __init__(self, kind, ptr, keep=None):
        import weakref
        self.kind = kind
        self.ptr = ptr
        self.keep = keep
        live[kind] += 1
        self._fin = weakref.finalize(self, _free, kind, ptr)
        # at exit the OS takes the memory back; freeing then could pull a
        # mapping from under an array that module teardown still touches
        self._fin.atexit = False


class Borrowed:
    """A C pointer owned by another Handle (the run's preprocessing): keeps the
    owner alive, frees nothing."""

    __slots__ = ("ptr", "kind", "owner")

    def __init__(self, kind, ptr, owner):
        self.kind = kind
        self.ptr = ptr
        self.owner = owner
