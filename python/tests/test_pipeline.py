"""hsi.stats and hsi.Pipeline against numpy, scikit-learn and the CLI
(`hsi preprocess`, `hsi pca apply`)."""
import numpy as np
import pytest

import hsi
from conftest import GT, SCENE, run_cli


def test_stats_equal_numpy(scene):
    a = np.asarray(scene, dtype=np.float64)
    s = hsi.stats(scene)
    assert set(s) == {"mean", "std", "min", "max", "count"}
    assert np.allclose(s["mean"], a.mean(axis=(1, 2)), rtol=1e-12)
    assert np.allclose(s["std"], a.std(axis=(1, 2)), rtol=1e-10)  # population (ddof 0)
    assert np.array_equal(s["min"], a.min(axis=(1, 2)))
    assert np.array_equal(s["max"], a.max(axis=(1, 2)))
    assert np.all(s["count"] == 96 * 96) and s["count"].dtype == np.int64


def test_stats_mask_and_arrays(scene):
    gt = hsi.open(GT)
    m = gt.array[0] != 0
    a = np.asarray(scene, dtype=np.float64)[:, m]
    for mask in (gt, GT, gt.array[0], m):  # a label Cube, a path, labels, booleans
        s = hsi.stats(scene, mask=mask)
        assert np.all(s["count"] == m.sum())
        assert np.allclose(s["mean"], a.mean(1), rtol=1e-12)
    # a numpy array (wrapped, no copy), any strides and byte order
    x = np.asarray(scene)[:, ::2, ::-1].astype(">f4")
    s = hsi.stats(x)
    assert np.allclose(s["mean"], x.astype(np.float64).mean(axis=(1, 2)), rtol=1e-6)
    with pytest.raises(ValueError, match="mask"):
        hsi.stats(scene, mask=np.ones((3, 3)))


def test_stats_skips_nan():
    x = np.ones((2, 3, 3), np.float32)
    x[0, 0, 0] = np.nan
    s = hsi.stats(x)
    assert s["count"].tolist() == [8, 9] and np.all(s["mean"] == 1)


def read_cube(path):
    return np.array(hsi.open(path).array, dtype=np.float32)


def test_pipeline_equals_cli_preprocess(scene, tmp_path):
    out = tmp_path / "pc.hdr"
    run_cli("preprocess", SCENE, out, "--normalize", "zscore", "--pca", 5)
    ref = read_cube(str(out))
    p = hsi.Pipeline(normalize="zscore", pca=5)
    assert p.fit(scene) is p
    f = p.transform(scene)
    assert f.shape == (5, 96, 96) and f.dtype == np.float32 and f.flags.c_contiguous
    scale = np.abs(ref).max()
    assert np.abs(f - ref).max() <= 1e-5 * scale
    assert np.array_equal(hsi.Pipeline(normalize="zscore", pca=5).fit_transform(SCENE), f)
    # fitted attributes
    assert p.n_features_in_ == 128 and p.n_components_ == 5 and p.n_features_out_ == 5
    assert p.components_.shape == (5, 128) and p.mean_.shape == (128,)
    assert np.array_equal(p.bands_, np.arange(128))
    ev, r = p.explained_variance_, p.explained_variance_ratio_
    assert ev.shape == r.shape == (5,) and np.all(np.diff(ev) <= 0) and 0 < r.sum() <= 1
    # the components are orthonormal
    assert np.allclose(p.components_ @ p.components_.T, np.eye(5), atol=1e-10)


def test_pipeline_save_then_cli_pca_apply(scene, tmp_path):
    gt = hsi.open(GT)
    p = hsi.Pipeline(bands="1-100", normalize="minmax", pca=4).fit(scene, mask=gt)
    model = p.save(str(tmp_path / "m.safetensors"))
    out = tmp_path / "applied.hdr"
    run_cli("pca", "apply", model, SCENE, out)
    f = p.transform(scene)
    ref = read_cube(str(out))
    assert np.abs(f - ref).max() <= 1e-5 * np.abs(ref).max()
    q = hsi.Pipeline.load(model)
    assert np.array_equal(q.transform(scene), f)
    assert np.array_equal(q.bands_, np.arange(100)) and q.n_components_ == 4
    assert np.allclose(q.components_, p.components_)


