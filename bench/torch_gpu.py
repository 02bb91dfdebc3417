#!/usr/bin/env python3
"""torch_gpu.py - PyTorch's side of bench/gpu_check.sh on the same card:
cnn2d (batch --batch and --batch2) and HybridSN (the classes of
bench/torch_cnn2d.py / torch_train.py, the architectures of models/nn.c)
trained with AdamW and cross-entropy on a fixed random batch on the GPU,
timed with torch.cuda.synchronize, in two modes: "fp32" (TF32 off for
cuDNN convolutions and cuBLAS matmuls: what hsi computes) and "tf32" (both
on: PyTorch's fastest FP32-input setting); plus host-to-device GB/s from
pinned and pageable tensors. Dropout is on, as in hsi's GPU step
(hsi_dmodel).

Prints JSON lines, one per figure, flushed as produced (a timeout keeps
what was measured): {"torch": ..., "device": ..., "cudnn": ...},
{"h2d_pinned_gbps": x}, {"h2d_pageable_gbps": x}, then for each mode
{"<key>_<mode>": {...}} with key cnn2d (batch --batch), cnn2d_b<batch2>
and hybridsn (the names gpu_bench uses), a failure as
{"stage": "<key>_<mode>", "error": "..."} and the next one run, and last
{"torch_errors": n}. Exit status 0 when everything was measured, 1 when
something failed, 2 without torch or a CUDA device.

    python3 bench/torch_gpu.py [--batch 128] [--batch2 1024] [--bands 30] [--patch 11]
                               [--classes 16] [--steps 20] [--warmup 3] [--modes fp32,tf32]
                               [--profile-out FILE]

--profile-out: then PyTorch's profiler table (ops by device time, 5 FP32
training steps) of cnn2d at --batch2 and HybridSN at --batch, appended to
FILE beside hsi's `bench model --ops` tables."""
import argparse
import json
import os
import sys
import time


def out(obj):
    print(json.dumps(obj), flush=True)


def h2d(torch, pinned):
    n = 256 << 20
    src = torch.ones(n, dtype=torch.uint8, pin_memory=pinned)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst.copy_(src, non_blocking=pinned)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        dst.copy_(src, non_blocking=pinned)
    torch.cuda.synchronize()
    return 5 * n / (time.perf_counter() - t0) / 1e9


