#!/usr/bin/env bash
# Runs every dlpx test: Rust, the generated-header check, cargo package, C/C++ (plain and
# sanitized) through ctest, a Release build, the Python package (pip install . then pytest), the
# distributable wheels and sdist (scripts/build_dist.sh), the aarch64 wheel and C package under
# qemu-user, the sdist in a fresh venv, the wheel on CPython 3.9-3.15, and free-threaded 3.14t
# and 3.15t.
# It first installs what it needs: cmake, pkg-config, binutils and valgrind through apt-get when
# missing, and the test peers (tests/requirements.txt) into DLPX_PYTHON's environment (default:
# .venv/bin/python, created when missing; the quick start's .venv gets the peers it lacks).
# DLPX_REQUIRE_ALL_TESTS=1 (CI's .ci/run sets it): a check that cannot run here (rustfmt, clippy,
# an interpreter of the wheel check) fails the run instead of warning. The C/C++ and Python suites
# require all their inputs in every run: this script installs them.
# It ends with a table of its stages, what each ran and skipped (scripts/ci_summary.py), also
# written to build/ci-summary.tsv; the whole output is in build/ci.log.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DLPX_CI_LOG:-}" ]; then  # run again under tee, then read the log for the table
  mkdir -p build
  export DLPX_CI_LOG=$PWD/build/ci.log
  set +e
  bash scripts/test.sh "$@" 2>&1 | tee "$DLPX_CI_LOG"
  status=${PIPESTATUS[0]}
  python3 scripts/ci_summary.py "$DLPX_CI_LOG" "$status" build/ci-summary.tsv || { [ "$status" -ne 0 ] || status=1; }
  exit "$status"
fi
# Read here, passed on by name: the free-threaded and aarch64 runs of the suite lack some peers.
require_all=${DLPX_REQUIRE_ALL_TESTS:-}
unset DLPX_REQUIRE_ALL_TESTS
stage() { echo "==> $*"; }  # a row of the closing table
# missing WHAT: a tool this run lacks fails it under DLPX_REQUIRE_ALL_TESTS=1, else warns.
missing() {
  if [ -n "$require_all" ]; then echo "FAILED: $* (DLPX_REQUIRE_ALL_TESTS=1)" >&2; exit 1; fi
  echo "WARNING: $*"
}
# Every pytest run says why it skipped what it skipped (-rs): the closing table lists the reasons.
export PYTEST_ADDOPTS="-rs ${PYTEST_ADDOPTS:-}"

stage "what the tests need"
# Room on disk, asked first: a full disk would otherwise fail a late stage with pip's or the
# linker's ENOSPC, after many minutes. The need was measured on a clean clone (design.md, "CI").
need_gib=${DLPX_TEST_DISK_GIB:-18}
free_gib=$(($(df -Pk . | awk 'NR == 2 { print $4 }') / 1048576))
echo "disk: ${free_gib} GiB free under $(pwd) (the run needs about ${need_gib})"
if [ "$free_gib" -lt "$need_gib" ]; then
  echo "scripts/test.sh needs about ${need_gib} GiB free under $(pwd) and there are ${free_gib}: free some and rerun (DLPX_TEST_DISK_GIB=N sets the need)" >&2
  exit 1
fi
need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v nm >/dev/null || need_apt+=(binutils)
command -v valgrind >/dev/null || need_apt+=(valgrind)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "scripts/test.sh needs ${need_apt[*]}: install them (Debian/Ubuntu: sudo apt-get install ${need_apt[*]}) and rerun" >&2
    exit 1
  fi
  echo "apt-get install ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
PY=${DLPX_PYTHON:-.venv/bin/python}
if [ -z "${DLPX_PYTHON:-}" ] && [ ! -x "$PY" ]; then
  echo "creating .venv"
  python3 -m venv .venv
fi
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
"$PY" -m pip install -q --disable-pip-version-check -r tests/requirements.txt
BUILD=${DLPX_BUILD_DIR:-build/ci}

stage "layering and formatting"
bash scripts/check_layers.sh
if cargo fmt --version >/dev/null 2>&1 || { command -v rustup >/dev/null && rustup component add rustfmt >/dev/null 2>&1; }; then
  cargo fmt --all -- --check
  (cd fuzz && cargo fmt -- --check)  # its own workspace
else
  missing "rustfmt is not installed and could not be added: formatting not checked"
fi

stage "cargo test"
cargo test --release --quiet 2>&1 | tail -n 30

stage "cargo clippy -D warnings (the CUDA code too: it compiles without a toolkit)"
if ! cargo clippy --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
  rustup component add clippy >/dev/null 2>&1 || true
fi
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --release --all-targets --quiet -- -D warnings
else
  missing "clippy is not installed and could not be added: lints skipped"
fi

stage "generated headers are up to date"
bash scripts/regen_headers.sh --check

stage "cargo package (the crate builds from its packaged files alone)"
# --allow-dirty: a developer's uncommitted work is packaged as it stands (CI's clone is clean).
cargo package --allow-dirty --quiet
cargo package --allow-dirty --list | grep -qx LICENSE || { echo "the crate does not ship LICENSE" >&2; exit 1; }

