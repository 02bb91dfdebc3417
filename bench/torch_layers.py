#!/usr/bin/python3
"""torch_layers.py - PyTorch's side of `hsi bench layers`: forward and backward
time of each layer of cnn2d (conv 3x3 bands->64, BN, conv 64->64, BN, max pool
2x2, conv 64->128, BN, global average pool) at the same batch, patch and
thread count, best of --reps. The first conv's input needs no gradient, as in
training. Prints one JSON line in the format of `hsi bench layers --json`.

    /usr/bin/python3 bench/torch_layers.py [--batch 128] [--bands 30] [--patch 11]
                                           [--threads 2] [--reps 10]"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def timed(fwd, x, reps):
    best_f = best_b = float("inf")
    for r in range(reps + 1):
        x.grad = None
        t0 = time.perf_counter()
        y = fwd(x)
        t1 = time.perf_counter()
        y.backward(torch.ones_like(y))
        t2 = time.perf_counter()
        if r:
            best_f, best_b = min(best_f, t1 - t0), min(best_b, t2 - t1)
    return best_f, best_b


def main():
    ap = argparse.ArgumentParser()
    for k, v in [("batch", 128), ("bands", 30), ("patch", 11), ("threads", 2), ("reps", 10)]:
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    n, p, h = a.batch, a.patch, a.patch // 2

    def conv(c, k, hw, need_dx):
        x = torch.randn(n, c, hw, hw, requires_grad=need_dx)
        w = torch.randn(k, c, 3, 3, requires_grad=True)
        b = torch.randn(k, requires_grad=True)
        if not need_dx:  # gradient to w only: time the backward through a leaf with grad
            x = x.detach()
            return timed(lambda w_: F.conv2d(x, w_, b, padding=1), w, a.reps)
        return timed(lambda x_: F.conv2d(x_, w, b, padding=1), x, a.reps)

    def bn(c, hw):
        x = torch.randn(n, c, hw, hw, requires_grad=True)
        g = torch.rand(c, requires_grad=True)
        be = torch.randn(c, requires_grad=True)
        rm, rv = torch.zeros(c), torch.ones(c)
        return timed(lambda x_: F.batch_norm(x_, rm, rv, g, be, training=True), x, a.reps)

    def maxpool(c, hw):
        x = torch.randn(n, c, hw, hw, requires_grad=True)
        return timed(lambda x_: F.max_pool2d(x_, 2), x, a.reps)

    def gap(c, hw):
        x = torch.randn(n, c, hw, hw, requires_grad=True)
        return timed(lambda x_: x_.mean(dim=(2, 3)), x, a.reps)

    layers = [("conv1", conv(a.bands, 64, p, False)), ("bn1", bn(64, p)),
              ("conv2", conv(64, 64, p, True)), ("bn2", bn(64, p)), ("maxpool", maxpool(64, p)),
              ("conv3", conv(64, 128, h, True)), ("bn3", bn(128, h)), ("gap", gap(128, h))]
    out = {"batch": n, "threads": a.threads,
           "layers": [{"name": k, "fwd_ms": f * 1e3, "bwd_ms": b * 1e3} for k, (f, b) in layers]}
    out["total_ms"] = sum(l["fwd_ms"] + l["bwd_ms"] for l in out["layers"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
