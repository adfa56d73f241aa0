#!/usr/bin/env bash
# Builds meld's API reference with Doxygen (Debian's doxygen; scripts/install-deps.sh installs it)
# into build/docs/html (open index.html), and fails on any warning: every public type and
# function of the headers users include (meld/meld.hpp, meld/nn/nn.hpp, meld/dist.hpp) must be
# documented. The Doxyfile says what is left out (detail namespaces, evaluation machinery).
#   scripts/docs.sh            (MELD_DOCS_OUT picks another output folder)
# Exits 77 (skipped) when doxygen is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v doxygen > /dev/null || { echo "docs: SKIPPED: doxygen is not installed"; exit 77; }
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
echo "docs: built $MELD_DOCS_OUT/html/index.html (meld $MELD_VERSION, no warnings)"
