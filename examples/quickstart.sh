#!/usr/bin/env bash
# Builds and installs dlpx into a Python environment, builds the example kernel library out of
# tree with find_package(dlpx) (one .so with no Python in it, for every CPython), and runs it on
# the tensors of every framework installed: numpy, torch, tvm_ffi, jax, array_api_strict, dlpx.
#   bash examples/quickstart.sh            # uses (or creates) .venv
#   DLPX_PYTHON=/path/to/python bash examples/quickstart.sh
# On a bare machine it needs Python 3.9+, Rust's cargo and a C compiler; what else it needs and
# the machine lacks (cmake, a build tool) it installs from PyPI into the environment, no root
# needed, and says so. Where it cannot, it stops with one sentence naming what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

missing() {
  echo "quickstart: $*" >&2
  exit 1
}

command -v cargo >/dev/null || missing "needs Rust's cargo (1.85 or newer) to build libdlpx: https://rustup.rs"
command -v cc >/dev/null || command -v gcc >/dev/null || command -v clang >/dev/null ||
  missing "needs a C compiler (cc, gcc or clang) for the example kernels."
command -v c++ >/dev/null || command -v g++ >/dev/null || command -v clang++ >/dev/null ||
  missing "needs a C++ compiler (c++, g++ or clang++) for the example's typed C++ kernels."

PY=${DLPX_PYTHON:-.venv/bin/python}
if [ -n "${DLPX_PYTHON:-}" ]; then
  [ -x "$PY" ] || missing "DLPX_PYTHON=$PY is not an executable Python."
elif [ ! -x "$PY" ]; then
  command -v python3 >/dev/null || missing "needs python3 (3.9 or newer) on PATH."
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' || missing "needs Python 3.9 or newer; python3 is $(python3 -V 2>&1)."
  python3 -m venv .venv >/dev/null 2>&1 ||
    { rm -rf .venv; missing "python3 cannot create a virtual environment (Debian/Ubuntu: install python3-venv)."; }
  echo "quickstart: created .venv; installing numpy and torch from PyPI"
  .venv/bin/python -m pip install -q --disable-pip-version-check numpy torch ||
    missing "could not install numpy and torch from PyPI into .venv (no network, or no index reachable)."
fi

# Tools the machine lacks, from PyPI into the environment beside Python.
bindir=$(cd "$(dirname "$PY")" && pwd)
from_pypi() {  # TOOL PACKAGE: the tool's path, installed into the environment when missing
  if command -v "$1" >/dev/null; then
    command -v "$1"
    return
  fi
  if [ ! -x "$bindir/$1" ]; then
    "$PY" -m pip install -q --disable-pip-version-check "$2" >&2 ||
      missing "needs $1, which is not on PATH and could not be installed from PyPI ($2)."
    echo "quickstart: installed $("$bindir/$1" --version | head -n 1) from PyPI into $bindir ($1 was not on PATH)" >&2
  fi
  echo "$bindir/$1"
}
cmake=$(from_pypi cmake cmake)
generator=()
if ! command -v make >/dev/null; then
  generator=(-G Ninja "-DCMAKE_MAKE_PROGRAM=$(from_pypi ninja ninja)")
fi

echo "quickstart: building and installing dlpx into $("$PY" -c 'import sys; print(sys.prefix)')"
"$PY" -m pip install -q --disable-pip-version-check . || missing "pip could not build dlpx (see pip's message above)."
build=build/demo
"$cmake" -S examples/kernel_library -B "$build" "${generator[@]}" -Ddlpx_DIR="$("$PY" -m dlpx --cmakedir)" \
         -DCMAKE_BUILD_TYPE=Release >/dev/null
"$cmake" --build "$build" >/dev/null
"$PY" examples/kernel_library/demo.py "$build/libdlpx_example_kernels.so"
