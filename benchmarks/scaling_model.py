#!/usr/bin/python3
"""The scaling model of docs/scaling.md: predicted data-parallel (ring allreduce) and
parameter-server step times, against measured ones, and projections to large clusters.

  scaling_model.py table RAW.tsv     predictions beside the measurements of
                                     benchmarks/scaling_model.sh (its raw file: see there)
  scaling_model.py project [RAW.tsv] efficiencies at 8..512 workers on 25 Gbit/s Ethernet and
                                     NVLink-class links (the CPU models' compute time from RAW,
                                     else the values recorded in docs/scaling.md)

Model (one step, W workers, global batch N, m gradient bytes):
  compute    Tc = (N / W) * t_sample * max(1, W * threads / cores)   (cores shared on one machine)
  ring       Tr = 2 (W - 1) * slices * t(m / W / slices): each rank sends and receives
             2 (W - 1) / W * m bytes in 2 (W - 1) messages per slice, t(n) the time of one
             message of n bytes. Two link models: "curve", t(n) = t_x(n), the measured time of a
             two-way exchange of n bytes (benchmarks/pingpong: both directions busy, as in the
             ring); "alpha-beta", t(n) = a + n / R, a the measured one-way latency of 8 B and R
             the shaper's nominal rate
  step       T = Tc + Tr - overlap; overlap = 0 with one gradient bucket (m < 25 MB, all the
             models measured here), else up to the backward time of all but the last bucket
  PS, S servers: each worker pushes and pulls m bytes; server s holds m_s bytes (large
             parameters sliced by rows over all servers, small ones whole on key mod S), and
             receives W * m_s and sends W * m_s per step; the busiest link carries
             n = max(m, W * max_s m_s) bytes each way, one way at a time (push, then pull):
             T = Tc + 2 * t(n), t the measured one-way time (ping-pong) or a + n / R
"""
import math
import statistics
import sys

# Parameter tensors (rows, cols) in the example's order (visit_parameters): weight then bias.
MODELS = {
    "mlp": [(256, 784), (256, 1), (128, 256), (128, 1), (10, 128), (10, 1)],
    # conv weights (out, in * k * k): 20 x 1x3x3, 50 x 20x5x5; dense 800 -> 128 -> 10
    "lenet": [(20, 9), (20, 1), (50, 500), (50, 1), (128, 800), (128, 1), (10, 128), (10, 1)],
}
SLICE_ELEMENTS = 65536  # param_server's default: at least this many elements are sliced
MPI_SLICE_BYTES = 1 << 20  # mpi_comm's default pipelining slice


def elements(model):
    return sum(r * c for r, c in MODELS[model])


