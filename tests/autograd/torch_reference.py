#!/usr/bin/env python3
"""PyTorch's gradients of small models, the reference of test_torch.cpp.

usage: torch_reference.py IN OUT [MODEL]
MODEL is mlp (the default: a residual GELU MLP), lenet (d2l's LeNet: two convolutions with ReLU
and average pooling, two dense layers) or lenet_bn (convolutions with batch normalization in
training mode, ReLU and max pooling, one dense layer).
IN holds tensors as lines `name rank extents... values...` in double: x, t the class indices, and
the model's parameters; OUT gets the loss, each parameter's gradient under its name, for the LeNets
the input's gradient as x, and for lenet_bn the running statistics after the step as bn1.mean,
bn1.var, bn2.mean, bn2.var, in the same format.
Exits with status 77 when torch cannot be imported (the test then reports a skip).
"""
import sys

try:
    import torch
    import torch.nn.functional as F
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


def mlp(x, p, extra):
    gelu = lambda v: F.gelu(v, approximate="tanh")
    h = gelu(x @ p["w1"] + p["b1"])
    r = h + gelu(h @ p["w2"] + p["b2"])
    return r @ p["w3"] + p["b3"]


def lenet(x, p, extra):
    h = F.avg_pool2d(F.relu(F.conv2d(x, p["c1.weight"], p["c1.bias"])), 2)
    h = F.avg_pool2d(F.relu(F.conv2d(h, p["c2.weight"], p["c2.bias"])), 2)
    h = F.relu(F.linear(h.flatten(1), p["fc1.weight"], p["fc1.bias"]))
    return F.linear(h, p["fc2.weight"], p["fc2.bias"])


def lenet_bn(x, p, extra):
    h = x
    for conv, bn, padding in (("c1", "bn1", 2), ("c2", "bn2", 0)):
        h = F.conv2d(h, p[conv + ".weight"], p[conv + ".bias"], padding=padding)
        channels = h.shape[1]
        mean = torch.zeros(channels, dtype=torch.float64)
        var = torch.ones(channels, dtype=torch.float64)
        h = F.batch_norm(h, mean, var, p[bn + ".weight"], p[bn + ".bias"], training=True)
        extra[bn + ".mean"], extra[bn + ".var"] = mean, var
        h = F.max_pool2d(F.relu(h), 2)
    return F.linear(h.flatten(1), p["fc.weight"], p["fc.bias"])


def main():
    t = read(sys.argv[1])
    model = {"mlp": mlp, "lenet": lenet, "lenet_bn": lenet_bn}[
        sys.argv[3] if len(sys.argv) > 3 else "mlp"]
    params = {k: v.clone().requires_grad_(True) for k, v in t.items() if k not in ("x", "t")}
    x = t["x"].clone().requires_grad_(model is not mlp)
    extra = {}
    loss = F.cross_entropy(model(x, params, extra), t["t"].long())
    loss.backward()
    results = {k: p.grad for k, p in params.items()}
    if x.requires_grad:
        results["x"] = x.grad
    results.update(extra)
    with open(sys.argv[2], "w") as f:
        f.write("loss 0 %.17g\n" % loss.item())
        for k, v in results.items():
            f.write("%s %d %s %s\n" % (k, v.dim(), " ".join(str(s) for s in v.shape),
                                       " ".join("%.17g" % e for e in v.reshape(-1).tolist())))


main()
