#!/usr/bin/env bash
# Two builds of one benchmark side by side (e.g. meld_bench of an older commit and of this one):
# ROUNDS rounds (default 3), each running A then B with REPS repetitions (default 3), so that the
# machine's drift falls on both; prints the median time per row for each and the ratio B / A as a
# Markdown table. FILTER (a --benchmark_filter regex, default /meld/) picks the rows.
#   git worktree add /tmp/old 30076ea && cmake --preset benchmarks -S /tmp/old -B /tmp/old/build/bench
#   cmake --build /tmp/old/build/bench --target meld_bench && cmake --build --preset benchmarks
#   benchmarks/compare_builds.sh /tmp/old/build/bench/benchmarks/meld_bench \
#                                build/bench/benchmarks/meld_bench
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 <benchmark A> <benchmark B>" >&2; exit 2; }
rounds=${ROUNDS:-3} reps=${REPS:-3} filter=${FILTER:-/meld/}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for side in A B; do
    bin=$1
    [ "$side" = B ] && bin=$2
    "$bin" --benchmark_filter="$filter" --benchmark_repetitions="$reps" \
      --benchmark_min_time=0.1 --benchmark_format=json > "$out/$side-$r.json" 2> /dev/null
  done
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
times = {"A": {}, "B": {}}
order = []
for side in "AB":
    for r in range(rounds):
        for b in json.load(open(f"{out}/{side}-{r}.json"))["benchmarks"]:
            if b.get("run_type") == "aggregate":
                continue
            name = b["run_name"]
            if name not in order:
                order.append(name)
            scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b["time_unit"]]
            times[side].setdefault(name, []).append(b["real_time"] * scale)
print("| benchmark | A median (ns) | B median (ns) | B / A |")
print("| --- | --- | --- | --- |")
for name in order:
    if name in times["A"] and name in times["B"]:
        a, b = statistics.median(times["A"][name]), statistics.median(times["B"][name])
        print(f"| {name} | {a:.0f} | {b:.0f} | {b / a:.3f} |")
PY
