#!/usr/bin/env python3
"""PyTorch's gradients of a residual GELU MLP, the reference of test_torch.cpp.

usage: torch_reference.py IN OUT
IN holds tensors as lines `name rank extents... values...` (x, w1, b1, w2, b2, w3, b3 in double,
t the class indices); OUT gets the loss and each parameter's gradient in the same format.
Exits with status 77 when torch cannot be imported (the test then reports a skip).
"""
import sys

try:
    import torch
except ImportError:
    sys.exit(77)


def read(path):
    tensors = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            name, rank = parts[0], int(parts[1])
            shape = [int(v) for v in parts[2:2 + rank]]
            values = [float(v) for v in parts[2 + rank:]]
            tensors[name] = torch.tensor(values, dtype=torch.float64).reshape(shape)
    return tensors


def main():
    t = read(sys.argv[1])
    params = {k: t[k].clone().requires_grad_(True) for k in ("w1", "b1", "w2", "b2", "w3", "b3")}
    gelu = lambda v: torch.nn.functional.gelu(v, approximate="tanh")
    h = gelu(t["x"] @ params["w1"] + params["b1"])
    r = h + gelu(h @ params["w2"] + params["b2"])
    logits = r @ params["w3"] + params["b3"]
    loss = torch.nn.functional.cross_entropy(logits, t["t"].long())
    loss.backward()
    with open(sys.argv[2], "w") as f:
        f.write("loss 0 %.17g\n" % loss.item())
        for k, p in params.items():
            g = p.grad.reshape(-1).tolist()
            f.write("%s %d %s %s\n" % (k, p.dim(), " ".join(str(s) for s in p.shape),
                                       " ".join("%.17g" % v for v in g)))


main()
