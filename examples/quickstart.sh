#!/usr/bin/env bash
# Builds and installs dlpx into a Python environment, builds the demo kernel extension out of
# tree with find_package(dlpx), and runs it on numpy, torch, tvm_ffi, jax and dlpx tensors.
#   bash examples/quickstart.sh            # uses (or creates) .venv
#   DLPX_PYTHON=/path/to/python bash examples/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${DLPX_PYTHON:-.venv/bin/python}
if [ ! -x "$PY" ]; then
  python3 -m venv .venv
  PY=.venv/bin/python
  "$PY" -m pip install -q numpy torch
fi
"$PY" -m pip install -q --disable-pip-version-check .
build=build/demo
cmake -S examples/add_extension -B "$build" -Ddlpx_DIR="$("$PY" -m dlpx --cmakedir)" \
      -DPython3_EXECUTABLE="$PY" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" >/dev/null
PYTHONPATH="$build" "$PY" examples/add_extension/demo.py
