#!/usr/bin/env bash
# The free-threaded suite (docs/design.md, "Free-threaded CPython"): CPython 3.14t and 3.15t built
# from pinned sources (scripts/build_free_threaded.sh; cached in $DLPX_FT_CACHE, by default
# ~/.cache/dlpx/free-threaded), then on each, with the GIL disabled: `import dlpx` keeps it
# disabled, the Python suite passes (with the peers that publish free-threaded wheels: numpy,
# tvm-ffi, array-api-strict; torch's is CUDA-only and jax's start at 0.12; the CUDA tests against
# the simulated driver), and the soak runs
# 8 threads at once with every value checked and RSS and reference counts flat. Where dist/ holds
# the free-threaded wheel for it (scripts/build_dist.sh), pip installs it into a fresh venv and the
# wheel's smoke test runs there.
#   bash scripts/test_free_threaded.sh [3.14 3.15]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cargo build --release --lib --quiet
lib=$root/target/release/libdlpx.so
# The simulated CUDA driver, so that the CUDA tests (test_cuda_simulated.py: the block cache's
# randomized stream-order case among them) run free-threaded too: ctest's build when there is
# one, else built here from its one source file (with the variant that lacks cuMemPoolTrimTo).
sim=${DLPX_SIM_CUDA_DIR:-$root/${DLPX_BUILD_DIR:-build/ci}/sim_cuda}
if [ ! -f "$sim/libcuda.so" ]; then
  sim=$root/build/free-threaded/sim_cuda
  mkdir -p "$sim" "${sim}_incomplete"
  echo '{ global: *; local: cuMemPoolTrimTo; };' > "$root/build/free-threaded/without_pool_trim.map"
  for dir in "$sim" "${sim}_incomplete"; do
    extra=()
    [ "$dir" = "$sim" ] || extra=(-Wl,--version-script="$root/build/free-threaded/without_pool_trim.map")
    cc -O2 -std=c11 -shared -fPIC -fvisibility=hidden -Wl,-soname,libcuda.so.1 "${extra[@]}" \
      -o "$dir/libcuda.so.1" c_tests/sim_cuda/sim_cuda.c -lpthread
    ln -sf libcuda.so.1 "$dir/libcuda.so"
  done
fi
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.14 3.15)
for version in "${versions[@]}"; do
  echo "== CPython ${version}t (free-threaded)"
  py=$(bash scripts/build_free_threaded.sh "$version" | tail -n 1)
  run() { env -u PYTHON_GIL PYTHONPATH="$root/python" DLPX_LIBRARY="$lib" "$py" "$@"; }
  run -c 'import sys, dlpx, numpy as np
assert not sys._is_gil_enabled(), "import dlpx enabled the GIL"
t = dlpx.from_dlpack(np.arange(4.0))
print(f"CPython {sys.version.split()[0]}: import dlpx keeps the GIL disabled; {t}")'
  # The last line, every failure's name and reason (-rfE) where there is one, and why each skip
  # skipped (-rs: scripts/test.sh's closing table lists them).
  (cd tests && DLPX_SIM_CUDA_DIR="$sim" run -m pytest -q -rfEs -p no:cacheprovider python \
     | grep -E '^(FAILED|ERROR|SKIPPED) |^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)')
  run tests/soak.py --short | grep -E '^soak|FAIL'
  abi=cp${version/./}t
  for wheel in dist/dlpx-*-"$abi"-manylinux*.whl; do
    [ -e "$wheel" ] || continue
    venv=$root/build/wheel-free-threaded/venv-${version}t
    env -u PYTHON_GIL "$py" -m venv --clear "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --only-binary :all: "$wheel" numpy apache-tvm-ffi
    (cd "$root/build/wheel-free-threaded" && env -u PYTHON_GIL "$venv/bin/python" "$root/scripts/wheel_smoke_test.py")
    env -u PYTHON_GIL "$venv/bin/python" -c 'import sys, dlpx; assert not sys._is_gil_enabled(); print("wheel", dlpx.library_path())'
  done
done
