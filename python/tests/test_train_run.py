"""hsi.train and hsi.Run against the run directory and the CLI (`hsi predict`,
`hsi eval`): metrics, progress events, stopping (callback, exception,
Ctrl-C), predictions byte for byte."""
import json
import os
import signal

import numpy as np
import pytest

import hsi
from conftest import GT, SCENE, run_cli


def test_train_metrics_equal_metrics_json(trained):
    with open(os.path.join(trained["out"], "metrics.json")) as f:
        ref = json.load(f)
    assert trained["metrics"] == ref
    assert ref["epochs_run"] == 2 and 0 < ref["oa"] <= 1
    for name in ("model.safetensors", "preprocessing.safetensors", "pipeline.json", "split.hdr",
                 "map.hdr"):
        assert os.path.exists(os.path.join(trained["out"], name))


def test_progress_events(trained):
    ev = trained["events"]
    epochs = [e for e in ev if e.kind == "epoch"]
    assert len(epochs) == 2
    assert [e.epoch for e in epochs] == [1, 2] and all(e.epochs == 2 for e in epochs)
    assert all(np.isfinite(e.loss) and e.loss > 0 and e.lr > 0 for e in epochs)
    assert all(0 <= e.train_acc <= 1 for e in epochs if not np.isnan(e.train_acc))
    assert all(np.isnan(e.val_oa) for e in epochs)  # no validation split (val 0)
    assert {e.kind for e in ev} <= {"info", "epoch", "done"}
    assert ev[-1].kind == "done" and "OA" in ev[-1].text
    assert any(e.kind == "info" and e.text for e in ev)
    e = epochs[0]
    assert e["loss"] == e.loss and e.asdict()["kind"] == "epoch" and "epoch 1/2" in repr(e)


def test_callback_return_stops(tmp_path):
    m = hsi.train(SCENE, GT, str(tmp_path / "r"), progress=lambda e: e.kind == "epoch",
                  epochs=4, train=0.03)
    assert m["epochs_run"] == 1 < 4
    assert os.path.exists(tmp_path / "r" / "model.safetensors")  # still written


class Boom(Exception):
    pass


def test_callback_exception_stops_and_is_raised(tmp_path):
    seen = []

    def cb(e):
        seen.append(e.kind)
        if e.kind == "epoch":
            raise Boom("stop here")

    with pytest.raises(Boom, match="stop here"):
        hsi.train(SCENE, GT, str(tmp_path / "r"), progress=cb, epochs=4, train=0.03)
    assert seen.count("epoch") == 1  # not called again after it raised
    with open(tmp_path / "r" / "metrics.json") as f:
        assert json.load(f)["epochs_run"] == 1


def test_keyboard_interrupt_in_callback(tmp_path):
    def cb(e):
        if e.kind == "epoch":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        hsi.train(SCENE, GT, str(tmp_path / "r"), progress=cb, epochs=4, train=0.03)
    with open(tmp_path / "r" / "metrics.json") as f:
        assert json.load(f)["epochs_run"] == 1


def test_ctrl_c_stops_after_the_epoch(tmp_path):
    """SIGINT while the trainer runs: stops cleanly, then KeyboardInterrupt."""
    def cb(e):
        if e.kind == "epoch" and e.epoch == 1:
            os.kill(os.getpid(), signal.SIGINT)

    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match="interrupted"):
        hsi.train(SCENE, GT, str(tmp_path / "r"), progress=cb, epochs=4, train=0.03)
    assert signal.getsignal(signal.SIGINT) is handler  # restored
    with open(tmp_path / "r" / "metrics.json") as f:
        assert json.load(f)["epochs_run"] < 4


