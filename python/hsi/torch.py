"""hsi.torch — hsi's models (cnn2d, cnn1d, hybridsn) as PyTorch modules with
exactly the parameter names and shapes of hsi's checkpoints
(model.safetensors), a loader for run directories, and the patch
extraction hsi uses, so a trained run can be fine-tuned or checked in
PyTorch. Not a trainer: hsi.train is. Needs torch; `safetensors` is used
when installed, else the file is parsed with numpy (8-byte header length,
JSON header, little-endian C-order data).

    import hsi, hsi.torch
    run = hsi.Run.load("run1")
    model = hsi.torch.load("run1")                 # eval mode, strict load
    feats = run.pipeline.transform(cube)           # (F, lines, samples) float32
    labels = hsi.torch.predict(model, feats)       # (lines, samples) label values
"""
import json
import os
import struct

import numpy as np
import torch
from torch import nn

__all__ = ["CNN1D", "CNN2D", "HybridSN", "build", "load", "load_state_dict", "patches",
           "model_input", "logits", "predict", "read_safetensors", "reproduce"]


class GlobalAvgPool(nn.Module):
    """Mean over every axis after (N, C): (N, C, ...) -> (N, C)."""

    def forward(self, x):
        return x.mean(dim=tuple(range(2, x.dim())))


class Reshape(nn.Module):
    """(N, ...) -> (N, *shape), as hsi's reshape module (no parameters)."""

    def __init__(self, *shape):
        super().__init__()
        self.shape = tuple(int(s) for s in shape)

    def forward(self, x):
        return x.reshape((x.shape[0],) + self.shape)

    def extra_repr(self):
        return "shape=%s" % (self.shape,)


def _bn(c):
    return nn.BatchNorm2d(c, eps=1e-5, momentum=0.1)


class CNN2D(nn.Module):
    """hsi's cnn2d on (N, F, P, P) patches: conv3x3(64)+BN+ReLU,
    conv3x3(64)+BN+ReLU, max-pool 2x2, conv3x3(128)+BN+ReLU, global average
    pool, dropout 0.3, linear. models/nn.c build_cnn2d."""

    def __init__(self, n_features, n_classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(n_features, 64, 3, padding=1), _bn(64), nn.ReLU(),      # 0 1 2
            nn.Conv2d(64, 64, 3, padding=1), _bn(64), nn.ReLU(),              # 3 4 5
            nn.MaxPool2d(2, 2),                                               # 6
            nn.Conv2d(64, 128, 3, padding=1), _bn(128), nn.ReLU())            # 7 8 9
        self.pool = GlobalAvgPool()
        self.dropout = nn.Dropout(0.3)
        self.classifier = nn.Linear(128, n_classes)

    def forward(self, x):
        return self.classifier(self.dropout(self.pool(self.features(x))))


class CNN1D(nn.Module):
    """hsi's cnn1d on (N, F) spectra: viewed as (N, 1, 1, F); conv 1x7(32)
    pad 3 + BN + ReLU, max-pool 1x2, conv 1x5(64) pad 2 + BN + ReLU, global
    average pool, dropout 0.3, linear. models/nn.c build_cnn1d."""

    def __init__(self, n_features, n_classes):
        super().__init__()
        self.features = nn.Sequential(
            Reshape(1, 1, n_features),                                        # 0
            nn.Conv2d(1, 32, (1, 7), padding=(0, 3)), _bn(32), nn.ReLU(),     # 1 2 3
            nn.MaxPool2d((1, 2), (1, 2)),                                     # 4
            nn.Conv2d(32, 64, (1, 5), padding=(0, 2)), _bn(64), nn.ReLU())    # 5 6 7
        self.pool = GlobalAvgPool()
        self.dropout = nn.Dropout(0.3)
        self.classifier = nn.Linear(64, n_classes)

    def forward(self, x):
        return self.classifier(self.dropout(self.pool(self.features(x))))