def test_pipeline_equals_sklearn_pca(scene):
    decomposition = pytest.importorskip("sklearn.decomposition")
    x = np.asarray(scene, dtype=np.float64).reshape(128, -1).T  # (pixels, bands)
    xs = (x - x.mean(0)) / x.std(0)  # zscore as hsi does it (population std)
    ref = decomposition.PCA(6).fit(xs)
    p = hsi.Pipeline(normalize="zscore", pca=6).fit(scene)
    signs = np.sign(np.sum(ref.components_ * p.components_, axis=1))
    assert np.allclose(p.components_, ref.components_ * signs[:, None], atol=1e-4)
    assert np.allclose(p.explained_variance_, ref.explained_variance_, rtol=1e-4)
    assert np.allclose(p.explained_variance_ratio_, ref.explained_variance_ratio_, rtol=1e-4)
    z = p.transform(scene).reshape(6, -1).T
    zr = ref.transform(xs) * signs
    assert np.abs(z - zr).max() <= 1e-4 * np.abs(zr).max()
    # raw DN (no normalisation): hsi's covariance is float32 (ssyrk), so only
    # the leading components are compared tightly
    raw = decomposition.PCA(4).fit(x)
    q = hsi.Pipeline(normalize="none", pca=4).fit(scene)
    signs = np.sign(np.sum(raw.components_ * q.components_, axis=1))
    assert np.allclose(q.components_, raw.components_ * signs[:, None], atol=1e-4)
    assert np.allclose(q.mean_, raw.mean_)
    assert np.allclose(q.explained_variance_, raw.explained_variance_, rtol=1e-4)


def test_pipeline_options(scene):
    p = hsi.Pipeline(bands=[0, 5, 7], normalize=None).fit(scene)  # 0-based ints
    assert p.bands_.tolist() == [0, 5, 7] and p.n_components_ is None and p.components_ is None
    f = p.transform(scene)
    assert np.array_equal(f, np.asarray(scene)[[0, 5, 7]].astype(np.float32))
    w = hsi.Pipeline(wavelengths=[(400, 500)], normalize="none").fit(scene)
    wl = scene.wavelengths
    assert w.bands_.tolist() == np.nonzero((wl >= 400) & (wl <= 500))[0].tolist()
    v = hsi.Pipeline(pca_variance=0.99, whiten=True).fit(scene)
    assert v.explained_variance_ratio_.sum() >= 0.99
    z = v.transform(scene).reshape(v.n_components_, -1)
    assert np.allclose(z.var(axis=1, ddof=1), 1, rtol=1e-3)
    assert hsi.Pipeline().get_params()["normalize"] == "zscore"


def test_pipeline_errors(scene):
    with pytest.raises(hsi.NotFittedError):
        hsi.Pipeline().transform(scene)
    with pytest.raises(AttributeError):  # sklearn's check_is_fitted style
        hsi.Pipeline().components_
    with pytest.raises(ValueError, match="normalize"):
        hsi.Pipeline(normalize="zcore").fit(scene)
    with pytest.raises(ValueError, match="not both"):
        hsi.Pipeline(pca=3, pca_variance=0.5).fit(scene)
    with pytest.raises(ValueError):
        hsi.Pipeline(pca=-1).fit(scene)
    with pytest.raises(hsi.HsiError):
        hsi.Pipeline(bands="500-600").fit(scene)  # past the last band: hsi's message
    p = hsi.Pipeline(pca=3).fit(scene)
    with pytest.raises(hsi.HsiError) as e:
        p.transform(np.zeros((7, 4, 4), np.float32))  # wrong band count
    assert "128" in str(e.value) or "7" in str(e.value)
    with pytest.raises(FileNotFoundError):
        hsi.Pipeline.load("/nonexistent/model.safetensors")
    with pytest.raises(hsi.HsiError):
        hsi.Pipeline.load(SCENE)  # not a model