def set_mode(torch, mode):
    """fp32: no TF32 anywhere (hsi's arithmetic); tf32: TF32 for both."""
    on = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = on
    torch.backends.cuda.matmul.allow_tf32 = on
    flags = {"tf32_cudnn": torch.backends.cudnn.allow_tf32,
             "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
    if not on and any(flags.values()):  # e.g. TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (NGC images)
        raise RuntimeError("fp32 asked, but TF32 stays on (%s; TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=%s): "
                           "no FP32 figure" % (flags, os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")))
    return flags


def empty_cache(torch):
    """Returns the cached blocks; after a sticky CUDA error it raises: ignored."""
    try:
        torch.cuda.empty_cache()
    except Exception:
        pass


def make(torch, models, name, batch, a, dev):
    """The model, a fixed random batch and its classes, on dev."""
    CNN2D, HybridSN = models
    torch.manual_seed(1)
    if name == "cnn2d":
        m = CNN2D(a.bands, a.classes).to(dev)
        x = torch.randn(batch, a.bands, a.patch, a.patch, device=dev)
    else:
        m = HybridSN(a.bands, a.patch, a.classes).to(dev)
        x = torch.randn(batch, 1, a.bands, a.patch, a.patch, device=dev)
    return m, x, torch.arange(batch, device=dev) % a.classes


def bench(torch, F, models, name, batch, a):
    m, x, y = make(torch, models, name, batch, a, torch.device("cuda"))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    m.train()
    losses = []
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        if s == 0:
            losses.append(loss.item())
    torch.cuda.synchronize()
    t_train = time.perf_counter() - t0
    losses.append(loss.item())
    m.eval()
    with torch.no_grad():
        for s in range(a.warmup + a.steps):
            if s == a.warmup:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            m(x)
        torch.cuda.synchronize()
    t_inf = time.perf_counter() - t0
    return {"batch": batch,
            "train_samples_per_s": batch * a.steps / t_train,
            "infer_samples_per_s": batch * a.steps / t_inf,
            "ms_per_step": 1e3 * t_train / a.steps,
            "loss_first": losses[0], "loss_last": losses[-1]}


def profile(torch, F, models, name, batch, a, path, dev="cuda"):
    """PyTorch's profiler over 5 training steps (after 3 warm-up steps):
    its table of ops by device time (CPU time without a GPU), appended to
    path under a header, for the per-op table of `hsi bench model --ops`."""
    from torch.profiler import ProfilerActivity
    m, x, y = make(torch, models, name, batch, a, torch.device(dev))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    m.train()
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(m(x), y).backward()
        opt.step()
    for _ in range(3):
        step()
    sync()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    with torch.profiler.profile(activities=acts) as p:
        for _ in range(5):
            step()
        sync()
    avg = p.key_averages()
    table = None
    for key in (("device_time_total", "cuda_time_total") if dev == "cuda" else ("cpu_time_total",)):
        try:
            table = avg.table(sort_by=key, row_limit=25)
            break
        except (KeyError, AttributeError, ValueError):
            continue
    with open(path, "a") as f:
        f.write("== PyTorch %s, %s batch %d, 5 training steps (FP32, TF32 off), by %s time\n%s\n"
                % (torch.__version__, name, batch, "device" if dev == "cuda" else "CPU",
                   table if table is not None else "(no table: %r)" % (avg,)))


def main():
    ap = argparse.ArgumentParser()
    for k, v in [("batch", 128), ("batch2", 1024), ("bands", 30), ("patch", 11), ("classes", 16),
                 ("steps", 20), ("warmup", 3)]:
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--modes", default="fp32,tf32")
    ap.add_argument("--profile-out", default="",
                    help="also append PyTorch's profiler tables (cnn2d at --batch2, HybridSN at "
                         "--batch, FP32) to this file")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in ("fp32", "tf32")]
    if bad:
        ap.error("--modes: fp32 and/or tf32, found %s" % ",".join(bad))
    try:
        import torch
        import torch.nn.functional as F
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from torch_cnn2d import CNN2D
        from torch_train import HybridSN
    except Exception as e:  # ImportError, or a broken CUDA library under torch
        out({"stage": "import", "error": "%s: %s (python %s)" % (type(e).__name__, e, sys.executable)})
        return 2
    if not torch.cuda.is_available():
        out({"stage": "device", "error": "torch %s sees no CUDA device (torch built for CUDA %s)"
             % (torch.__version__, torch.version.cuda)})
        return 2
    torch.backends.cudnn.benchmark = True  # its fastest algorithms, deterministic or not
    out({"torch": torch.__version__, "torch_cuda": torch.version.cuda,
         "device": torch.cuda.get_device_name(0), "cudnn": torch.backends.cudnn.version(),
         "cudnn_benchmark": torch.backends.cudnn.benchmark,
         "cudnn_deterministic": torch.backends.cudnn.deterministic})
    n_err = 0
    for key, pinned in (("h2d_pinned_gbps", True), ("h2d_pageable_gbps", False)):
        try:
            out({key: h2d(torch, pinned)})
        except Exception as e:
            n_err += 1
            out({"stage": key, "error": "%s: %s" % (type(e).__name__, e)})
    configs = [("cnn2d", "cnn2d", a.batch)]
    if a.batch2 > 0:
        configs.append(("cnn2d_b%d" % a.batch2, "cnn2d", a.batch2))
    configs.append(("hybridsn", "hybridsn", a.batch))
    for mode in modes:  # fp32 first: the headline against hsi
        for key, name, batch in configs:
            what = "%s_%s" % (key, mode)
            try:
                flags = set_mode(torch, mode)
                r = bench(torch, F, (CNN2D, HybridSN), name, batch, a)
                r.update(flags, mode=mode)
                out({what: r})
            except Exception as e:  # CUDA OOM, cuDNN refusal: report it, go on
                n_err += 1
                out({"stage": what, "error": "%s: %s" % (type(e).__name__, e)})
            empty_cache(torch)
    if a.profile_out:
        set_mode(torch, "fp32")
        for name, batch in (("cnn2d", a.batch2 if a.batch2 > 0 else a.batch), ("hybridsn", a.batch)):
            try:
                profile(torch, F, (CNN2D, HybridSN), name, batch, a, a.profile_out)
                out({"profile": "%s_b%d" % (name, batch), "file": a.profile_out})
            except Exception as e:
                n_err += 1
                out({"stage": "profile_%s" % name, "error": "%s: %s" % (type(e).__name__, e)})
            empty_cache(torch)
    out({"torch_errors": n_err})
    return 1 if n_err else 0


if __name__ == "__main__":
    sys.exit(main())
