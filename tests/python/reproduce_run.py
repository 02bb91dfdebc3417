#!/usr/bin/env python3
"""Reproduces `hsi predict` from a run directory with numpy alone, reading
only what docs/run-directory.md documents: pipeline.json,
preprocessing.safetensors, model.safetensors (the `safetensors` package is
used when installed, else the 8-byte header is parsed by hand) and the
cube's ENVI header. It does not import hsi and reads no C.

usage: reproduce_run.py RUN_DIR CUBE.hdr FEATURES.hdr MAP.hdr N_PIXELS SEED
  FEATURES.hdr: what `hsi pca apply RUN_DIR/preprocessing.safetensors CUBE`
                wrote (compared with the features computed here)
  MAP.hdr:      what `hsi predict RUN_DIR CUBE` wrote (compared on N_PIXELS
                pixels drawn with SEED)
Prints one JSON line with the comparison; exit status 0. Exit 77 when numpy
is missing (the caller skips)."""
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(77)

ENVI_DTYPES = {1: "u1", 2: "i2", 3: "i4", 4: "f4", 5: "f8", 12: "u2", 13: "u4", 14: "i8", 15: "u8"}


def read_safetensors(path):
    """{name: array}, metadata — the format: u64 LE header length, JSON header, data."""
    try:
        from safetensors.numpy import load_file, safe_open
        with safe_open(path, "np") as f:
            meta = f.metadata() or {}
        return load_file(path), meta
    except ImportError:
        pass
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    base = 8 + n
    dt = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "U8": "u1"}
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(raw[base + a:base + b], dt[v["dtype"]]).reshape(v["shape"])
    return out, head.get("__metadata__", {})


def read_envi(hdr):
    """(bands, lines, samples) array of an uncompressed ENVI cube."""
    text = open(hdr).read()
    keys = {}
    for line in text.splitlines()[1:]:
        if "=" in line:
            k, v = line.split("=", 1)
            keys[k.strip().lower()] = v.strip()
    B, L, S = int(keys["bands"]), int(keys["lines"]), int(keys["samples"])
    dt = np.dtype(ENVI_DTYPES[int(keys["data type"])]).newbyteorder(
        ">" if keys.get("byte order", "0") == "1" else "<")
    base = hdr[:-4]
    data = next(p for p in (base, base + ".img", base + ".dat", base + ".raw") if os.path.exists(p))
    a = np.fromfile(data, dt, offset=int(keys.get("header offset", "0")), count=B * L * S)
    il = keys.get("interleave", "bsq").lower()
    if il == "bsq":
        return a.reshape(B, L, S)
    if il == "bil":
        return a.reshape(L, B, S).transpose(1, 0, 2)
    return a.reshape(L, S, B).transpose(2, 0, 1)


def preprocess(cube, t, meta):
    """The formula of preprocessing.safetensors' __metadata__."""
    x = cube[t["bands"]].astype(np.float64)  # (features, lines, samples)
    fill = t["fill"][:, None, None]
    bad = np.isnan(x)
    if meta["has_ignore"] == "1":
        bad |= x == float(meta["ignore_value"])
    x = np.where(bad, np.broadcast_to(fill, x.shape), x)
    y = t["scale"][:, None, None] * (x - t["center"][:, None, None]) + t["offset"][:, None, None]
    if meta["l2"] == "1":
        nrm = np.sqrt((y * y).sum(0, keepdims=True))
        y = np.divide(y, nrm, out=np.zeros_like(y), where=nrm > 0)
    if meta["pca"] == "1":
        z = np.tensordot(t["pca.components"], y - t["pca.mean"][:, None, None], axes=(1, 0))
        if meta["whiten"] == "1":
            z = z / np.sqrt(t["pca.explained_variance"])[:, None, None]
        y = z
    return y.astype(np.float32)


def conv3x3(x, w, b):
    """x: (N, C, H, W), padding 1, stride 1 (PyTorch's Conv2d)."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # N C H W 3 3
    return np.einsum("nchwij,ocij->nohw", win, w, optimize=True) + b[None, :, None, None]


def bn_relu(x, sd, name):
    g, b = sd[name + ".weight"], sd[name + ".bias"]
    m, v = sd[name + ".running_mean"], sd[name + ".running_var"]
    y = (x - m[None, :, None, None]) / np.sqrt(v[None, :, None, None] + 1e-5)
    return np.maximum(y * g[None, :, None, None] + b[None, :, None, None], 0)


def cnn2d(x, sd):
    """cnn2d in evaluation mode: logits (N, K). x: (N, C, P, P) float64."""
    f = "features."
    x = bn_relu(conv3x3(x, sd[f + "0.weight"], sd[f + "0.bias"]), sd, f + "1")
    x = bn_relu(conv3x3(x, sd[f + "3.weight"], sd[f + "3.bias"]), sd, f + "4")
    n, c, h, w = x.shape
    x = x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
    x = bn_relu(conv3x3(x, sd[f + "7.weight"], sd[f + "7.bias"]), sd, f + "8")
    x = x.mean(axis=(2, 3))
    return x @ sd["classifier.weight"].T + sd["classifier.bias"]


def main():
    run, cube_hdr, feat_hdr, map_hdr, n_pix, seed = sys.argv[1:7]
    pj = json.load(open(os.path.join(run, "pipeline.json")))
    t, meta = read_safetensors(os.path.join(run, pj["preprocessing_file"]))
    sd64 = {k: v.astype(np.float64) for k, v in read_safetensors(os.path.join(run, pj["model_file"]))[0].items()}
    cube = read_envi(cube_hdr)
    feats = preprocess(cube, t, meta)
    ref = read_envi(feat_hdr)
    scale = float(np.abs(ref).max())
    feat_err = float(np.abs(feats - ref).max()) / scale
    # patches of P x P around the chosen pixels, numpy.pad 'reflect' at the edges
    P = pj["patch"]
    r = P // 2
    mode = "reflect" if pj["pad"] == "mirror" else "constant"
    padded = np.pad(feats.astype(np.float64), ((0, 0), (r, r), (r, r)), mode=mode)
    L, S = feats.shape[1:]
    rng = np.random.default_rng(int(seed))
    pix = rng.choice(L * S, size=min(int(n_pix), L * S), replace=False)
    ys, xs = pix // S, pix % S
    patches = np.stack([padded[:, y:y + P, x:x + P] for y, x in zip(ys, xs)])
    labels = np.array([c["label"] for c in pj["classes"]])
    pred = labels[cnn2d(patches, sd64).argmax(1)]
    hmap = read_envi(map_hdr)[0]
    agree = float((pred == hmap[ys, xs]).mean())
    print(json.dumps({"feature_max_rel_err": feat_err, "agreement": agree, "pixels": int(len(pix)),
                      "model": pj["model"]}))


if __name__ == "__main__":
    main()
