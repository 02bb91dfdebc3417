"""_pipeline.py — hsi.Pipeline: band selection, normalisation and PCA fitted on
a pixel mask, applied in libhsi's fused pass (scikit-learn's names for the
fitted attributes). Not training (_run.py)."""
import ctypes
import numbers
import os

import numpy as np

from . import _lib
from ._cube import _ptr, as_cube, mask_array
from ._lib import Handle, check, fs, lib

NORMALIZE = ("none", "zscore", "minmax", "global-minmax", "l2")


class NotFittedError(ValueError, AttributeError):
    """A fitted attribute or transform() was asked of a Pipeline before fit()."""


def _bands_spec(bands):
    """None, a CLI spec "1-20,35" (1-based) or a sequence of 0-based ints."""
    if bands is None or isinstance(bands, str):
        return bands
    try:
        idx = [int(b) for b in np.asarray(bands).ravel()]
    except (TypeError, ValueError):
        raise TypeError("hsi.Pipeline: bands must be a spec like '1-20,35' (1-based, as the "
                        "CLI) or a sequence of 0-based band indices") from None
    if not idx:
        raise ValueError("hsi.Pipeline: bands is empty")
    if min(idx) < 0:
        raise ValueError("hsi.Pipeline: band indices are 0-based and >= 0 (got %d)" % min(idx))
    return ",".join(str(b + 1) for b in idx)


def _wavelength_spec(w):
    """None, a spec "400-1340,1450-1800" (nm) or a sequence of (lo, hi) pairs."""
    if w is None or isinstance(w, str):
        return w
    try:
        pairs = [(float(lo), float(hi)) for lo, hi in w]
    except (TypeError, ValueError):
        raise TypeError("hsi.Pipeline: wavelengths must be a spec like '400-1340,1450-1800' "
                        "or a sequence of (lo, hi) pairs in nm") from None
    if not pairs:
        raise ValueError("hsi.Pipeline: wavelengths is empty")
    return ",".join("%r-%r" % p for p in pairs)


def _copy(ptr, shape):
    if not ptr:
        return None
    return np.ctypeslib.as_array(ptr, shape=shape).copy()


