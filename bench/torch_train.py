#!/usr/bin/python3
"""torch_train.py - PyTorch's side of bench/bench_train.sh: cnn2d (the class in
bench/torch_cnn2d.py) or hybridsn (Roy et al. 2019, as models/nn.c builds it:
3-D convs 1->8 (7x3x3), 8->16 (5x3x3), 32 (3x3x3) with ReLU, reshape, 2-D
conv 3x3 -> 64 + ReLU, FC 256 / 128 with ReLU and dropout 0.4, linear).
Same batch, random input, AdamW, cross-entropy and thread count as `hsi bench
model`; prints one JSON line (train_samples_per_s, infer_samples_per_s).

    /usr/bin/python3 bench/torch_train.py MODEL [--batch 128] [--bands 30] [--patch 11]
                                                [--classes 16] [--threads 2] [--steps 20]"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_cnn2d import CNN2D  # noqa: E402


class HybridSN(nn.Module):
    def __init__(self, bands, patch, classes):
        super().__init__()
        d, s = bands - 6 - 4 - 2, patch - 6
        self.features = nn.Sequential(
            nn.Conv3d(1, 8, (7, 3, 3)), nn.ReLU(), nn.Conv3d(8, 16, (5, 3, 3)), nn.ReLU(),
            nn.Conv3d(16, 32, (3, 3, 3)), nn.ReLU())
        self.conv2d = nn.Conv2d(32 * d, 64, 3)
        self.classifier = nn.Sequential(
            nn.Linear(64 * (s - 2) * (s - 2), 256), nn.ReLU(), nn.Dropout(0.4),
            nn.Linear(256, 128), nn.ReLU(), nn.Dropout(0.4), nn.Linear(128, classes))

    def forward(self, x):
        x = self.features(x)
        x = x.reshape(x.shape[0], -1, x.shape[3], x.shape[4])
        x = F.relu(self.conv2d(x))
        return self.classifier(torch.flatten(x, 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["cnn2d", "hybridsn"])
    for k, v in [("batch", 128), ("bands", 30), ("patch", 11), ("classes", 16), ("threads", 2),
                 ("steps", 20), ("warmup", 3)]:
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    if a.model == "cnn2d":
        m = CNN2D(a.bands, a.classes)
        x = torch.randn(a.batch, a.bands, a.patch, a.patch)
    else:
        m = HybridSN(a.bands, a.patch, a.classes)
        x = torch.randn(a.batch, 1, a.bands, a.patch, a.patch)
    y = torch.randint(0, a.classes, (a.batch,))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    m.train()
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()
        opt.step()
    t_train = time.perf_counter() - t0
    m.eval()
    with torch.no_grad():
        for s in range(a.warmup + a.steps):
            if s == a.warmup:
                t0 = time.perf_counter()
            m(x)
    t_inf = time.perf_counter() - t0
    print(json.dumps({"model": a.model, "framework": "torch " + torch.__version__,
                      "threads": a.threads, "batch": a.batch,
                      "params": sum(p.numel() for p in m.parameters()),
                      "train_samples_per_s": round(a.batch * a.steps / t_train, 1),
                      "infer_samples_per_s": round(a.batch * a.steps / t_inf, 1)}))


if __name__ == "__main__":
    main()
