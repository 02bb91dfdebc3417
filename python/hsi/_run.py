"""_run.py — hsi.train (libhsi's trainer, progress through a Python callback,
Ctrl-C stops it cleanly after the epoch) and hsi.Run (a run directory:
predict, evaluate). Not the models in PyTorch (hsi/torch.py)."""
import ctypes
import json
import numbers
import os
import signal
import threading

import numpy as np

from . import _lib
from ._cube import Cube, _plane, _ptr, as_cube
from ._lib import PROGRESS_FN, Borrowed, Handle, HsiError, check, fs, lib, text
from ._pipeline import Pipeline

# the JSON keys of hsi_train_json's options (pipeline/capi.h, ABI 1)
TRAIN_OPTIONS = ("model", "epochs", "batch", "lr", "pca", "patch", "train", "per_class", "val",
                 "split", "seed", "normalize", "bands", "wavelengths", "keep_bad_bands",
                 "fit_on", "patience", "weight_decay", "schedule", "augment", "workers",
                 "prefetch", "threads", "device", "conv", "cuda_graph", "host_patches", "resume", "overwrite", "var", "labels_var", "train_labels",
                 "test_labels", "pad", "block", "whiten", "pca_variance")

_KINDS = {0: "info", 1: "epoch", 2: "done"}


class TrainEvent:
    """One progress report of hsi.train: kind "info" (a line or table of
    text), "epoch" (an epoch ended: epoch of epochs, loss, train_acc (NaN on
    the GPU), val_oa (NaN without validation), lr) or "done" (the test
    metrics table). Attributes, or event["loss"] like a dict."""

    __slots__ = ("kind", "text", "epoch", "epochs", "loss", "train_acc", "val_oa", "lr")

    def __init__(self, kind, text, epoch, epochs, loss, train_acc, val_oa, lr):
        self.kind, self.text, self.epoch, self.epochs = kind, text, epoch, epochs
        self.loss, self.train_acc, self.val_oa, self.lr = loss, train_acc, val_oa, lr

    def __getitem__(self, key):
        if key not in self.__slots__:
            raise KeyError(key)
        return getattr(self, key)

    def keys(self):
        return list(self.__slots__)

    def get(self, key, default=None):
        return getattr(self, key, default) if key in self.__slots__ else default

    def asdict(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self):
        if self.kind == "epoch":
            return ("TrainEvent(epoch %d/%d loss=%.4g train_acc=%.4g val_oa=%.4g lr=%.3g)"
                    % (self.epoch, self.epochs, self.loss, self.train_acc, self.val_oa, self.lr))
        return "TrainEvent(%s %r)" % (self.kind, (self.text or "")[:60])


def _json_value(k, v):
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if isinstance(v, Cube):
        path = v.header_path or v.data_path
        if not path:
            raise ValueError("hsi.train: option %s: a Cube over memory has no path; write it "
                             "with hsi.write_envi first" % k)
        return path
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    if v is None or isinstance(v, str):
        return v
    raise TypeError("hsi.train: option %s=%r: expected a number, bool, str or path" % (k, v))


def _path_arg(x, what, required=True):
    if x is None:
        if required:
            raise ValueError("hsi.train: %s is required" % what)
        return None
    if isinstance(x, Cube):
        x = x.header_path or x.data_path
        if not x:
            raise ValueError("hsi.train: %s is a Cube over memory; training reads files: write "
                             "it with hsi.write_envi first" % what)
    return fs(x)


class _Progress:
    """The ctypes callback: calls the user's progress, turns a true return,
    an exception or Ctrl-C into "stop after this epoch" (return 1), and keeps
    the exception to raise once the C call has returned."""

    def __init__(self, user):
        self.user = user
        self.exc = None
        self.interrupted = False
        self.n_epochs = 0
        self.cfunc = PROGRESS_FN(self._call)  # referenced for the whole call

    def _call(self, ctx, kind, txt, epoch, epochs, loss, train_acc, val_oa, lr):
        try:
            if self.exc is not None or self.interrupted:
                return 1
            if kind == 1:
                self.n_epochs += 1
            stop = False
            if self.user is not None:
                stop = self.user(TrainEvent(_KINDS.get(kind, str(kind)), text(txt), epoch,
                                            epochs, loss, train_acc, val_oa, lr))
            # a Ctrl-C handled while the user's code ran counts now, not next time
            return 1 if stop or self.interrupted else 0
        except BaseException as e:  # KeyboardInterrupt included
            if self.exc is None:
                self.exc = e
            return 1

    def on_sigint(self, signum, frame):
        self.interrupted = True


