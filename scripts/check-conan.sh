#!/usr/bin/env bash
# Checks the Conan 2 recipe offline, as a user could: Conan from PyPI in a virtual environment,
# a private CONAN_HOME, the remote disabled, a profile with compiler.cppstd=20 and the system's
# xsimd as a platform requirement, then `conan create .`, which packages meld and builds and runs
# test_package/ against the package.
#   scripts/check-conan.sh        (work files in build/check-conan; MELD_TOOLS_VENV picks the venv)
# Exits 77 (skipped) when Conan cannot be installed (no PyPI) or xsimd is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${MELD_CHECK_DIR:-$PWD/build/check-conan}
venv=${MELD_TOOLS_VENV:-$PWD/build/tools-venv}
skip() { echo "check-conan: SKIPPED: $*"; exit 77; }

# shellcheck source=scripts/tools-venv.sh
source scripts/tools-venv.sh
tools_venv "$venv" conan || skip "cannot install conan from PyPI"

# The system's xsimd, as the profile's platform requirement.
xsimd=$(pkg-config --modversion xsimd 2>/dev/null ||
        dpkg-query -W -f='${Version}' libxsimd-dev 2>/dev/null | sed 's/-.*//' || true)
[ -n "$xsimd" ] || skip "xsimd is not installed (scripts/install-deps.sh)"

rm -rf "$work"
mkdir -p "$work"
export CONAN_HOME=$work/conan-home
conan=("$venv/bin/conan")
"${conan[@]}" profile detect > "$work/detect.log" 2>&1
"${conan[@]}" remote disable "*" > /dev/null  # offline: nothing may come from a remote
cat > "$work/profile" <<PROFILE
include(default)
[settings]
compiler.cppstd=20
build_type=Release
[platform_requires]
xsimd/$xsimd
[conf]
tools.cmake.cmaketoolchain:generator=Ninja
tools.build:jobs=${MELD_JOBS:-1}
PROFILE
# From a copy of what the recipe needs, so that test_package's build stays out of the tree.
mkdir -p "$work/src"
cp -r conanfile.py LICENSE include test_package "$work/src/"
echo "check-conan: conan create . (xsimd/$xsimd from the system)"
if ! "${conan[@]}" create "$work/src" --profile:all "$work/profile" --build=missing > "$work/create.log" 2>&1; then
  tail -40 "$work/create.log"
  echo "check-conan: FAILED (log: $work/create.log)"
  exit 1
fi
version=$(sed -n 's/^#define MELD_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' include/meld/version.hpp | paste -sd.)
grep -q "meld/$version (test package): Running test()" "$work/create.log" ||
  { tail -20 "$work/create.log"; echo "check-conan: FAILED: test_package did not run"; exit 1; }
grep -q "meld $version: sum = 10000" "$work/create.log" ||
  { tail -20 "$work/create.log"; echo "check-conan: FAILED: test_package printed no result"; exit 1; }
# The recipe refuses C++17 (validate(): check_min_cppstd).
if "${conan[@]}" install --requires="meld/$version" --profile:all "$work/profile" \
     -s:h compiler.cppstd=17 > "$work/cpp17.log" 2>&1 ||
   ! grep -q "required C++ standard (20)" "$work/cpp17.log"; then
  cat "$work/cpp17.log"
  echo "check-conan: FAILED: the package did not refuse compiler.cppstd=17"
  exit 1
fi
echo "check-conan: passed (meld/$version created, test_package built and ran; C++17 refused)"