def server_elements(model, S):
    """Elements held by each of S servers (detail/ps_protocol.hpp's make_layout)."""
    per = [0] * S
    for key, (rows, cols) in enumerate(MODELS[model]):
        if S > 1 and rows * cols >= SLICE_ELEMENTS:
            for s in range(S):  # rows [rows s / S, rows (s + 1) / S)
                per[s] += (rows * (s + 1) // S - rows * s // S) * cols
        else:
            per[key % S] += rows * cols
    return per


def compute_time(t_sample, batch, W, cores, threads=1):
    return batch / W * t_sample * max(1.0, W * threads / cores)


def interp(curve, n):
    """Piecewise-linear time at n bytes on a measured (bytes, seconds) curve, extrapolated."""
    pts = sorted(curve)
    for (n0, t0), (n1, t1) in zip(pts, pts[1:]):
        if n <= n1 or (n1, t1) == pts[-1]:
            n = max(n, pts[0][0])
            return t0 + (t1 - t0) * (n - n0) / (n1 - n0)
    return pts[0][1]


def message_time(link, n, kind="exch"):
    """Seconds for n bytes: the measured curve where there is one, else a + n / B."""
    if kind in link:
        return interp(link[kind], n)
    return link["alpha"] + n / link["bw"]


def ring_time(m_bytes, W, link):
    if W == 1:
        return 0.0
    chunk = m_bytes / W
    slices = min(16, max(1, math.ceil(chunk / MPI_SLICE_BYTES)))
    return 2 * (W - 1) * slices * message_time(link, chunk / slices)


def rate_bytes(rate):
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for u, f in units.items():
        if rate.endswith(u):
            return float(rate[: -len(u)]) * f / 8
    return None


def nominal(link):
    """The alpha-beta link: the measured one-way latency of 8 B, the shaper's nominal rate."""
    return {"alpha": dict(link["oneway"])[8], "bw": link["rate"]}


def dp_step(model, t_sample, batch, W, cores, link, t_shared=None):
    tc = batch / W * t_shared if t_shared else compute_time(t_sample, batch, W, cores)
    return tc + ring_time(4 * elements(model), W, link)


def ps_step(model, t_sample, batch, S, W, cores, link, t_shared=None):
    tc = batch / W * t_shared if t_shared else compute_time(t_sample, batch, W, cores)
    m = 4 * elements(model)
    busiest = max(m, W * 4 * max(server_elements(model, S)))
    return tc + 2 * message_time(link, busiest, "oneway")


def read_raw(path):
    """RAW.tsv rows: kind key value... (see scaling_model.sh)."""
    compute, links, runs = {}, {}, {}
    for line in open(path):
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        if f[0] == "compute":  # compute MODEL BATCH samples_per_sec
            compute.setdefault(f[1], []).append(float(f[3]))
        elif f[0] == "pp":  # pp RATE bytes one_way_us exchange_us
            l = links.setdefault(f[1], {"oneway": [], "exch": [], "rate": rate_bytes(f[1])})
            l["oneway"].append((float(f[2]), float(f[3]) * 1e-6))
            l["exch"].append((float(f[2]), float(f[4]) * 1e-6))
        elif f[0] in ("dp", "ps"):  # dp RATE MODEL W BATCH sps | ps RATE MODEL S W BATCH sps
            runs.setdefault(tuple(f[:-1]), []).append(float(f[-1]))
        elif f[0] == "shared":  # shared MODEL W BATCH samples_per_sec (one of W copies at once)
            compute.setdefault(("shared", f[1], int(f[2])), []).append(float(f[4]))
        elif f[0] == "cores":
            compute["cores"] = int(f[1])
    return compute, links, runs


def table(path):
    compute, links, runs = read_raw(path)
    cores = compute.pop("cores", 2)
    shared = {k[1:]: 1.0 / statistics.median(v) for k, v in compute.items() if k[0] == "shared"}
    t_sample = {k: 1.0 / statistics.median(v) for k, v in compute.items() if k[0] != "shared"}
    for (model, W), t in sorted(shared.items()):
        print("Compute per sample with %d copies at once: %s %.2f us (x%.2f; the formula: x%.2f)" % (
            W, model, t * 1e6, t / t_sample[model], max(1.0, W / cores)))
    t_sh = lambda model, W: t_sample[model] if W == 1 else shared.get((model, W))
    print("Inputs: cores %d; compute per sample (1 worker x 1 thread, median): %s" % (
        cores, ", ".join("%s %.2f us" % (k, v * 1e6) for k, v in t_sample.items())))
    print("Parameters: %s" % ", ".join("%s %d (%.0f KB)" % (k, elements(k), 4e-3 * elements(k))
                                       for k in MODELS))
    for rate, l in links.items():
        one = dict(l["oneway"])
        ex = dict(l["exch"])
        print("Link %s: one-way 8 B %.1f us; exchange 8 B %.1f us, 32 KiB %.1f MB/s, "
              "512 KiB %.1f MB/s, 8 MiB %.1f MB/s each way" % (
                  rate, one[8] * 1e6, ex[8] * 1e6, 32768 / ex[32768] / 1e6,
                  524288 / ex[524288] / 1e6, 8388608 / ex[8388608] / 1e6))
    print()
    print("| model | link | W | measured (ms) | predicted (ms) | error | with measured sharing (ms) | "
          "error | alpha-beta (ms) | error | runs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for key, v in sorted(((k, v) for k, v in runs.items() if k[0] == "dp"),
                         key=lambda kv: (kv[0][2], kv[0][1], int(kv[0][3]))):
        _, rate, model, W, batch = key
        W, batch = int(W), int(batch)
        meas = batch / statistics.median(v)
        pred = dp_step(model, t_sample[model], batch, W, cores, links[rate])
        ab = dp_step(model, t_sample[model], batch, W, cores, nominal(links[rate]))
        sh = dp_step(model, t_sample[model], batch, W, cores, links[rate], t_sh(model, W))
        print("| %s | %s | %d | %.1f | %.1f | %+.0f %% | %s | %s | %.1f | %+.0f %% | %d |" % (
            model, rate, W, meas * 1e3, pred * 1e3, 100 * (pred - meas) / meas,
            "%.1f" % (sh * 1e3) if t_sh(model, W) else "-",
            "%+.0f %%" % (100 * (sh - meas) / meas) if t_sh(model, W) else "-", ab * 1e3,
            100 * (ab - meas) / meas, len(v)))
    ps = [(k, v) for k, v in runs.items() if k[0] == "ps"]
    if ps:
        print()
        print("| model | link | servers S | workers W | busiest link (KB/step each way) | "
              "measured (ms) | predicted, curve (ms) | error | predicted, alpha-beta (ms) | "
              "error | runs |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for key, v in sorted(ps, key=lambda kv: (kv[0][2], kv[0][1], int(kv[0][4]), int(kv[0][3]))):
            _, rate, model, S, W, batch = key
            S, W, batch = int(S), int(W), int(batch)
            meas = batch / statistics.median(v)
            busiest = max(4 * elements(model), W * 4 * max(server_elements(model, S)))
            pred = ps_step(model, t_sample[model], batch, S, W, cores, links[rate])
            ab = ps_step(model, t_sample[model], batch, S, W, cores, nominal(links[rate]))
            print("| %s | %s | %d | %d | %.0f | %.1f | %.1f | %+.0f %% | %.1f | %+.0f %% | %d |" % (
                model, rate, S, W, busiest / 1e3, meas * 1e3, pred * 1e3,
                100 * (pred - meas) / meas, ab * 1e3, 100 * (ab - meas) / meas, len(v)))


def project(path=None):
    """Scaling efficiency T(1) / T(W) (per-worker batch fixed: weak scaling) on real links."""
    # Per-sample compute times used without a raw file (docs/scaling.md's table measures 17.7 us
    # and 495 us on its machine; a raw file's own measurements replace these).
    t_cpu = {"mlp": 15.5e-6, "lenet": 520e-6}
    if path:
        compute, _, _ = read_raw(path)
        compute.pop("cores", None)
        t_cpu.update({k: 1.0 / statistics.median(v) for k, v in compute.items()})
    # (name, gradient bytes, seconds per sample on one worker, per-worker batch). The GPU
    # throughputs are assumptions (docs/scaling.md says where each comes from).
    cases = [
        ("mlp, this CPU (1 thread)", 4 * elements("mlp"), t_cpu["mlp"], 256),
        ("lenet, this CPU (1 thread)", 4 * elements("lenet"), t_cpu["lenet"], 256),
        ("mlp, GPU at 1e6 samples/s", 4 * elements("mlp"), 1e-6, 256),
        ("ResNet-101-like: 44.5M params, 130 samples/s", 4 * 44.5e6, 1 / 130, 64),
        ("VGG-16-like: 138M params, 130 samples/s", 4 * 138e6, 1 / 130, 64),
        ("100M params, 1000 samples/s", 4 * 100e6, 1e-3, 32),
    ]
    links = {
        "25 GbE (3.1 GB/s, 10 us)": {"alpha": 10e-6, "bw": 25e9 / 8},
        "NVLink-class (300 GB/s, 3 us)": {"alpha": 3e-6, "bw": 300e9},
    }
    Ws = [8, 32, 128, 512]
    bucket = 25 << 20
    print("| model, compute per worker | link | " + " | ".join("W=%d" % w for w in Ws) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in Ws) + " |")
    for name, m, ts, per_worker in cases:
        for lname, link in links.items():
            tc = per_worker * ts
            eff = []
            for W in Ws:
                # Buckets of 25 MB, each its own ring allreduce; all but the last bucket's can hide
                # behind backward (taken as 2/3 of the compute).
                buckets = max(1, math.ceil(m / bucket))
                per = ring_time(m / buckets, W, link)
                hidden = min((buckets - 1) * per, 2 / 3 * tc)
                eff.append(tc / (tc + buckets * per - hidden))
            print("| %s | %s | %s |" % (name, lname, " | ".join("%.0f %%" % (100 * e) for e in eff)))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    elif len(sys.argv) >= 2 and sys.argv[1] == "project":
        project(sys.argv[2] if len(sys.argv) > 2 else None)
    else:
        sys.exit(__doc__)
