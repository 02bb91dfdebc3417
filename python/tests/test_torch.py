"""hsi.torch: the PyTorch modules have exactly the checkpoints' parameter
names and shapes, load strictly, and reproduce hsi's predictions; cnn2d's
logits equal an independent float64 numpy forward pass."""
import os

import numpy as np
import pytest

import hsi
from conftest import GT, SCENE

torch = pytest.importorskip("torch")
import hsi.torch as ht  # noqa: E402


def numpy_cnn2d(x, sd):
    """cnn2d in evaluation mode in float64 numpy (tests/python/reproduce_run.py)."""
    def conv3x3(x, w, b):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
        return np.einsum("nchwij,ocij->nohw", win, w, optimize=True) + b[None, :, None, None]

    def bn_relu(x, name):
        g, b = sd[name + ".weight"], sd[name + ".bias"]
        m, v = sd[name + ".running_mean"], sd[name + ".running_var"]
        y = (x - m[None, :, None, None]) / np.sqrt(v[None, :, None, None] + 1e-5)
        return np.maximum(y * g[None, :, None, None] + b[None, :, None, None], 0)

    f = "features."
    x = bn_relu(conv3x3(x, sd[f + "0.weight"], sd[f + "0.bias"]), f + "1")
    x = bn_relu(conv3x3(x, sd[f + "3.weight"], sd[f + "3.bias"]), f + "4")
    n, c, h, w = x.shape
    x = x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
    x = bn_relu(conv3x3(x, sd[f + "7.weight"], sd[f + "7.bias"]), f + "8")
    return x.mean(axis=(2, 3)) @ sd["classifier.weight"].T + sd["classifier.bias"]


def check_names_and_shapes(run_dir):
    arrays, meta = ht.read_safetensors(os.path.join(run_dir, "model.safetensors"))
    model = ht.load(run_dir)
    sd = model.state_dict()
    assert set(sd) == set(arrays)  # the same names, none missing, none extra
    for k, a in arrays.items():
        assert tuple(sd[k].shape) == a.shape, k
        assert np.array_equal(sd[k].numpy(), a), k
    assert meta["format"] == "hsi.model" and meta["model"] == model.hsi_model
    assert not model.training
    return model


def agreement(run_dir, n=300, seed=5):
    r = hsi.Run.load(run_dir)
    scene = hsi.open(SCENE)
    feats = r.pipeline.transform(scene)
    hmap = r.predict(scene)
    model = ht.load(run_dir)
    pix = np.random.default_rng(seed).choice(hmap.size, n, replace=False)
    pred = ht.predict(model, feats, pix)
    return float((pred == hmap.ravel()[pix]).mean()), model, feats, pix


def test_cnn2d_names_shapes_and_predictions(trained):
    check_names_and_shapes(trained["out"])
    agree, model, feats, pix = agreement(trained["out"])
    assert agree >= 0.99


def test_cnn2d_logits_equal_numpy_float64(trained):
    model = ht.load(trained["out"])
    feats = hsi.Run.load(trained["out"]).pipeline.transform(SCENE)
    pix = np.random.default_rng(1).choice(96 * 96, 200, replace=False)
    # patches at the scene's edges too: corners and borders, numpy reflect padding
    pix = np.concatenate([pix, [0, 95, 96 * 95, 96 * 96 - 1, 96 * 50]])
    p = ht.patches(feats, pix, model.patch, model.pad)
    assert p.shape == (205, 30, 11, 11)
    r = model.patch // 2
    padded = np.pad(feats, ((0, 0), (r, r), (r, r)), mode="reflect")
    y, x = divmod(int(pix[3]), 96)
    assert np.array_equal(p[3], padded[:, y:y + 11, x:x + 11])
    sd64 = {k: v.astype(np.float64) for k, v in
            ht.read_safetensors(os.path.join(trained["out"], "model.safetensors"))[0].items()}
    ref = numpy_cnn2d(p.astype(np.float64), sd64)
    got = ht.logits(model, feats, pix).numpy()
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())


def test_whole_map_equals_hsi(trained):
    r = hsi.Run.load(trained["out"])
    feats = r.pipeline.transform(SCENE)
    m = ht.predict(ht.load(trained["out"]), feats)
    hmap = r.predict(SCENE)
    assert m.shape == hmap.shape and (m == hmap).mean() >= 0.99


@pytest.mark.parametrize("model,extra", [("cnn1d", {}), ("hybridsn", {"pca": 16, "patch": 9})])
def test_other_architectures(tmp_path, model, extra):
    out = str(tmp_path / model)
    hsi.train(SCENE, GT, out, quiet=True, model=model, epochs=1, train=0.03, **extra)
    check_names_and_shapes(out)
    agree, *_ = agreement(out)
    assert agree >= 0.99


def test_fine_tune_step(trained):
    """The loaded module trains in PyTorch (gradients reach every parameter)."""
    model = ht.load(trained["out"])
    feats = hsi.Run.load(trained["out"]).pipeline.transform(SCENE)
    pix = np.arange(0, 96 * 96, 97)[:32]
    x = torch.from_numpy(ht.patches(feats, pix, model.patch))
    model.train()
    loss = torch.nn.functional.cross_entropy(model(x), torch.zeros(len(pix), dtype=torch.long))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_read_safetensors_by_hand_equals_package(trained):
    path = os.path.join(trained["out"], "preprocessing.safetensors")
    arrays, meta = ht.read_safetensors(path)
    assert meta["format"] == "hsi.preprocessing"
    p = hsi.Run.load(trained["out"]).pipeline
    assert np.array_equal(arrays["bands"], p.bands_)
    assert np.allclose(arrays["pca.components"], p.components_)
    try:
        import safetensors.numpy  # noqa: F401
    except ImportError:
        return
    ref = safetensors.numpy.load_file(path)
    assert set(ref) == set(arrays) and all(np.array_equal(ref[k], arrays[k]) for k in ref)


def test_unknown_model():
    with pytest.raises(ValueError, match="unknown model"):
        ht.build("resnet", 30, 11, 8)
