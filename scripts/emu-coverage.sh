#!/usr/bin/env bash
# Line coverage of the CUDA backend (include/meld/backend/cuda/) and the NCCL communicator
# (include/meld/distributed/nccl_comm.hpp) from the tests on the emulated device: builds them with
# g++ --coverage (build/emu-coverage), runs them, and merges gcov's line counts over every
# translation unit (a header line counts as executed when any unit executed it, and as a line of
# code when any unit compiled code for it). Prints each file's numbers, the lines never executed
# (MELD_COVERAGE_LINES=1), and last: `cuda backend lines executed: <N>% of <M>`.
#   scripts/emu-coverage.sh            build, run, report
#   scripts/emu-coverage.sh report     report on the last run
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build/emu-coverage
if [ "${1:-}" != report ]; then
  cmake -S . -B "$dir" -G Ninja -DMELD_CUDA_EMU=ON -DCMAKE_BUILD_TYPE=Debug \
    "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g0 --coverage" -DCMAKE_EXE_LINKER_FLAGS=--coverage \
    -DMELD_BUILD_EXAMPLES=OFF -DMELD_BUILD_BENCHMARKS=OFF -DMELD_ENABLE_MPI=OFF > /dev/null
  cmake --build "$dir" --target meld_emu_targets -j "${MELD_JOBS:-$(nproc)}"
  find "$dir" -name '*.gcda' -delete
  (cd "$dir" && ctest -L emu -j "${MELD_JOBS:-$(nproc)}" --output-on-failure) || true
fi
/usr/bin/python3 - "$dir" "$PWD" <<'PY'
import gzip, json, os, subprocess, sys, collections
build, root = sys.argv[1], sys.argv[2]
wanted = lambda f: (f.startswith(os.path.join(root, "include/meld/backend/cuda/"))
                    or f == os.path.join(root, "include/meld/distributed/nccl_comm.hpp"))
code = collections.defaultdict(set)
hit = collections.defaultdict(set)
gcdas = [os.path.abspath(os.path.join(d, f)) for d, _, fs in os.walk(build) for f in fs
         if f.endswith(".gcda")]
tmp = os.path.join(build, "gcov-json")
os.makedirs(tmp, exist_ok=True)
for gcda in gcdas:
    out = subprocess.run(["gcov", "--json-format", "--stdout", gcda], cwd=tmp,
                         capture_output=True)
    for line in out.stdout.splitlines():
        if not line.strip():
            continue
        data = json.loads(line)
        for f in data.get("files", []):
            name = os.path.normpath(os.path.join(data.get("current_working_directory", ""),
                                                 f["file"]))
            if not wanted(name):
                continue
            for l in f["lines"]:
                code[name].add(l["line_number"])
                if l["count"] > 0:
                    hit[name].add(l["line_number"])
total = executed = 0
show = os.environ.get("MELD_COVERAGE_LINES") == "1"
for name in sorted(code):
    n, h = len(code[name]), len(hit[name])
    total += n
    executed += h
    print(f"{os.path.relpath(name, root)}: {h} of {n} lines ({100.0 * h / max(n, 1):.1f}%)")
    if show:
        missed = sorted(code[name] - hit[name])
        if missed:
            print("  never executed:", ", ".join(map(str, missed)))
print(f"cuda backend lines executed: {100.0 * executed / max(total, 1):.1f}% of {total}")
PY