def test_train_options_and_errors(tmp_path):
    with pytest.raises(TypeError, match="bogus"):
        hsi.train(SCENE, GT, str(tmp_path / "a"), bogus=1)
    with pytest.raises(hsi.HsiError, match="epochs"):
        hsi.train(SCENE, GT, str(tmp_path / "a"), epochs="many")
    with pytest.raises(hsi.HsiError):
        hsi.train(SCENE, GT, str(tmp_path / "a"), model="resnet", epochs=1, quiet=True)
    with pytest.raises(hsi.HsiError) as e:
        hsi.train(str(tmp_path / "missing.hdr"), GT, str(tmp_path / "a"), quiet=True)
    assert "missing.hdr" in str(e.value)
    with pytest.raises(hsi.HsiError, match="--cuda-graph captures the GPU's training step"):
        hsi.train(SCENE, GT, str(tmp_path / "a"), cuda_graph=True, device="cpu", quiet=True)
    with pytest.raises(hsi.HsiError, match="--host-patches says where the GPU's training patches"):
        hsi.train(SCENE, GT, str(tmp_path / "a"), host_patches=True, device="cpu", quiet=True)
    with pytest.raises(ValueError):
        hsi.train(SCENE, None, str(tmp_path / "a"))
    with pytest.raises(ValueError):
        hsi.train(SCENE, GT, None)
    with pytest.raises(TypeError):
        hsi.train(SCENE, GT, str(tmp_path / "a"), progress=3)


def test_train_option_types(tmp_path):
    """Python values map to the JSON the trainer reads: bools, floats, paths."""
    import pathlib
    m = hsi.train(pathlib.Path(SCENE), hsi.open(GT), tmp_path / "t", quiet=True, epochs=1,
                  per_class=5, augment=False, whiten=True, pca=np.int64(8), lr=np.float32(2e-3),
                  normalize="minmax", seed=3, prefetch=3)
    assert m["epochs_run"] == 1 and m["split_counts"]["train"] == 8 * 5
    r = hsi.Run.load(tmp_path / "t")
    assert r.n_features == 8


def test_run_load_and_predict_equals_cli(trained, tmp_path, scene):
    r = hsi.Run.load(trained["out"])
    assert r.model == "cnn2d" and r.patch == 11 and r.n_features == 30 and r.n_classes == 8
    assert r.classes[0] == (1, "Bare soil") and r.labels.tolist() == list(range(1, 9))
    m = r.predict(scene)
    assert m.shape == (96, 96) and m.dtype == np.int32
    out = tmp_path / "map.hdr"
    run_cli("predict", trained["out"], SCENE, out, "--quiet")
    ref = hsi.open(str(out)).array[0]
    assert np.array_equal(m, ref.astype(np.int32))
    assert m.tobytes() == ref.astype(np.int32).tobytes()
    assert np.array_equal(r.predict(SCENE, batch=7), m)  # path, another batch
    assert np.array_equal(r.predict(np.asarray(scene)), m)  # a numpy array
    # the map the trainer wrote
    assert np.array_equal(hsi.open(os.path.join(trained["out"], "map.hdr")).array[0], m)


def test_run_evaluate(trained, scene):
    r = hsi.Run.load(trained["out"])
    e = r.evaluate(scene, GT, on="test")
    assert e["oa"] == trained["metrics"]["oa"]
    assert e["kappa"] == pytest.approx(trained["metrics"]["kappa"], abs=1e-12)
    assert e["on"] == "test" and e["n"] == trained["metrics"]["n"]
    all_ = r.evaluate(scene, hsi.open(GT).array[0].astype(np.int64), on="all")
    gt = hsi.open(GT).array[0]
    m = r.predict(scene)
    assert all_["n"] == int((gt != 0).sum())
    assert all_["oa"] == pytest.approx(float((m[gt != 0] == gt[gt != 0]).mean()), abs=1e-12)
    with pytest.raises(ValueError, match="on must be"):
        r.evaluate(scene, GT, on="everything")
    with pytest.raises(ValueError, match="labels"):
        r.score(m, np.zeros((3, 3), np.int32))


