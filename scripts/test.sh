#!/usr/bin/env bash
# Runs every dlpx test: Rust, the generated-header check, C/C++ (plain and sanitized) through
# ctest, the Python package (pip install . then pytest), and a load check on CPython 3.9–3.13.
# DLPX_PYTHON names the Python that has the peers (default: .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${DLPX_PYTHON:-.venv/bin/python}
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
BUILD=${DLPX_BUILD_DIR:-build/ci}

echo "== layering and formatting"
bash scripts/check_layers.sh
if cargo fmt --version >/dev/null 2>&1 || { command -v rustup >/dev/null && rustup component add rustfmt >/dev/null 2>&1; }; then
  cargo fmt --all -- --check
else
  echo "WARNING: rustfmt is not installed and could not be added: formatting not checked"
fi

echo "== cargo test"
cargo test --release --quiet 2>&1 | tail -n 30

echo "== cargo clippy -D warnings (the CUDA code too: it compiles without a toolkit)"
if ! cargo clippy --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
  rustup component add clippy >/dev/null 2>&1 || true
fi
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --release --all-targets --quiet -- -D warnings
else
  echo "WARNING: clippy is not installed and could not be added: lints skipped"
fi

echo "== generated headers are up to date"
git diff --exit-code -- include/dlpx/dlpack.h include/dlpx/dlpx.h
git ls-files --error-unmatch include/dlpx/dlpack.h include/dlpx/dlpx.h >/dev/null

echo "== cmake build + ctest (C11, C++17, ASan/UBSan/LSan)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLPX_TEST_PYTHON="$PY" -DDLPX_REQUIRE_ALL_TESTS=ON >/dev/null
cmake --build "$BUILD" -j 2
ctest --test-dir "$BUILD" --output-on-failure -j 2
SIM_CUDA_DIR=$(cd "$BUILD" && pwd)/sim_cuda

echo "== pip install . and pytest"
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation .
# The simulated CUDA driver ctest built runs dlpx's CUDA paths in Python too (test_cuda_simulated.py).
(cd tests && DLPX_REQUIRE_ALL_TESTS=1 DLPX_SIM_CUDA_DIR="$SIM_CUDA_DIR" "$PY" -m pytest -q -p no:cacheprovider python)
echo "== the CUDA example, compiled with nvcc from PyPI (no GPU needed)" && DLPX_PYTHON="$PY" bash scripts/check_cuda_example.sh

for b in interop kernel_overhead; do "$PY" benches/$b.py --quick | tail -n 2; done  # benchmark smoke run
echo "== CUDA benchmark harness against the simulated driver (a smoke run: these are not CUDA numbers)"
LD_LIBRARY_PATH="$SIM_CUDA_DIR" "$PY" benches/cuda_bench.py --quick | grep -E '^\| (entry|allocator|current)|targets'

echo "== pip install . into a fresh venv (isolated build: the build backend comes from PyPI)"
rm -rf build/fresh-venv
python3 -m venv build/fresh-venv
build/fresh-venv/bin/python -m pip install -q --disable-pip-version-check .
(cd build && fresh-venv/bin/python -c "import dlpx; t = dlpx.empty((2, 3)); print('fresh venv:', dlpx.__version__, t, dlpx.library_path())")
build/fresh-venv/bin/python -m dlpx --cmakedir

echo "== one binary on every CPython 3.9-3.13 found"
bash scripts/check_python_versions.sh "$("$PY" -m dlpx --library)"