class Pipeline:
    """Select bands -> normalise -> PCA, fitted on the pixels of a mask and
    applied to whole cubes in one pass that writes float32.

    bands: "1-20,35" (1-based, as `hsi preprocess --bands`) or 0-based ints;
    wavelengths: "400-1340,1450-1800" (nm) or [(400, 1340), ...];
    drop_bbl: drop the bands the header's bbl marks bad;
    normalize: none, zscore, minmax, global-minmax, l2;
    pca: number of components (0 = none) or pca_variance: fraction of the
    variance to keep (0 < f <= 1); whiten: unit-variance components."""

    def __init__(self, bands=None, wavelengths=None, drop_bbl=False, normalize="zscore", pca=0,
                 pca_variance=0, whiten=False):
        self.bands = bands
        self.wavelengths = wavelengths
        self.drop_bbl = drop_bbl
        self.normalize = normalize
        self.pca = pca
        self.pca_variance = pca_variance
        self.whiten = whiten
        self._loaded = False
        self._h = None

    # scikit-learn's estimator protocol (clone, grid search)
    _PARAMS = ("bands", "wavelengths", "drop_bbl", "normalize", "pca", "pca_variance", "whiten")

    def get_params(self, deep=True):
        return {k: getattr(self, k) for k in self._PARAMS}

    def set_params(self, **params):
        for k, v in params.items():
            if k not in self._PARAMS:
                raise ValueError("hsi.Pipeline has no parameter %r (has: %s)"
                                 % (k, ", ".join(self._PARAMS)))
            setattr(self, k, v)
        return self

    def __repr__(self):
        args = ", ".join("%s=%r" % (k, getattr(self, k)) for k in self._PARAMS
                         if getattr(self, k) != Pipeline.__init__.__defaults__[
                             self._PARAMS.index(k)])
        if getattr(self, "_loaded", False) and self._h is not None:
            return "<hsi.Pipeline loaded: %d cube bands -> %d features%s>" % (
                self.n_features_in_, self.n_features_out_, ", PCA" if self.has_pca else "")
        state = "" if self._h is not None else " (not fitted)"
        return "hsi.Pipeline(%s)%s" % (args, state)

    @classmethod
    def _from_handle(cls, handle):
        p = cls.__new__(cls)
        for k, v in zip(cls._PARAMS, cls.__init__.__defaults__):
            setattr(p, k, v)
        p._loaded = True
        p._h = handle
        # what the loaded file does (its band list is bands_)
        p.normalize = lib.hsi_hprep_normalize(handle.ptr).decode()
        p.whiten = bool(lib.hsi_hprep_whiten(handle.ptr))
        p.pca = int(lib.hsi_hprep_n_out(handle.ptr)) if lib.hsi_hprep_components(handle.ptr) else 0
        return p

    def _ptr(self):
        if self._h is None:
            raise NotFittedError("this hsi.Pipeline is not fitted: call fit() first, or use "
                                 "Pipeline.load()")
        return self._h.ptr

    # ------------------------------------------------------------ fit / apply

    def _checked_args(self):
        norm = "none" if self.normalize is None else self.normalize
        if not isinstance(norm, str) or norm not in NORMALIZE:
            raise ValueError("hsi.Pipeline: normalize must be one of %s (got %r)"
                             % (", ".join(NORMALIZE), self.normalize))
        if isinstance(self.pca, bool) or not isinstance(self.pca, numbers.Integral) \
                or self.pca < 0:
            raise ValueError("hsi.Pipeline: pca must be an int >= 0 (got %r)" % (self.pca,))
        try:
            var = float(self.pca_variance or 0)
        except (TypeError, ValueError):
            raise ValueError("hsi.Pipeline: pca_variance must be a number in (0, 1] (got %r)"
                             % (self.pca_variance,)) from None
        if not (0 <= var <= 1):
            raise ValueError("hsi.Pipeline: pca_variance must be in (0, 1] (got %r)" % var)
        if self.pca and var:
            raise ValueError("hsi.Pipeline: give pca (a count) or pca_variance (a fraction), "
                             "not both")
        bands = _bands_spec(self.bands)
        wl = _wavelength_spec(self.wavelengths)
        return (bands.encode() if bands else None, wl.encode() if wl else None,
                1 if self.drop_bbl else 0, norm.encode(), int(self.pca), var,
                1 if self.whiten else 0)

    def fit(self, cube, mask=None):
        """Fits on cube (a Cube, path or (bands, lines, samples) array) over
        the pixels where mask (lines, samples) is nonzero (None = all).
        Returns self."""
        args = self._checked_args()
        c = as_cube(cube)
        m = mask_array(mask, c.shape[1:])
        out = ctypes.c_void_p()
        check(lib.hsi_hprep_fit(ctypes.byref(out), c._ptr(), _ptr(m), *args), "hsi_hprep_fit")
        self._h = Handle("prep", out.value)
        self._loaded = False
        return self

    def transform(self, cube):
        """(n_out, lines, samples) float32 features of cube (a Cube, path or
        (bands, lines, samples) array with n_features_in_ bands)."""
        p = self._ptr()
        c = as_cube(cube)
        out = np.empty((int(lib.hsi_hprep_n_out(p)),) + tuple(c.shape[1:]), np.float32)
        check(lib.hsi_hprep_transform(p, c._ptr(), _ptr(out)), "hsi_hprep_transform")
        return out

    def fit_transform(self, cube, mask=None):
        c = as_cube(cube)
        return self.fit(c, mask).transform(c)

    def save(self, path):
        """Writes the fitted transform (safetensors; `hsi pca apply` reads it)."""
        check(lib.hsi_hprep_save(self._ptr(), fs(path)), "hsi_hprep_save")
        return os.fsdecode(os.fspath(path))

    @classmethod
    def load(cls, path):
        """Loads preprocessing.safetensors, `hsi preprocess --save-model`,
        `hsi pca fit` output, or an older hsi's pca.bin."""
        out = ctypes.c_void_p()
        st = lib.hsi_hprep_load(ctypes.byref(out), fs(path))
        if st != 0:
            err = _lib.error(st, "hsi_hprep_load")
            if st == _lib.ERR_IO and not os.path.exists(os.fspath(path)):
                err = _lib.HsiNotFoundError(str(err), st)
            raise err
        return cls._from_handle(Handle("prep", out.value))

    # ------------------------------------------------------------ fitted attributes

    @property
    def fitted(self):
        return self._h is not None

    @property
    def n_features_in_(self):
        """Bands of the cubes it applies to."""
        return int(lib.hsi_hprep_n_in(self._ptr()))

    @property
    def n_features_out_(self):
        """Output features (components with PCA, else selected bands)."""
        return int(lib.hsi_hprep_n_out(self._ptr()))

    @property
    def n_bands_(self):
        return int(lib.hsi_hprep_n_bands(self._ptr()))

    @property
    def bands_(self):
        """(n_bands_) int64, 0-based cube bands used, in order."""
        p = self._ptr()
        return _copy(lib.hsi_hprep_bands(p), (int(lib.hsi_hprep_n_bands(p)),))

    @property
    def has_pca(self):
        return bool(lib.hsi_hprep_components(self._ptr()))

    @property
    def n_components_(self):
        """PCA components kept (None without PCA)."""
        return self.n_features_out_ if self.has_pca else None

    @property
    def components_(self):
        """(n_components_, n_bands_) float64, rows like scikit-learn's; None without PCA."""
        p = self._ptr()
        return _copy(lib.hsi_hprep_components(p), (int(lib.hsi_hprep_n_out(p)),
                                                   int(lib.hsi_hprep_n_bands(p))))

    @property
    def mean_(self):
        """(n_bands_) float64 feature means the PCA centres on; None without PCA."""
        p = self._ptr()
        return _copy(lib.hsi_hprep_mean(p), (int(lib.hsi_hprep_n_bands(p)),))

    @property
    def explained_variance_(self):
        p = self._ptr()
        return _copy(lib.hsi_hprep_explained_variance(p), (int(lib.hsi_hprep_n_out(p)),))

    @property
    def explained_variance_ratio_(self):
        p = self._ptr()
        return _copy(lib.hsi_hprep_explained_variance_ratio(p), (int(lib.hsi_hprep_n_out(p)),))