def test_run_roles_and_pipeline_view(trained, scene):
    r = hsi.Run.load(trained["out"])
    assert r.has_split
    roles = r.roles()
    split = hsi.open(os.path.join(trained["out"], "split.hdr")).array[0]
    assert np.array_equal(roles, split)
    counts = trained["metrics"]["split_counts"]
    assert (roles == 1).sum() == counts["train"] and (roles == 3).sum() == counts["test"]
    p = r.pipeline
    assert p.n_features_in_ == 128 and p.n_features_out_ == 30
    feats = p.transform(scene)
    with pytest.raises(hsi.HsiError):
        r.roles((5, 5))  # not the scene's shape
    # the view keeps the run alive after the Run object is gone
    del r
    import gc
    gc.collect()
    assert np.array_equal(p.transform(scene), feats)
    run_cli("pca", "apply", os.path.join(trained["out"], "preprocessing.safetensors"), SCENE,
            os.path.join(trained["out"], "..", "f.hdr"))
    ref = np.asarray(hsi.open(os.path.join(trained["out"], "..", "f.hdr")))
    assert np.abs(feats - ref).max() <= 1e-5 * np.abs(ref).max()


def test_run_errors(tmp_path, trained):
    with pytest.raises(hsi.HsiError) as e:
        hsi.Run.load(str(tmp_path / "nope"))
    assert "nope" in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(hsi.HsiError):
        hsi.Run.load(str(tmp_path / "empty"))
    r = hsi.Run.load(trained["out"])
    with pytest.raises(hsi.HsiError):
        r.predict(np.zeros((5, 8, 8), np.float32))  # 5 bands, the run wants 128
    with pytest.raises(TypeError):
        r.predict(SCENE, batch="big")
    r.close()
    with pytest.raises(ValueError, match="closed"):
        r.predict(SCENE)


def test_explicit_train_test_maps(tmp_path, trained):
    """labels=None with train_labels/test_labels (hsi train --train-labels ...)."""
    gt = hsi.open(GT).array[0]
    roles = hsi.Run.load(trained["out"]).roles()
    trl = hsi.write_envi(str(tmp_path / "train.hdr"), np.where(roles == 1, gt, 0).astype("u1"))
    tel = hsi.write_envi(str(tmp_path / "test.hdr"), np.where(roles == 3, gt, 0).astype("u1"))
    m = hsi.train(SCENE, None, str(tmp_path / "r"), quiet=True, epochs=1, train_labels=trl,
                  test_labels=tel)
    assert m["split"] == "explicit"
    assert m["split_counts"]["train"] == (roles == 1).sum()
    assert m["split_counts"]["test"] == (roles == 3).sum()


def test_gil_released_during_predict(trained, scene):
    """Another Python thread runs while hsi predicts (ctypes drops the GIL)."""
    import threading
    r = hsi.Run.load(trained["out"])
    t = threading.Thread(target=r.predict, args=(scene,))
    n = 0
    t.start()
    while t.is_alive():
        n += 1
    t.join()
    assert n > 1000


def test_cuda_plugin_from_env(tmp_path):
    """HSI_CUDA_PLUGIN names the plugin a ctypes-loaded libhsi takes: it loads
    (the library is promoted to global scope first, as without the variable);
    on a machine without a GPU the error then says why there is no device."""
    import subprocess
    import sys
    from conftest import BUILD, PYDIR
    plugin = os.path.join(BUILD, "libhsi_cuda.so")
    if not os.path.exists(plugin):
        pytest.skip("no CUDA plugin in %s (a CPU build)" % BUILD)
    code = ("import sys; sys.path.insert(0, %r); import hsi\n"
            "try:\n    hsi.train(%r, %r, %r, device='cuda', epochs=1, quiet=True); print('trained')\n"
            "except hsi.HsiError as e:\n    print(e)\n") % (PYDIR, SCENE, GT, str(tmp_path / "run"))
    env = dict(os.environ, HSI_CUDA_PLUGIN=plugin)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert "cannot load the CUDA plugin" not in p.stdout + p.stderr, p.stdout + p.stderr
    assert p.stdout.strip() == "trained" or "CUDA" in p.stdout, p.stdout
