"""numpy's side of tests/surface/test_math.cpp (run with /usr/bin/python3).

  math_reference.py DIR   reads DIR/manifest.txt, one line per case: "ID OP AXIS P1 P2", with
                          DIR/ID_in.npy (the input, as meld saw it through a view) and meld's
                          results DIR/ID_out.npy (and DIR/ID_idx.npy for topk); computes each with
                          numpy and prints every case that disagrees. Exit status 0 when all agree.
"""
import os
import sys

import numpy as np


def logsumexp(x, axis):
    m = np.max(x, axis=axis, keepdims=True) if x.size else np.array(-np.inf)
    shift = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = np.log(np.sum(np.exp(x - shift), axis=axis, keepdims=True)) + shift
    return out.reshape(()) if axis is None else np.squeeze(out, axis=axis)


def topk_order(line, k, largest):
    def key(i):
        v = line[i]
        if np.isnan(v):
            return (0 if largest else 1, 0.0, i)
        return (1 if largest else 0, -float(v) if largest else float(v), i)
    return sorted(range(len(line)), key=key)[:k]


def reference(op, x, axis, p1, p2):
    if op == "clip":
        return np.clip(x, x.dtype.type(p1), x.dtype.type(p2))
    if op in ("floor", "ceil"):
        return getattr(np, op)(x) if x.dtype.kind == "f" else x
    if op == "round":
        return np.round(x)
    if op in ("isnan", "isinf", "isfinite"):
        return getattr(np, op)(x).astype(np.int32)
    if op in ("var", "std"):
        with np.errstate(invalid="ignore", divide="ignore"):
            r = getattr(np, op)(x.astype(np.float64) if x.dtype.kind == "i" else x, axis=axis, ddof=int(p1))
        return np.asarray(r)
    if op == "logsumexp":
        return logsumexp(x, axis)
    if op == "norm":
        y = x.astype(np.float64) if x.dtype.kind == "i" else x
        ord_ = np.inf if p1 == "inf" else float(p1)
        if axis is None:
            y = y.reshape(-1)
        return np.asarray(np.linalg.norm(y, ord=ord_, axis=axis))
    if op in ("cumsum", "cumprod"):
        with np.errstate(over="ignore", invalid="ignore"):
            return getattr(np, op)(x, axis=axis)
    if op == "sort":
        return np.sort(x, axis=axis)
    if op == "argsort":
        return np.argsort(x, axis=axis, kind="stable")
    if op == "topk":
        k, largest = int(p1), p2 == "1"
        moved = np.moveaxis(x, axis, -1)
        flat = moved.reshape(-1, moved.shape[-1])
        idx = np.array([topk_order(line, k, largest) for line in flat], dtype=np.int64)
        idx = idx.reshape(moved.shape[:-1] + (k,))
        vals = np.take_along_axis(moved, idx, axis=-1)
        return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)
    raise ValueError("unknown op " + op)


def agree(name, got, want, rtol):
    if got.shape != want.shape:
        print("%s: shape %s, numpy %s" % (name, got.shape, want.shape))
        return False
    if got.dtype.kind == "f" or want.dtype.kind == "f":
        g, w = got.astype(np.float64), want.astype(np.float64)
        same_special = np.array_equal(np.isnan(g), np.isnan(w)) and np.array_equal(
            np.where(np.isinf(w), w, 0), np.where(np.isinf(g), g, 0))
        if not same_special or not np.allclose(g, w, rtol=rtol, atol=0, equal_nan=True):
            print("%s: meld %s\n  numpy %s" % (name, got.reshape(-1)[:20], want.reshape(-1)[:20]))
            return False
        return True
    if not np.array_equal(got, want):
        print("%s: meld %s\n  numpy %s" % (name, got.reshape(-1)[:20], want.reshape(-1)[:20]))
        return False
    return True


def main(d):
    ok = count = 0
    for line in open(os.path.join(d, "manifest.txt")):
        case, op, axis, p1, p2 = line.split()
        axis = None if axis == "none" else int(axis)
        x = np.load(os.path.join(d, case + "_in.npy"))
        got = np.load(os.path.join(d, case + "_out.npy"))
        rtol = 2e-4 if x.dtype == np.float32 else 1e-9
        want = reference(op, x, axis, p1, p2)
        name = "%s %s axis=%s %s %s dtype=%s shape=%s" % (case, op, axis, p1, p2, x.dtype, x.shape)
        if op == "topk":
            good = agree(name + " values", got, want[0], 0) and agree(
                name + " indices", np.load(os.path.join(d, case + "_idx.npy")), want[1], 0)
        else:
            good = agree(name, got, np.asarray(want), rtol if op in ("var", "std", "logsumexp", "norm", "cumsum", "cumprod") else 0)
        ok += good
        count += 1
    print("numpy agrees on %d of %d cases" % (ok, count))
    return 0 if ok == count and count > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
