#!/usr/bin/env python3
"""Prints the benchmark tables (markdown) from Google Benchmark JSON output.

    scripts/bench_table.py --bench meld_bench.json [--threshold threshold.json]
                           [--build-time build_time.json]

Reads the median aggregates (run with --benchmark_repetitions=R). Benchmark names are
<case>/<contestant>/n:<elements>/t:<threads> (see benchmarks/common.hpp).
"""
import argparse
import json
import re
import sys


def load(path):
    """{(case, contestant, n, t): median run} from one benchmark JSON file."""
    with open(path) as f:
        data = json.load(f)
    runs = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = re.sub(r"/(real|manual)_time$", "", b["run_name"])
        parts = name.split("/")
        args = dict(p.split(":", 1) for p in parts if ":" in p)
        plain = [p for p in parts if ":" not in p]
        key = ("/".join(plain[:-1]), plain[-1], int(args.get("n", 0)), int(args.get("t", 1)))
        scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b["time_unit"]]
        run = {"ns": b["real_time"] * scale}
        for counter in ("bytes_per_second", "err_eps", "work"):
            if counter in b:
                run[counter] = b[counter]
        # Keep the median when repetitions were aggregated, else the single run.
        if b.get("run_type") == "aggregate" or key not in runs:
            runs[key] = run
    return data.get("context", {}), runs


def fmt_time(ns):
    if ns is None:
        return "-"
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.1f} us"
    return f"{ns / 1e6:.2f} ms"


def fmt_n(n):
    exp = len(str(n)) - 1
    return f"10^{exp}" if n == 10**exp else str(n)


def gbs(run):
    return run["bytes_per_second"] / 1e9 if run and "bytes_per_second" in run else None


def ratio(a, b):
    return f"{a['ns'] / b['ns']:.2f}" if a and b else "-"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def keys_of(runs, case):
    return sorted({(n, t) for (c, _, n, t) in runs if c == case})


def elementwise(runs, checks):
    out = []
    contestants = ["meld", "hand", "hand256", "eigen", "xtensor", "eager"]
    rows, bw_rows = [], []
    for n, t in keys_of(runs, "fiveop"):
        r = {c: runs.get(("fiveop", c, n, t)) for c in contestants}
        triad = runs.get(("triad", "hand", n, t))
        rows.append([fmt_n(n), t] + [fmt_time(r[c]["ns"]) if r[c] else "-" for c in contestants]
                    + [ratio(r["meld"], r["hand"]), ratio(r["meld"], r["eigen"]),
                       ratio(r["meld"], r["xtensor"]), ratio(r["eager"], r["meld"])])
        tb = gbs(triad)
        bw_rows.append([fmt_n(n), t, f"{tb:.1f}" if tb else "-"] +
                       [f"{gbs(r[c]):.1f} ({100 * gbs(r[c]) / tb:.0f} %)" if r[c] and tb else "-"
                        for c in contestants])
        m, h = r["meld"], r["hand"]
        if m and h and n == 10**7 and t == 1:
            checks.append(("5-op 10^7, 1 thread: meld <= 1.05 x hand", m["ns"] <= 1.05 * h["ns"],
                           f"{m['ns'] / h['ns']:.2f} x"))
            for peer in ("eigen", "xtensor"):
                if r[peer]:
                    checks.append((f"5-op 10^7, 1 thread: meld <= {peer}", m["ns"] <= r[peer]["ns"],
                                   f"{m['ns'] / r[peer]['ns']:.2f} x"))
            if r["eager"]:
                checks.append(("5-op 10^7, 1 thread: eager >= 2.5 x meld",
                               r["eager"]["ns"] >= 2.5 * m["ns"],
                               f"{r['eager']['ns'] / m['ns']:.1f} x"))
        if m and tb and n == 10**7 and t > 1:
            checks.append((f"5-op 10^7, {t} threads: meld >= 85 % of triad bandwidth",
                           gbs(m) >= 0.85 * tb, f"{100 * gbs(m) / tb:.0f} %"))
        if m and h and n == 10**3 and t == 1:
            checks.append(("5-op 10^3, 1 thread: meld <= 1.2 x hand", m["ns"] <= 1.2 * h["ns"],
                           f"{m['ns'] / h['ns']:.2f} x"))
    out.append("### 5-op expression y = a*x + b*z - c*w + x*z (median time per call)\n")
    out.append(table(["n", "threads"] + contestants +
                     ["meld/hand", "meld/Eigen", "meld/xtensor", "eager/meld"], rows))
    out.append("\n### 5-op effective bandwidth, GB/s (16 bytes per element: 3 reads + 1 write), "
               "and % of STREAM triad at the same n and threads\n")
    out.append(table(["n", "threads", "triad"] + contestants, bw_rows))

    rows = []
    for n, t in keys_of(runs, "triad"):
        r = {c: runs.get(("triad", c, n, t)) for c in ("hand", "hand_nt", "meld")}
        rows.append([fmt_n(n), t] + [f"{fmt_time(r[c]['ns'])} ({gbs(r[c]):.1f} GB/s)" if r[c]
                                     else "-" for c in r] + [ratio(r["meld"], r["hand"])])
    out.append("\n### STREAM triad y = x + s*z (12 bytes per element: 2 reads + 1 write)\n")
    out.append(table(["n", "threads", "hand (the ceiling)", "hand, non-temporal stores",
                      "meld", "meld/hand"], rows))
    return "\n".join(out)


