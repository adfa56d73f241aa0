#!/usr/bin/env python3
"""Draws a meld trace (MELD_TRACE / --trace: Chrome-trace JSON) as a PNG timeline, one row per
thread, nested ranges stacked inside their row: a picture of a run where no trace viewer can be
opened (ui.perfetto.dev is the interactive one).

  scripts/trace_timeline.py TRACE.json OUT.png [--last NAME] [--title TEXT]

--last NAME keeps the time span of the last event named NAME (e.g. "training step") and the
events inside it. Colours: data_parallel's phases (forward, backward, bucket, allreduce, waits);
meld's operations in grey.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {
    "forward": "#4c72b0",
    "backward": "#dd8452",
    "bucket": "#c44e52",
    "allreduce": "#55a868",
    "allreduce wait": "#8172b3",
    "wait for stream": "#937860",
    "step": "#dddddd",
}


def load(path):
    events = json.load(open(path))["traceEvents"]
    names, order = {}, {}
    for e in events:
        if e.get("ph") == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        if e.get("ph") == "M" and e["name"] == "thread_sort_index":
            order[(e["pid"], e["tid"])] = e["args"]["sort_index"]
    ranges = [e for e in events if e.get("ph") == "X"]
    return ranges, names, order


def depths(ranges):
    """The nesting depth of each range within its thread (ranges on one thread nest)."""
    out = {}
    by_thread = {}
    for i, e in enumerate(ranges):
        by_thread.setdefault((e["pid"], e["tid"]), []).append(i)
    for ids in by_thread.values():
        ids.sort(key=lambda i: (ranges[i]["ts"], -ranges[i]["dur"]))
        open_ends = []
        for i in ids:
            e = ranges[i]
            while open_ends and open_ends[-1] <= e["ts"]:
                open_ends.pop()
            out[i] = len(open_ends)
            open_ends.append(e["ts"] + e["dur"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--last", help="keep the span of the last event with this name")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    ranges, names, order = load(a.trace)
    if a.last:
        spans = [e for e in ranges if e["name"] == a.last]
        if not spans:
            raise SystemExit(f"trace_timeline: no event named '{a.last}' in {a.trace}")
        s = max(spans, key=lambda e: e["ts"])
        t0, t1 = s["ts"], s["ts"] + s["dur"]
        ranges = [e for e in ranges if e["ts"] >= t0 and e["ts"] + e["dur"] <= t1]
    else:
        t0 = min(e["ts"] for e in ranges)
        t1 = max(e["ts"] + e["dur"] for e in ranges)
    depth = depths(ranges)
    threads = sorted({(e["pid"], e["tid"]) for e in ranges},
                     key=lambda k: (order.get(k, 1 << 30), k))
    rows = {k: i for i, k in enumerate(threads)}
    lanes = {k: 1 + max(depth[i] for i, e in enumerate(ranges) if (e["pid"], e["tid"]) == k)
             for k in threads}
    fig, ax = plt.subplots(figsize=(13, 0.9 + 0.8 * len(threads)))
    for i, e in enumerate(ranges):
        k = (e["pid"], e["tid"])
        h = 0.8 / lanes[k]
        y = rows[k] - 0.4 + depth[i] * h
        colour = COLOURS.get(e["name"], "#b0b0b0")
        x = (e["ts"] - t0) / 1000.0
        w = max(e["dur"] / 1000.0, (t1 - t0) / 1000.0 / 2000)
        ax.broken_barh([(x, w)], (y, h * 0.92), facecolors=colour, edgecolors="none")
        if e["dur"] > (t1 - t0) / 25 and e["name"] in COLOURS:
            ax.text(x + w / 2, y + h * 0.46, e["name"], ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(threads)))
    ax.set_yticklabels([names.get(k, f"thread {k[1]}") for k in threads])
    ax.invert_yaxis()
    ax.set_xlim(0, (t1 - t0) / 1000.0)
    ax.set_xlabel("milliseconds")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles + [plt.Rectangle((0, 0), 1, 1, color="#b0b0b0")],
              list(COLOURS) + ["meld operations"], loc="upper center",
              bbox_to_anchor=(0.5, -0.18), ncol=8, fontsize=8, frameon=False)
    if a.title:
        ax.set_title(a.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
