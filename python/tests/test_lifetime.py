"""Handles are freed once, views keep them alive, threads share a cube, and
nothing crashes under PYTHONMALLOC=malloc with glibc's heap checks."""
import gc
import os
import subprocess
import sys
import threading

import numpy as np

import hsi
from conftest import GT, PYDIR, SCENE

SCRIPT = r"""
import gc, sys
sys.path.insert(0, %(pydir)r)
import numpy as np
import hsi
scene, gt = %(scene)r, %(gt)r
start = dict(hsi._lib.live)
for i in range(20):
    c = hsi.open(scene)
    a, b = c.array, c.bip()
    if i %% 2:
        c.close()
    del c
    gc.collect()
    assert a.sum() == b.sum()
    m = np.asarray(hsi.open(scene))        # the Cube's own __array_interface__
    gc.collect()
    assert m[3, 4, 5] == a[3, 4, 5]
    w = hsi.wrap(np.asarray(a, dtype=np.float32))
    s = hsi.stats(w, mask=gt)
    p = hsi.Pipeline(pca=3).fit(w)
    del w
    gc.collect()
    f = p.transform(scene)
    del a, b, m, p, s, f
    gc.collect()
run_dir = sys.argv[1] if len(sys.argv) > 1 else None
if run_dir:
    r = hsi.Run.load(run_dir)
    pv = r.pipeline
    del r
    gc.collect()
    pv.transform(scene)
    r = hsi.Run.load(run_dir)
    r.predict(scene)
    del pv, r
for k in (1, 2):
    try:
        hsi.open("/nonexistent/x.hdr")
    except hsi.HsiError:
        pass
gc.collect()
assert hsi._lib.live == start, (hsi._lib.live, start)
print("ok", hsi._lib.live)
"""


def test_no_crash_under_pythonmalloc(tmp_path, trained):
    script = tmp_path / "lifetime.py"
    script.write_text(SCRIPT % {"pydir": PYDIR, "scene": SCENE, "gt": GT})
    env = dict(os.environ, PYTHONMALLOC="malloc", MALLOC_CHECK_="3", MALLOC_PERTURB_="165",
               PYTHONFAULTHANDLER="1")
    p = subprocess.run([sys.executable, str(script), trained["out"]], capture_output=True,
                       text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("ok")


def test_live_handle_counts(trained):
    gc.collect()
    before = dict(hsi._lib.live)
    c = hsi.open(SCENE)
    r = hsi.Run.load(trained["out"])
    pv = r.pipeline
    p = hsi.Pipeline(pca=2).fit(c)
    assert hsi._lib.live["cube"] == before["cube"] + 1
    assert hsi._lib.live["run"] == before["run"] + 1
    assert hsi._lib.live["prep"] == before["prep"] + 1  # the run's is borrowed, not counted
    r.close()
    del r
    gc.collect()
    assert hsi._lib.live["run"] == before["run"] + 1  # kept by the pipeline view
    del pv, p, c
    gc.collect()
    assert hsi._lib.live == before


def test_threads_share_a_cube(scene):
    """Handles are read from several threads at once (the GIL is released)."""
    ref = hsi.stats(scene)["mean"]
    p = hsi.Pipeline(pca=3).fit(scene)
    f0 = p.transform(scene)
    errors = []

    def work():
        try:
            for _ in range(3):
                assert np.array_equal(hsi.stats(scene)["mean"], ref)
                assert np.array_equal(p.transform(scene), f0)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_error_message_is_this_threads():
    """hsi_last_error() is read right after the failing call, on its thread."""
    msgs = {}

    def fail(name):
        try:
            hsi.open("/nonexistent/%s.hdr" % name)
        except hsi.HsiError as e:
            msgs[name] = str(e)

    ts = [threading.Thread(target=fail, args=("t%d" % i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(name in msg for name, msg in msgs.items()) and len(msgs) == 6


def test_example_script_runs(tmp_path):
    ex = os.path.join(PYDIR, "examples", "spy_to_hsi.py")
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TMPDIR=str(tmp_path))
    p = subprocess.run([sys.executable, ex], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "test OA" in p.stdout and "outputs in" in p.stdout