stage "cmake build + ctest (C11, C++17, ASan/UBSan/LSan, valgrind memcheck)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLPX_TEST_PYTHON="$PY" -DDLPX_REQUIRE_ALL_TESTS=ON -DDLPX_WERROR=ON >/dev/null
cmake --build "$BUILD" -j 2
ctest --test-dir "$BUILD" --output-on-failure -j 2
SIM_CUDA_DIR=$(cd "$BUILD" && pwd)/sim_cuda

stage "cmake Release build (a packager's -O3), warnings as errors"
# The library is the same in every build type: share cargo's target directory with the build above.
cmake -S . -B "$BUILD-release" -DCMAKE_BUILD_TYPE=Release -DDLPX_TEST_PYTHON="$PY" -DDLPX_REQUIRE_ALL_TESTS=ON \
      -DDLPX_WERROR=ON -DDLPX_CARGO_TARGET_DIR="$(cd "$BUILD" && pwd)/cargo" >/dev/null
# The tests' C11, C++17 and C++20 variants (every use of the public headers): the sanitizer
# variants are for the runs above, and at -O3 they would add half again to the compile time.
release_targets=$(cmake --build "$BUILD-release" --target help | awk '$1 == "..." && $2 ~ /_(c11|cxx17|cxx20)$/ { print $2 }')
cmake --build "$BUILD-release" -j 2 --target $release_targets

stage "pip install . and pytest"
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation .
# The simulated CUDA driver ctest built runs dlpx's CUDA paths in Python too (test_cuda_simulated.py).
(cd tests && DLPX_REQUIRE_ALL_TESTS=1 DLPX_SIM_CUDA_DIR="$SIM_CUDA_DIR" "$PY" -m pytest -q -p no:cacheprovider python)
# The stubs are the runtime: tests/python/entry_points/test_stubs.py runs scripts/check_stubs.sh (stubtest,
# mypy --strict on tests/typing/usage.py) inside the suite above, once.
DLPX_PYTHON="$PY" bash scripts/reliability.sh  # fuzz targets over their corpus, the soak (short)
stage "the CUDA example, compiled with nvcc from PyPI (no GPU needed)" && DLPX_PYTHON="$PY" bash scripts/check_cuda_example.sh

for b in interop kernel_overhead kernel_add; do "$PY" benches/$b.py --quick | tail -n 2; done  # benchmark smoke run
stage "scripts/gpu_check.sh --simulated: the GPU check's logic on the simulated driver (not CUDA numbers)"
DLPX_PYTHON="$PY" DLPX_SIM_CUDA_DIR="$SIM_CUDA_DIR" DLPX_CUDA_KERNEL="$PWD/build/cuda_kernel/libdlpx_cuda_kernel.so" \
  OUT=build/gpu_check bash scripts/gpu_check.sh --simulated --quick \
  | sed -n '/^## Checks/,/^## The GPU suite/p;/^## The allocator/,/^## A kernel/p;/^## Failures/,$p'

stage "the manylinux wheels (x86-64, aarch64), the C packages and the sdist (scripts/build_dist.sh)"
bash scripts/build_dist.sh

stage "the aarch64 wheel and C package under qemu-user (scripts/test_aarch64.sh)"
DLPX_PYTHON="$PY" bash scripts/test_aarch64.sh

stage "the sdist into a fresh venv (isolated build: the build backend comes from PyPI)"
rm -rf build/fresh-venv
python3 -m venv build/fresh-venv
build/fresh-venv/bin/python -m pip install -q --disable-pip-version-check "$(ls dist/dlpx-*.tar.gz | grep -v -- -c-manylinux)"
(cd build && fresh-venv/bin/python -c "import dlpx; t = dlpx.empty((2, 3)); print('fresh venv:', dlpx.__version__, t, dlpx.library_path())")
build/fresh-venv/bin/python -m dlpx --cmakedir

stage "the quick start on a bare machine (a fresh venv, no cmake on PATH; then no cargo)"
bash scripts/check_quickstart.sh

stage "the wheel on every CPython 3.9-3.15"
DLPX_REQUIRE_ALL_TESTS=$require_all bash scripts/check_wheel_pythons.sh dist/dlpx-*-cp39-abi3-manylinux*x86_64.whl

stage "free-threaded CPython 3.14t and 3.15t (built from pinned sources, cached): the suite, the soak, the wheels"
bash scripts/test_free_threaded.sh 3.14 3.15

# ---- a kernel library as one py3-none wheel (issue 43): last, once the stages above have made
# every interpreter it runs on (the forky chroot, the free-threaded builds) and dist/'s wheels.
stage "a kernel library as one py3-none wheel on CPython 3.9-3.15, 3.14t and 3.15t (scripts/check_kernel_wheel.sh)"
DLPX_PYTHON="$PY" DLPX_REQUIRE_ALL_TESTS=$require_all bash scripts/check_kernel_wheel.sh dist
