# Sourced by the check scripts: tools_venv DIR PACKAGE... makes (or reuses) a Python virtual
# environment in DIR with the packages installed from PyPI. Returns non-zero when that cannot be
# done (no python3 venv, no PyPI), so that the caller can report "skipped".
tools_venv() {
  local dir=$1
  shift
  if [ ! -x "$dir/bin/python" ]; then
    python3 -m venv "$dir" > /dev/null 2>&1 || { rm -rf "$dir"; return 1; }
  fi
  local missing=()
  for p in "$@"; do
    "$dir/bin/python" -m pip show -q "$p" > /dev/null 2>&1 || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  "$dir/bin/python" -m pip install -q --disable-pip-version-check --timeout 30 "${missing[@]}" \
    > "$dir/pip.log" 2>&1 || { cat "$dir/pip.log" >&2; return 1; }
}