def reductions(runs, checks):
    rows = []
    for case in ("sum", "dot", "sum_xz_w"):
        for n, t in keys_of(runs, case):
            r = {c: runs.get((case, c, n, t)) for c in ("meld", "hand", "eigen")}
            rows.append([case, fmt_n(n), t] + [fmt_time(r[c]["ns"]) if r[c] else "-" for c in r] +
                        [ratio(r["meld"], r["hand"]), ratio(r["meld"], r["eigen"])] +
                        [f"{r[c]['err_eps']:.2g}" if r[c] and "err_eps" in r[c] else "-"
                         for c in r])
            if r["meld"] and r["hand"]:
                checks.append((f"{case} {fmt_n(n)}, {t} thread(s): meld <= 1.1 x hand",
                               r["meld"]["ns"] <= 1.1 * r["hand"]["ns"],
                               f"{r['meld']['ns'] / r['hand']['ns']:.2f} x"))
    return ("### Reductions (median time; error in units of eps * sum |terms| against a double "
            "reference)\n\n" +
            table(["case", "n", "threads", "meld", "hand", "Eigen", "meld/hand", "meld/Eigen",
                   "meld err", "hand err", "Eigen err"], rows))


def other(runs, checks):
    rows = []
    for case in ("broadcast", "transcendental"):
        for n, t in keys_of(runs, case):
            m, h = runs.get((case, "meld", n, t)), runs.get((case, "hand", n, t))
            size = fmt_n(n) if n else "4096 x 4096"
            rows.append([case, size, t, fmt_time(m["ns"]) if m else "-",
                         fmt_time(h["ns"]) if h else "-", ratio(m, h),
                         f"{gbs(m):.1f}" if m else "-", f"{gbs(h):.1f}" if h else "-"])
            if m and h:
                checks.append((f"{case} {size}, {t} thread(s): meld <= 1.2 x hand",
                               m["ns"] <= 1.2 * h["ns"], f"{m['ns'] / h['ns']:.2f} x"))
    return ("### Broadcast y = m + v ({4096, 4096} + {4096}) and transcendental "
            "y = exp(x) * sigmoid(z)\n\n" +
            table(["case", "n", "threads", "meld", "hand", "meld/hand", "meld GB/s", "hand GB/s"],
                  rows))


def threshold(runs):
    out = ["### Parallel threshold: serial vs pooled assignment (median time)\n"]
    exprs = sorted({c.split("/")[1] for (c, _, _, _) in runs if c.startswith("threshold/")} -
                   {"empty"})
    empty = runs.get(("threshold/empty", "pool", 0, 1))
    cold = runs.get(("threshold/empty", "pool_cold", 0, 1))
    for e in exprs:
        rows, crossover = [], None
        sizes = sorted({n for (c, _, n, _) in runs if c == f"threshold/{e}"})
        for n in sizes:
            s, p = runs.get((f"threshold/{e}", "serial", n, 1)), runs.get((f"threshold/{e}", "pool", n, 1))
            if not (s and p):
                continue
            speedup = s["ns"] / p["ns"]
            if speedup > 1 and crossover is None:
                crossover = s.get("work")
            elif speedup <= 1:
                crossover = None  # the first size from which the pool stays faster
            rows.append([n, f"{s.get('work', 0):.0f}", fmt_time(s["ns"]), fmt_time(p["ns"]),
                         f"{speedup:.2f}"])
        out.append(f"\n{e}: the pool is faster from work = "
                   f"{'%.0f' % crossover if crossover else 'never (in this sweep)'}\n")
        out.append(table(["n", "work", "serial", "pool", "speedup"], rows))
    if empty:
        out.append(f"\nAn empty parallel_for over every thread: {fmt_time(empty['ns'])} back to back"
                   + (f", {fmt_time(cold['ns'])} after the pool idled 2 ms." if cold else "."))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench")
    ap.add_argument("--threshold")
    ap.add_argument("--build-time")
    args = ap.parse_args()
    checks = []
    parts = []
    if args.bench:
        context, runs = load(args.bench)
        parts.append(f"Machine: {context.get('host_name', '?')}, {context.get('num_cpus', '?')} "
                     f"CPUs at {context.get('mhz_per_cpu', '?')} MHz; meld's SIMD: "
                     f"{context.get('meld_simd', '?')}; all threads = "
                     f"{context.get('all_threads', '?')}; run {context.get('date', '?')}.\n")
        parts.append(elementwise(runs, checks))
        parts.append(reductions(runs, checks))
        parts.append(other(runs, checks))
    if args.threshold:
        _, runs = load(args.threshold)
        parts.append(threshold(runs))
    if args.build_time:
        with open(args.build_time) as f:
            bt = json.load(f)
        eigen = bt.get("eigen", {}).get("median_s")
        rows = [[lib, f"{bt[lib]['median_s']:.2f}",
                 f"{bt[lib]['median_s'] / eigen:.2f}" if eigen else "?",
                 " ".join(f"{x:.2f}" for x in bt[lib]["runs_s"])]
                for lib in ("hand", "meld", "eigen", "xtensor") if lib in bt]
        parts.append(f"### Build time of a one-expression program ({bt['compiler']}, "
                     f"{bt['flags']}; median of {bt.get('repetitions', 3)} interleaved runs)\n\n" +
                     table(["program", "median s", "/ Eigen", "runs s"], rows))
    if checks:
        parts.append("### Targets\n\n" + table(
            ["target", "holds", "measured"],
            [[name, "yes" if ok else "**no**", value] for name, ok, value in checks]))
    print("\n\n".join(parts))


if __name__ == "__main__":
    sys.exit(main())
