#!/usr/bin/env bash
# Loads the one libdlpx.so (argument 1) as dlpx._native in every CPython 3.9-3.13 under
# ~/.pyenv/versions and round-trips a tensor through its own __dlpack__.
set -euo pipefail
lib=$1
here=$(cd "$(dirname "$0")/.." && pwd)
found=0
for minor in 9 10 11 12 13; do
  for py in "$HOME"/.pyenv/versions/3."$minor".*/bin/python3; do
    [ -x "$py" ] || continue
    found=$((found + 1))
    DLPX_LIBRARY="$lib" PYTHONPATH="$here/python" "$py" - <<'PY'
import sys, dlpx
t = dlpx.empty((2, 3), "int32")
u = dlpx.from_dlpack(t)
assert u.shape == (2, 3) and u.data_ptr == t.data_ptr and str(u.device) == "cpu:0", u
cap = t.__dlpack__(max_version=(1, 3))
v = dlpx.from_dlpack(cap)
assert v.data_ptr == t.data_ptr
print(f"CPython {sys.version.split()[0]}: ok")
PY
  done
done
echo "$found interpreters checked"
[ "$found" -gt 0 ]
