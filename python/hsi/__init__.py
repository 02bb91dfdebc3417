"""hsi — hyperspectral cubes from disk to a trained classifier, in Python.

A thin ctypes layer over libhsi's C API (pipeline/capi.h): cubes open as
zero-copy numpy views of the mapped file, preprocessing and training run in
the C library (the GIL is released while they do), and hsi.torch holds the
models in PyTorch with the checkpoints' parameter names.

    import hsi
    cube = hsi.open("scene.hdr")           # mapped, nothing read
    x = cube.bip()                         # (lines, samples, bands) view, no copy
    pipe = hsi.Pipeline(normalize="zscore", pca=30).fit(cube, mask="gt.hdr")
    metrics = hsi.train("scene.hdr", "gt.hdr", "run1", epochs=40)
    label_map = hsi.Run.load("run1").predict(cube)
"""
from . import _lib
from ._cube import Cube, as_cube, open, stats, wrap, write_envi  # noqa: A004
from ._lib import HsiArgumentError, HsiError, HsiNotFoundError
from ._pipeline import NotFittedError, Pipeline
from ._run import TRAIN_OPTIONS, Run, TrainEvent, train

__version__ = _lib.VERSION  # the C library's version ("0.1.0")
abi_version = _lib.ABI_VERSION
library_path = _lib.path


def set_quiet(quiet=True):
    """No warnings or progress bars from libhsi on stderr (process-wide)."""
    _lib.lib.hsi_set_quiet(1 if quiet else 0)


__all__ = ["Cube", "HsiArgumentError", "HsiError", "HsiNotFoundError", "NotFittedError",
           "Pipeline", "Run", "TRAIN_OPTIONS", "TrainEvent", "__version__", "as_cube", "open",
           "set_quiet", "stats", "train", "wrap", "write_envi"]
