"""numpy's side of tests/surface/test_npy.cpp (run with /usr/bin/python3).

  npy_reference.py write DIR   writes .npy files of every dtype meld has (both byte orders, C and
                               Fortran order, header versions 1.0, 2.0 and 3.0) with numpy, each
                               with NAME.raw (its elements in C order, little-endian) and a line
                               "NAME DTYPE" in DIR/manifest.txt
  npy_reference.py check DIR   loads every meld_*.npy in DIR with numpy.load and compares it, bit
                               for bit, with the NAME.raw and NAME.shape that meld wrote beside it
  npy_reference.py npz-write DIR  writes DIR/numpy.npz (numpy.savez) and DIR/compressed.npz
                               (numpy.savez_compressed) of float32, float64, int32 and int64 arrays,
                               each with NAME.raw / NAME.shape / NAME.dtype as for check
  npy_reference.py npz-check DIR  loads DIR/meld.npz with numpy.load and compares each array with
                               the NAME.raw, NAME.shape and NAME.dtype meld wrote beside it
"""
import os
import sys

import numpy as np
from numpy.lib import format as npformat


def write(d):
    rng = np.random.default_rng(33)

    def floats(shape, dtype):
        a = rng.standard_normal(shape).astype(dtype) * 100
        flat = a.reshape(-1)
        if flat.size >= 4:
            flat[0], flat[1], flat[2] = np.nan, np.inf, -np.inf
            flat[3] = np.finfo(dtype).tiny
        return a

    def ints(shape, dtype):
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
        flat = a.reshape(-1)
        if flat.size >= 2:
            flat[0], flat[1] = info.min, info.max
        return a

    cases = [
        ("f4_c", floats((3, 4), np.float32), None, "float32"),
        ("f8_fortran", np.asfortranarray(floats((2, 3, 4), np.float64)), None, "float64"),
        ("i4_big", ints((5,), np.int32).astype(">i4"), None, "int32"),
        ("i8_c", ints((2, 2), np.int64), None, "int64"),
        ("f4_v2", floats((4, 3), np.float32), (2, 0), "float32"),
        ("f8_v3", floats((2, 5), np.float64), (3, 0), "float64"),
        ("f8_scalar", np.array(2.5), None, "float64"),
        ("f4_empty", np.zeros((0, 3), np.float32), None, "float32"),
        ("f8_big_fortran", np.asfortranarray(floats((3, 2), np.float64)).astype(">f8", order="K"),
         None, "float64"),
        ("i8_big_fortran4", np.asfortranarray(ints((2, 3, 2, 2), np.int64)).astype(">i8", order="K"),
         None, "int64"),
    ]
    with open(os.path.join(d, "manifest.txt"), "w") as manifest:
        for name, a, version, dtype in cases:
            with open(os.path.join(d, name + ".npy"), "wb") as f:
                npformat.write_array(f, a, version=version)
            little = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"))
            with open(os.path.join(d, name + ".raw"), "wb") as f:
                f.write(little.tobytes())
            manifest.write("%s %s %s\n" % (name, dtype, " ".join(str(n) for n in a.shape)))


def check(d):
    names = sorted(f[:-4] for f in os.listdir(d) if f.startswith("meld_") and f.endswith(".npy"))
    if not names:
        print("no meld_*.npy files in", d)
        return 1
    for name in names:
        a = np.load(os.path.join(d, name + ".npy"))
        dtype = open(os.path.join(d, name + ".dtype")).read().split()[0]
        shape = tuple(int(n) for n in open(os.path.join(d, name + ".shape")).read().split())
        raw = open(os.path.join(d, name + ".raw"), "rb").read()
        if str(a.dtype) != dtype or a.shape != shape:
            print("%s: numpy reads %s %s, meld wrote %s %s" % (name, a.dtype, a.shape, dtype, shape))
            return 1
        if np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes() != raw:
            print("%s: the elements differ" % name)
            return 1
    print("numpy read %d files" % len(names))
    return 0


def describe(d, name, a):
    open(os.path.join(d, name + ".raw"), "wb").write(
        np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())
    open(os.path.join(d, name + ".shape"), "w").write(" ".join(str(n) for n in a.shape))
    open(os.path.join(d, name + ".dtype"), "w").write(str(a.dtype))


def npz_write(d):
    rng = np.random.default_rng(35)
    arrays = {
        "weights": rng.standard_normal((3, 4)).astype(np.float32),
        "bias": rng.standard_normal(5),
        "counts": rng.integers(-2**31, 2**31 - 1, size=(2, 3), dtype=np.int32),
        "index": np.asfortranarray(rng.integers(-2**62, 2**62, size=(2, 3, 2), dtype=np.int64)),
        "scalar": np.float64(2.5).reshape(()),
    }
    for name, a in arrays.items():
        describe(d, name, a)
    np.savez(os.path.join(d, "numpy.npz"), **arrays)
    np.savez_compressed(os.path.join(d, "compressed.npz"), **arrays)
    return 0


def npz_check(d):
    with np.load(os.path.join(d, "meld.npz")) as z:
        for name in z.files:
            a = z[name]
            dtype = open(os.path.join(d, name + ".dtype")).read().split()[0]
            shape = tuple(int(n) for n in open(os.path.join(d, name + ".shape")).read().split())
            raw = open(os.path.join(d, name + ".raw"), "rb").read()
            if str(a.dtype) != dtype or a.shape != shape:
                print("%s: numpy reads %s %s, meld wrote %s %s" % (name, a.dtype, a.shape, dtype,
                                                                   shape))
                return 1
            if a.astype(a.dtype.newbyteorder("<")).tobytes() != raw:
                print("%s: the elements differ" % name)
                return 1
        print("numpy read %d arrays: %s" % (len(z.files), " ".join(z.files)))
    return 0


if __name__ == "__main__":
    modes = {"write": write, "check": check, "npz-write": npz_write, "npz-check": npz_check}
    sys.exit(modes[sys.argv[1]](sys.argv[2]))
