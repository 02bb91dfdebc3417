#!/usr/bin/python3
"""torch_cnn2d.py - PyTorch's side of `hsi bench model cnn2d`: the same
architecture (conv3x3 K->64 BN ReLU, conv3x3 64->64 BN ReLU, maxpool 2,
conv3x3 64->128 BN ReLU, GAP, dropout 0.3, linear), batch, random data,
AdamW, cross-entropy, and thread count. Prints one JSON line with
train_samples_per_s and infer_samples_per_s. Run with Debian's python3-torch:

    /usr/bin/python3 bench/torch_cnn2d.py [--batch 128] [--bands 30] [--patch 11]
                                          [--classes 16] [--threads 2] [--steps 20]"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CNN2D(nn.Module):
    def __init__(self, bands, classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(bands, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(0.3)
        self.classifier = nn.Linear(128, classes)

    def forward(self, x):
        return self.classifier(self.dropout(torch.flatten(self.pool(self.features(x)), 1)))


def main():
    ap = argparse.ArgumentParser()
    for k, v in [("batch", 128), ("bands", 30), ("patch", 11), ("classes", 16), ("threads", 2),
                 ("steps", 20), ("warmup", 3)]:
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    m = CNN2D(a.bands, a.classes)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randn(a.batch, a.bands, a.patch, a.patch)
    y = torch.randint(0, a.classes, (a.batch,))
    m.train()
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    t_train = time.perf_counter() - t0
    m.eval()
    with torch.no_grad():
        for s in range(a.warmup + a.steps):
            if s == a.warmup:
                t0 = time.perf_counter()
            m(x)
    t_inf = time.perf_counter() - t0
    print(json.dumps({"framework": "torch " + torch.__version__, "threads": a.threads,
                      "train_samples_per_s": round(a.batch * a.steps / t_train, 1),
                      "infer_samples_per_s": round(a.batch * a.steps / t_inf, 1)}))


if __name__ == "__main__":
    main()