def train(cube, labels=None, out=None, progress=None, quiet=None, **options):
    """Trains like `hsi train CUBE LABELS --out OUT` and returns the test
    metrics (the dict metrics.json holds).

    options: the CLI's options with underscores (model, epochs, batch, lr,
    pca, patch, train, per_class, val, split, seed, normalize, bands,
    wavelengths, keep_bad_bands, fit_on, patience, weight_decay, schedule,
    augment, workers, prefetch, threads, device, conv, cuda_graph, host_patches, resume,
    overwrite, var, labels_var, train_labels, test_labels, pad, block, whiten,
    pca_variance).
    progress(event): called for every TrainEvent; returning True (or
    raising) stops training after the current epoch; the run directory is
    still written, and the exception is raised when the trainer returns.
    Ctrl-C does the same and raises KeyboardInterrupt at the end.
    quiet: no progress lines on stderr (default: quiet when progress is given)."""
    for k in options:
        if k not in TRAIN_OPTIONS:
            raise TypeError("hsi.train() got an unexpected option %r (known: %s)"
                            % (k, ", ".join(TRAIN_OPTIONS)))
    if progress is not None and not callable(progress):
        raise TypeError("hsi.train: progress must be callable")
    if labels is None and not ("train_labels" in options and "test_labels" in options):
        raise ValueError("hsi.train: give labels, or both train_labels and test_labels")
    cube_b = _path_arg(cube, "cube")
    labels_b = _path_arg(labels, "labels", required=False)
    out_b = _path_arg(out, "out")
    opts = json.dumps({k: _json_value(k, v) for k, v in options.items()}).encode()

    cb = _Progress(progress)
    metrics = ctypes.c_void_p()
    old_handler = None
    main = threading.current_thread() is threading.main_thread()
    if main:
        try:
            old_handler = signal.signal(signal.SIGINT, cb.on_sigint)
        except ValueError:
            main = False
    if quiet is None:
        quiet = progress is not None
    was_quiet = lib.hsi_is_quiet()
    if quiet:
        lib.hsi_set_quiet(1)
    try:
        st = lib.hsi_train_json(cube_b, labels_b, out_b, opts, cb.cfunc, None,
                                ctypes.byref(metrics))
        err = _lib.error(st, "hsi_train_json") if st != 0 else None
    finally:
        if quiet and not was_quiet:
            lib.hsi_set_quiet(0)
        if main:
            signal.signal(signal.SIGINT, old_handler)
    result = _lib.take_string(metrics)
    if cb.exc is not None:
        raise cb.exc
    if cb.interrupted:
        raise KeyboardInterrupt("hsi.train: interrupted; training stopped after epoch %d and "
                                "the run directory was written" % cb.n_epochs)
    if err is not None:
        raise err
    return json.loads(result) if result else {}


_ON = ("test", "all", "train")


