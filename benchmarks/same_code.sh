#!/usr/bin/env bash
# Whether a change left the machine code of the CPU paths alone: compiles
# benchmarks/same_code_probe.cpp (or FILE) against the headers of REV and of the working tree,
# with the benchmarks' flags, and compares the disassembly function by function (compared as
# sets, since a change of include or definition order reorders sections and the cold parts of
# functions; calls are named by their relocations). Renamed symbols are listed as
# differences; name them in RENAMES ("old=new old2=new2") to compare across a rename.
#   benchmarks/same_code.sh REV [FILE]
# Identical machine code means the benchmarks cannot have changed: no timing run is needed.
set -euo pipefail
rev=${1:?usage: benchmarks/same_code.sh REV [FILE]}
root=$(cd "$(dirname "$0")/.." && pwd)
file=$(realpath "${2:-$root/benchmarks/same_code_probe.cpp}")
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/old" > /dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add -q --detach "$work/old" "$rev"
for side in old new; do
  inc=$([ $side = old ] && echo "$work/old/include" || echo "$root/include")
  ${CXX:-g++} -std=c++20 -O3 -march=native -DNDEBUG -I"$inc" -c "$file" -o "$work/$side.o"
  objdump -dr --no-show-raw-insn -C "$work/$side.o" > "$work/$side.s"
done
python3 - "$work/old.s" "$work/new.s" "${RENAMES:-}" << 'PY'
import re, sys
renames = [r.split('=', 1) for r in sys.argv[3].split()]
def functions(path):
    raw = []
    for line in open(path):
        reloc = re.match(r'^\s*[0-9a-f]+: R_\S+\s+(.*)$', line)
        if reloc:  # the relocation names a call's target (objdump shows the next symbol instead)
            target = re.sub(r'^(\.[\w.]+)[+-]0x[0-9a-f]+$', r'\1', reloc.group(1))  # layout
            if raw: raw[-1] = re.sub(r'<.*>$', '<' + target + '>', raw[-1].rstrip()) + '\n'
        else:
            raw.append(line)
    # Units: each function of each section (compared as sets: the order of definitions can move
    # the cold parts of functions within .text.unlikely).
    out, section, cur = [], '', []
    for line in raw:
        line = re.sub(r'^\s*[0-9a-f]+:\s*', '', line)             # instruction addresses
        line = re.sub(r'[0-9a-f]+ <', '<', line)                  # branch targets' addresses
        line = re.sub(r'\{lambda\(([^)]*)\)#\d+\}', r'{lambda(\1)}', line)  # lambda numbering
        line = re.sub(r'<\.L(C?)\d+', r'<.L\1', line)              # local labels' numbering
        for old, new in renames:
            line = line.replace(old, new)
        if line.startswith('Disassembly of section'):
            section = line
        elif re.match(r'^<.*>:$', line.strip()):
            if cur: out.append(''.join(cur))
            cur = [section, line]
        elif cur:
            cur.append(line)
    if cur: out.append(''.join(cur))
    return out
old, new = functions(sys.argv[1]), functions(sys.argv[2])
gone = sorted(set(old) - set(new))
came = sorted(set(new) - set(old))
for s in gone: print('only before:', ' '.join(s.splitlines()[:2]))
for s in came: print('only after: ', ' '.join(s.splitlines()[:2]))
print(f'{len(old)} functions before, {len(new)} after: '
      + ('the same machine code' if not gone and not came and len(old) == len(new)
         else f'{len(gone)} differ'))
sys.exit(1 if gone or came else 0)
PY
