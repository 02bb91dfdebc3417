#!/usr/bin/env python3
"""torch_gpu.py - PyTorch's side of bench/gpu_check.sh on the same card:
cnn2d and HybridSN (the classes of bench/torch_cnn2d.py / torch_train.py,
the architectures of models/nn.c) trained with AdamW and cross-entropy on a
fixed random batch on the GPU, timed with torch.cuda.synchronize; plus
host-to-device GB/s from pinned and pageable tensors. Prints one JSON object.
Dropout is on, as in hsi's GPU step (hsi_dmodel).

    python3 bench/torch_gpu.py [--batch 128] [--bands 30] [--patch 11] [--classes 16] [--steps 20]"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_cnn2d import CNN2D  # noqa: E402
from torch_train import HybridSN  # noqa: E402


def h2d(pinned):
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


def bench(name, a):
    torch.manual_seed(1)
    dev = torch.device("cuda")
    if name == "cnn2d":
        m = CNN2D(a.bands, a.classes).to(dev)
        x = torch.randn(a.batch, a.bands, a.patch, a.patch, device=dev)
    else:
        m = HybridSN(a.bands, a.patch, a.classes).to(dev)
        x = torch.randn(a.batch, 1, a.bands, a.patch, a.patch, device=dev)
    y = torch.arange(a.batch, device=dev) % a.classes
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
    return {"train_samples_per_s": a.batch * a.steps / t_train,
            "infer_samples_per_s": a.batch * a.steps / t_inf,
            "ms_per_step": 1e3 * t_train / a.steps,
            "loss_first": losses[0], "loss_last": losses[-1]}


def main():
    ap = argparse.ArgumentParser()
    for k, v in [("batch", 128), ("bands", 30), ("patch", 11), ("classes", 16), ("steps", 20),
                 ("warmup", 3)]:
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return 1
    torch.backends.cudnn.benchmark = True
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
           "cudnn": torch.backends.cudnn.version(),
           "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
           "tf32_cudnn": torch.backends.cudnn.allow_tf32,
           "h2d_pinned_gbps": h2d(True), "h2d_pageable_gbps": h2d(False)}
    for name in ("cnn2d", "hybridsn"):
        out[name] = bench(name, a)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