class HybridSN(nn.Module):
    """HybridSN (Roy et al. 2019) on (N, 1, F, P, P): 3-D convs (7,3,3)x8,
    (5,3,3)x16, (3,3,3)x32 with ReLU, reshape to (32 (F-12), P-6, P-6), 2-D
    conv 3x3(64)+ReLU, flatten, FC 256, 128 (ReLU, dropout 0.4), linear.
    models/nn.c build_hybridsn."""

    def __init__(self, n_features, patch, n_classes):
        super().__init__()
        d, s = n_features - 12, patch - 6
        if d < 1 or s - 2 < 1:
            raise ValueError("hybridsn: %d features and %dx%d patches are too small (needs >= "
                             "13 features and >= 9x9)" % (n_features, patch, patch))
        self.features = nn.Sequential(
            nn.Conv3d(1, 8, (7, 3, 3)), nn.ReLU(),                            # 0 1
            nn.Conv3d(8, 16, (5, 3, 3)), nn.ReLU(),                           # 2 3
            nn.Conv3d(16, 32, (3, 3, 3)), nn.ReLU(),                          # 4 5
            Reshape(32 * d, s, s),                                            # 6
            nn.Conv2d(32 * d, 64, 3), nn.ReLU(),                              # 7 8
            nn.Flatten())                                                     # 9
        self.classifier = nn.Sequential(
            nn.Linear(64 * (s - 2) * (s - 2), 256), nn.ReLU(), nn.Dropout(0.4),
            nn.Linear(256, 128), nn.ReLU(), nn.Dropout(0.4),
            nn.Linear(128, n_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def build(model, n_features, patch, n_classes):
    """A fresh module of architecture `model` (cnn2d, cnn1d, hybridsn)."""
    if model == "cnn2d":
        return CNN2D(n_features, n_classes)
    if model == "cnn1d":
        return CNN1D(n_features, n_classes)
    if model == "hybridsn":
        return HybridSN(n_features, patch, n_classes)
    raise ValueError("hsi.torch: unknown model %r (known: cnn2d, hybridsn, cnn1d)" % (model,))


# ---------------------------------------------------------------- safetensors

_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
              "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_safetensors(path):
    """({name: numpy array}, metadata dict) of a safetensors file."""
    try:
        from safetensors import safe_open
        from safetensors.numpy import load_file
    except ImportError:
        pass
    else:
        with safe_open(path, "np") as f:
            meta = dict(f.metadata() or {})
        return load_file(path), meta
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: not a safetensors file (%d bytes)" % (path, len(raw)))
    n = struct.unpack("<Q", raw[:8])[0]
    if n > len(raw) - 8:
        raise ValueError("%s: header length %d exceeds the file (%d bytes)" % (path, n, len(raw)))
    head = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, v in head.items():
        if name == "__metadata__":
            continue
        if v["dtype"] not in _ST_DTYPES:
            raise ValueError("%s: tensor %s has dtype %s, not handled" % (path, name, v["dtype"]))
        a, b = v["data_offsets"]
        arr = np.frombuffer(raw, _ST_DTYPES[v["dtype"]], count=(b - a) // np.dtype(
            _ST_DTYPES[v["dtype"]]).itemsize, offset=base + a)
        out[name] = arr.reshape(v["shape"]).copy()
    return out, dict(head.get("__metadata__") or {})


def load_state_dict(path):
    """model.safetensors as a torch state_dict (and its metadata)."""
    arrays, meta = read_safetensors(path)
    sd = {}
    for k, a in arrays.items():
        a = np.ascontiguousarray(a)
        sd[k] = torch.from_numpy(a.astype(a.dtype.newbyteorder("="), copy=False))
    return sd, meta


def load(run_dir, device="cpu"):
    """The model of a run directory, in eval mode, weights loaded with
    strict=True. Attributes added: hsi_model, patch, pad, n_features,
    labels (label value of each output), class_names."""
    with open(os.path.join(run_dir, "pipeline.json")) as f:
        pj = json.load(f)
    name = os.path.basename(pj.get("model_file", "model.safetensors"))
    sd, meta = load_state_dict(os.path.join(run_dir, name))
    classes = pj["classes"]
    m = build(pj["model"], int(pj["features"]), int(pj["patch"]), len(classes))
    m.load_state_dict(sd, strict=True)
    m.eval()
    m.to(device)
    m.hsi_model = pj["model"]
    m.patch = int(pj["patch"])
    m.pad = pj.get("pad", "mirror")
    m.n_features = int(pj["features"])
    m.labels = np.array([c["label"] for c in classes], np.int64)
    m.class_names = [c.get("name") for c in classes]
    m.hsi_metadata = meta
    return m


# ---------------------------------------------------------------- patches

def _pixels(pixels, shape):
    L, S = shape
    if pixels is None:
        return np.arange(L * S) // S, np.arange(L * S) % S
    if isinstance(pixels, tuple) and len(pixels) == 2:
        ys, xs = (np.asarray(p, np.int64).ravel() for p in pixels)
    else:
        flat = np.asarray(pixels, np.int64).ravel()
        ys, xs = flat // S, flat % S
    if ys.size and (ys.min() < 0 or ys.max() >= L or xs.min() < 0 or xs.max() >= S):
        raise ValueError("hsi.torch: pixels outside the (%d, %d) scene" % (L, S))
    return ys, xs


def patches(features, pixels=None, patch=11, pad="mirror"):
    """(N, F, P, P) float32 patches of (F, lines, samples) features around
    pixels (flat indices line * samples + sample, a (lines, samples) tuple of
    arrays, or None = every pixel), padded at the scene's edges as hsi does:
    "mirror" = numpy.pad mode "reflect", "zero" = zeros."""
    f = np.asarray(features, np.float32)
    if f.ndim != 3:
        raise ValueError("hsi.torch.patches: features must be (F, lines, samples)")
    ys, xs = _pixels(pixels, f.shape[1:])
    r = patch // 2
    if pad == "mirror":
        padded = np.pad(f, ((0, 0), (r, r), (r, r)), mode="reflect")
    elif pad == "zero":
        padded = np.pad(f, ((0, 0), (r, r), (r, r)))
    else:
        raise ValueError("hsi.torch.patches: pad must be 'mirror' or 'zero' (got %r)" % (pad,))
    win = np.lib.stride_tricks.sliding_window_view(padded, (patch, patch), axis=(1, 2))
    return np.ascontiguousarray(win[:, ys, xs].transpose(1, 0, 2, 3))


def model_input(model_name, p):
    """Patches (N, F, P, P) in the input shape of the architecture: as they
    are for cnn2d, (N, 1, F, P, P) for hybridsn, the centre spectra (N, F)
    for cnn1d."""
    if model_name == "hybridsn":
        return p[:, None]
    if model_name == "cnn1d":
        c = p.shape[-1] // 2
        return p[:, :, c, c]
    return p


def logits(model, features, pixels=None, batch=256):
    """(N, K) float32 logits of the pixels (see patches) — model from load()."""
    ys, xs = _pixels(pixels, np.shape(features)[1:])
    dev = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for i in range(0, len(ys), batch):
            p = patches(features, (ys[i:i + batch], xs[i:i + batch]), model.patch, model.pad)
            x = torch.from_numpy(np.ascontiguousarray(model_input(model.hsi_model, p)))
            out.append(model(x.to(dev)).float().cpu())
    return torch.cat(out) if out else torch.empty(0, len(model.labels))


def predict(model, features, pixels=None, batch=256):
    """Label values of the pixels; with pixels=None a (lines, samples) int32
    map of the whole scene, as hsi.Run.predict gives."""
    lab = model.labels[logits(model, features, pixels, batch).argmax(1).numpy()].astype(np.int32)
    return lab.reshape(np.shape(features)[1:]) if pixels is None else lab


def reproduce(run_dir, cube, n_pixels=300, seed=0):
    """Checks the PyTorch model against hsi on n_pixels random pixels of
    cube: {"agreement": fraction of equal labels, "pixels": n}."""
    import hsi
    run = hsi.Run.load(run_dir)
    c = hsi.as_cube(cube)
    feats = run.pipeline.transform(c)
    hmap = run.predict(c)
    model = load(run_dir)
    L, S = hmap.shape
    rng = np.random.default_rng(seed)
    pix = rng.choice(L * S, size=min(int(n_pixels), L * S), replace=False)
    pred = predict(model, feats, pix)
    return {"agreement": float((pred == hmap.ravel()[pix]).mean()), "pixels": int(pix.size)}