class Run:
    """A trained run directory (`hsi train --out DIR`, hsi.train): the
    preprocessing, the model and the classes. Run.load(dir)."""

    def __init__(self, handle, path):
        self._h = handle
        self.path = path

    @classmethod
    def load(cls, path):
        p = os.fspath(path)
        out = ctypes.c_void_p()
        st = lib.hsi_hrun_load(ctypes.byref(out), fs(p))
        if st != 0:
            err = _lib.error(st, "hsi_hrun_load")
            if st == _lib.ERR_IO and not os.path.exists(p):
                err = _lib.HsiNotFoundError(str(err), st)
            raise err
        return cls(Handle("run", out.value), os.fsdecode(p))

    def _ptr(self):
        if self._h is None:
            raise ValueError("operation on a closed hsi.Run")
        return self._h.ptr

    def close(self):
        """Drops this object's hold on the run (a .pipeline still held keeps it)."""
        self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self._h is None:
            return "<hsi.Run (closed)>"
        return "<hsi.Run %r %s patch %d, %d features, %d classes>" % (
            self.path, self.model, self.patch, self.n_features, self.n_classes)

    @property
    def model(self):
        return text(lib.hsi_hrun_model(self._ptr()))

    @property
    def patch(self):
        return int(lib.hsi_hrun_patch(self._ptr()))

    @property
    def n_features(self):
        return int(lib.hsi_hrun_n_features(self._ptr()))

    @property
    def n_classes(self):
        return int(lib.hsi_hrun_n_classes(self._ptr()))

    @property
    def labels(self):
        """(n_classes) int64: the label value of each class index."""
        p = self._ptr()
        return np.array([lib.hsi_hrun_class_label(p, k) for k in range(self.n_classes)],
                        np.int64)

    @property
    def classes(self):
        """[(label value, name)] in class-index order (the model's outputs)."""
        p = self._ptr()
        return [(int(lib.hsi_hrun_class_label(p, k)), text(lib.hsi_hrun_class_name(p, k)))
                for k in range(self.n_classes)]

    @property
    def pipeline(self):
        """The run's preprocessing as a Pipeline (a view: it keeps the run
        alive and frees nothing)."""
        ptr = lib.hsi_hrun_prep(self._ptr())
        return Pipeline._from_handle(Borrowed("prep", ptr, self._h))

    @property
    def has_split(self):
        return bool(lib.hsi_hrun_has_split(self._ptr()))

    def roles(self, shape=None):
        """(lines, samples) uint8 of the training split: 0 unused, 1 train,
        2 validation, 3 test. shape: the scene's (lines, samples); None =
        the split's own."""
        if shape is None:
            n_l, n_s = ctypes.c_int64(), ctypes.c_int64()
            if not lib.hsi_hrun_split_shape(self._ptr(), ctypes.byref(n_l), ctypes.byref(n_s)):
                raise HsiError("%s holds no split (split.hdr): a run of an older hsi" % self.path)
            shape = (n_l.value, n_s.value)
        n_lines, n_samples = (int(x) for x in shape)
        out = np.zeros((n_lines, n_samples), np.uint8)
        check(lib.hsi_hrun_roles(self._ptr(), _ptr(out), n_lines, n_samples), "hsi_hrun_roles")
        return out

    def predict(self, cube, batch=256):
        """(lines, samples) int32 label map of every pixel of cube (a Cube,
        path or (bands, lines, samples) array of the raw bands)."""
        if isinstance(batch, bool) or not isinstance(batch, numbers.Integral):
            raise TypeError("hsi.Run.predict: batch must be an int")
        c = as_cube(cube)
        out = np.empty(tuple(c.shape[1:]), np.int32)
        check(lib.hsi_hrun_predict(self._ptr(), c._ptr(), _ptr(out), int(batch)),
              "hsi_hrun_predict")
        return out

    def score(self, map, labels, on="test"):  # noqa: A002
        """Metrics of a (lines, samples) label map against labels (a label
        Cube, path or int array; 0 = unlabelled) on the run's "test" pixels,
        "all" labelled pixels or "train" pixels."""
        if on not in _ON:
            raise ValueError("hsi.Run: on must be one of test, all, train (got %r)" % (on,))
        m = np.asarray(map)
        if m.ndim != 2:
            raise ValueError("hsi.Run.score: map must be (lines, samples), got shape %s"
                             % (m.shape,))
        lab = _plane(labels, m.shape, "labels")
        if lab.dtype.kind not in "iu" and not np.all(np.isfinite(lab) & (lab == np.round(lab))):
            raise ValueError("hsi.Run.score: labels must be integer label values")
        lab = np.ascontiguousarray(lab, dtype=np.int32)
        m = np.ascontiguousarray(m, dtype=np.int32)
        res = ctypes.c_void_p()
        check(lib.hsi_hrun_evaluate(self._ptr(), _ptr(m), _ptr(lab), m.shape[0], m.shape[1],
                                    on.encode(), ctypes.byref(res)), "hsi_hrun_evaluate")
        s = _lib.take_string(res)
        return json.loads(s) if s else {}

    def evaluate(self, cube, labels, on="test", batch=256):
        """Predicts cube and scores it: OA, AA, kappa, per class, confusion.
        on="test" (the split's test pixels: metrics.json's figures on the
        training scene), "all" or "train"."""
        if on not in _ON:
            raise ValueError("hsi.Run: on must be one of test, all, train (got %r)" % (on,))
        return self.score(self.predict(cube, batch), labels, on)
