#!/usr/bin/env bash
# Builds meld's documentation site with Doxygen (Debian's doxygen; scripts/install-deps.sh installs
# it) into build/docs/html (open index.html): the pages (docs/*.md, the README, through
# docs/markdown_filter.py, which needs python3), the modules of docs/groups.dox and the API
# reference. Fails on any warning: every public type and function of the headers users include
# (meld/meld.hpp, meld/nn/nn.hpp, meld/distributed.hpp) must be documented, every class described, and
# every concept outside the detail namespaces commented.
# The Doxyfile says what is left out (detail namespaces, evaluation machinery).
#   scripts/docs.sh            (MELD_DOCS_OUT picks another output folder)
# Exits 77 (skipped) when doxygen is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v doxygen > /dev/null || { echo "docs: SKIPPED: doxygen is not installed"; exit 77; }
# Doxygen 1.9.4 does not warn about an undocumented concept, and lists the concepts of a namespace
# only once one of them is documented: every concept outside the detail namespaces must follow a
# /// comment (on the line before its `template <...>`). The namespaces are told apart by their
# braces, counted outside comments, strings and character literals.
undocumented=$(python3 - << 'PY'
import pathlib, re
for path in sorted(pathlib.Path("include/meld").rglob("*.hpp")):
    lines = path.read_text().splitlines()
    depth, namespaces = 0, []  # the open namespaces: (name, brace depth inside)
    for i, line in enumerate(lines):
        code = re.sub(r'"(\\.|[^"\\])*"' + r"|'(\\.|[^'\\])*'", "0", line)
        code = re.sub(r"//.*", "", code)
        opening = re.match(r"\s*(?:inline\s+)?namespace\s*([\w:]*)\s*\{", code)
        concept = re.match(r"\s*concept\s+(\w+)", code)
        if concept and not any("detail" in name for name, _ in namespaces):
            j = i - 1
            while j >= 0 and lines[j].lstrip().startswith("template"):
                j -= 1
            comment = lines[j].strip() if j >= 0 else ""
            if not comment.startswith("///") or comment in ("/// @{", "/// @}"):
                print(f"  {path}:{i + 1}: {concept.group(1)}")
        for c in code:
            if c == "{":
                depth += 1
                if opening:
                    namespaces.append((opening.group(1), depth))
                    opening = None
            elif c == "}":
                if namespaces and namespaces[-1][1] == depth:
                    namespaces.pop()
                depth -= 1
PY
)
[ -z "$undocumented" ] || { printf 'docs: FAILED: concepts without a /// comment:\n%s\n' "$undocumented"; exit 1; }
export MELD_DOCS_OUT=${MELD_DOCS_OUT:-$PWD/build/docs}
MELD_VERSION=$(sed -n 's/^#define MELD_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' \
               include/meld/version.hpp | paste -sd.)
export MELD_VERSION
rm -rf "$MELD_DOCS_OUT"
mkdir -p "$MELD_DOCS_OUT"
status=0
doxygen Doxyfile || status=$?
if [ -s "$MELD_DOCS_OUT/warnings.log" ]; then
  sed "s|^$PWD/||" "$MELD_DOCS_OUT/warnings.log" | head -50
  echo "docs: FAILED: $(wc -l < "$MELD_DOCS_OUT/warnings.log") warning lines (log: $MELD_DOCS_OUT/warnings.log)"
  exit 1
fi
[ "$status" -eq 0 ] || { echo "docs: FAILED: doxygen exited with $status"; exit 1; }
[ -f "$MELD_DOCS_OUT/html/index.html" ] || { echo "docs: FAILED: no html/index.html"; exit 1; }
html=$MELD_DOCS_OUT/html
# Doxygen does not warn about a class or namespace without any description: the class list shows
# an empty cell for it. (The namespace meld::detail stays undocumented: documenting it would
# bring its members into the reference; only detail::strided_tensor is shown.)
undescribed=$(grep -oE '>[^<>]+</(a|b)></td><td class="desc"></td>' "$html/annotated.html" |
              sed -E 's/^>([^<]*)<.*/\1/' | grep -vx detail | paste -sd' ' || true)
[ -z "$undescribed" ] || { echo "docs: FAILED: no description for: $undescribed"; exit 1; }
# The members tensors inherit from detail::strided_tensor and the functions that macros define
# are listed (Doxyfile: INLINE_INHERITED_MEMB, EXPAND_AS_DEFINED).
grep -qE '>shape</(a|b)> \(\) const' "$html/classmeld_1_1tensor.html" ||
  { echo "docs: FAILED: the meld::tensor page does not list shape()"; exit 1; }
grep -qE '>exp</(a|b)> \(' "$html/namespacemeld.html" ||
  { echo "docs: FAILED: the namespace meld page does not list meld::exp"; exit 1; }
echo "docs: built $MELD_DOCS_OUT/html/index.html (meld $MELD_VERSION, no warnings)"
