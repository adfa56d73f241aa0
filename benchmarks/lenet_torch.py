#!/usr/bin/python3
"""PyTorch's side of benchmarks/lenet_vs_torch.sh: the LeNet of examples/train_fashion_mnist.cpp
(--model lenet, its defaults; or with --model mlp its MLP 784-256-128-10) trained with PyTorch on
the CPU, printing one line

    samples_per_sec=N train_loss=X

for one epoch over the first --limit training images. Same layers, batch 256, SGD with Nesterov
momentum 0.9 and cosine learning-rate decay per step from 0.05 (the MLP: 0.1), standardized pixels, a fresh
shuffle per epoch; the clock runs over the training steps only (as the example's samples/s).

Usage: lenet_torch.py [--model lenet|mlp] [--threads N] [--limit N] [--batch N] [--epochs N] [--data DIR]
Exits with status 77 (and a message) where torch cannot be imported.
"""
import argparse
import gzip
import math
import os
import sys
import time

try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as e:  # the caller skips on 77
    print(f"lenet_torch.py: cannot import torch ({e})", file=sys.stderr)
    sys.exit(77)


def read_idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["lenet", "mlp"], default="lenet")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--limit", type=int, default=15000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--precision", choices=["float", "bf16"], default="float")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)

    images = read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"), 16)
    labels = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"), 8)
    x = torch.from_numpy(images.astype(np.float32)).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(labels.astype(np.int64))
    x = (x - x.mean()) / x.std(unbiased=False)  # the example standardizes over the training set
    x, y = x[: a.limit].contiguous(), y[: a.limit].contiguous()

    if a.model == "lenet":
        model = nn.Sequential(
            nn.Conv2d(1, 20, 3), nn.ReLU(), nn.AvgPool2d(2),
            nn.Conv2d(20, 50, 5), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(),
            nn.Linear(800, 128), nn.ReLU(), nn.Linear(128, 10))
        base_lr = 0.05
    else:
        model = nn.Sequential(
            nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, 10))
        base_lr = 0.1
    opt = torch.optim.SGD(model.parameters(), lr=base_lr, momentum=0.9, nesterov=True)
    loss_fn = nn.CrossEntropyLoss()

    n = x.shape[0]
    batches = (n + a.batch - 1) // a.batch
    total = batches * a.epochs
    seconds, trained, last_loss = 0.0, 0, float("nan")
    for epoch in range(a.epochs):
        perm = torch.randperm(n)
        start = time.perf_counter()
        for b in range(batches):
            for g in opt.param_groups:
                g["lr"] = base_lr * 0.5 * (1 + math.cos(math.pi * (epoch * batches + b) / total))
            idx = perm[b * a.batch:(b + 1) * a.batch]
            xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            # bf16: CPU autocast runs the linear and convolution layers in bfloat16
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
        last_loss = float(loss)
        seconds += time.perf_counter() - start
        trained += n
    print(f"samples_per_sec={trained / seconds:.1f} train_loss={last_loss:.4f}")


if __name__ == "__main__":
    main()
