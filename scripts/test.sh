#!/usr/bin/env bash
# dlpx's tests, in stages. `scripts/test.sh` with no argument runs every stage but quick, in the
# order of --list, as CI does (.ci/run); `scripts/test.sh quick` is a change's check; any stage
# names run those stages, in the order given. `--list` prints the stages, `--help` this usage.
#
# quick: formatting, layers, clippy, cargo test, the C/C++ tests built as C11 and C++17 (no C++20
#   build, no sanitizers, no valgrind), and the Python suite on the tree as built (not installed:
#   the tests that need an installed dlpx skip and say so). No root, no apt, no pip: it needs the
#   venv (DLPX_PYTHON, default .venv/bin/python; created with the peers when missing) and cmake
#   (on PATH, or the venv's own).
# The full stages: the layering, formatting, clippy and generated headers (lint); Rust and cargo
# package (rust); C/C++ plain, sanitized and under valgrind through ctest, and a Release build
# (c); the Python package (pip install . then pytest), fuzz corpus and soak, the CUDA example,
# the benchmarks' smoke run and the simulated GPU check (python); the distributable wheels and
# sdist (scripts/build_dist.sh), the sdist in a fresh venv, the quick start on a bare copy and
# the wheel on CPython 3.9-3.15 (dist); the aarch64 wheel and C package under qemu-user
# (aarch64); free-threaded 3.14t and 3.15t (ft); one kernel-library wheel on every CPython the
# stages before made or found (kernels).
# quick, lint and rust need cargo and python3 alone. Before the others it installs what they
# need: cmake, pkg-config, binutils and valgrind through apt-get when missing, and the test peers
# (tests/requirements.txt) into DLPX_PYTHON's environment. A failed run names its stage.
# DLPX_REQUIRE_ALL_TESTS=1 (CI's .ci/run sets it): a check that cannot run here (rustfmt, clippy,
# an interpreter of the wheel check) fails the run instead of warning. The C/C++ and Python suites
# of the c and python stages require all their inputs in every run: this script installs them.
# It ends with a table of its stages, what each ran and skipped (scripts/ci_summary.py), also
# written to build/ci-summary.tsv; the whole output is in build/ci.log.
set -euo pipefail
cd "$(dirname "$0")/.."

# name, then what it runs: --list prints these; no argument runs all but quick, in this order.
STAGES=(
  "quick   format, layers, clippy, cargo test, C/C++ tests (C11, C++17; no sanitizers), the Python suite in place (not in a full run)"
  "lint    layers and circles, rustfmt, clippy -D warnings, the generated headers"
  "rust    cargo test --release, cargo package"
  "c       cmake + ctest: C11, C++17/20, ASan/UBSan/LSan, valgrind; the Release build"
  "python  pip install . and pytest, fuzz corpus and soak, the CUDA example, bench smoke, gpu_check --simulated"
  "dist    the manylinux wheels, C packages and sdist; the sdist in a fresh venv; the quick start; CPython 3.9-3.15"
  "aarch64 the aarch64 wheel and C package under qemu-user (after dist)"
  "ft      free-threaded CPython 3.14t and 3.15t: the suite, the soak, the wheels"
  "kernels a kernel library as one py3-none wheel on CPython 3.9-3.15, 3.14t, 3.15t (after dist and ft)"
)
usage() {
  echo "usage: bash scripts/test.sh [--list | --help | STAGE...]"
  echo "  no STAGE: every stage but quick, in this order (what CI's .ci/run runs); quick: a change's check"
  printf '  %s\n' "${STAGES[@]}"
}
run=()
for arg in "$@"; do
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    --list) printf '%s\n' "${STAGES[@]}"; exit 0 ;;
    *)
      if ! printf '%s\n' "${STAGES[@]}" | awk '{ print $1 }' | grep -qx -- "$arg"; then
        echo "scripts/test.sh: no stage '$arg'" >&2
        usage >&2
        exit 2
      fi
      run+=("$arg") ;;
  esac
done
if [ ${#run[@]} -eq 0 ]; then
  for line in "${STAGES[@]}"; do [ "${line%% *}" = quick ] || run+=("${line%% *}"); done
fi
if [ -z "${DLPX_CI_LOG:-}" ]; then  # run again under tee, then read the log for the table
  mkdir -p build
  export DLPX_CI_LOG=$PWD/build/ci.log
  set +e
  bash scripts/test.sh "${run[@]}" 2>&1 | tee "$DLPX_CI_LOG"
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

# The need of the stages from c on: disk, the tools apt-get installs, the venv with every peer.
setup_full() {
  stage "what the tests need"
  # Room on disk, asked first: a full disk would otherwise fail a late stage with pip's or the
  # linker's ENOSPC, after many minutes. The need was measured on a clean clone
  # (docs/reliability.md, "CI").
  local need_gib=${DLPX_TEST_DISK_GIB:-18} free_gib
  free_gib=$(($(df -Pk . | awk 'NR == 2 { print $4 }') / 1048576))
  echo "disk: ${free_gib} GiB free under $(pwd) (the run needs about ${need_gib})"
  if [ "$free_gib" -lt "$need_gib" ]; then
    echo "scripts/test.sh needs about ${need_gib} GiB free under $(pwd) and there are ${free_gib}: free some and rerun (DLPX_TEST_DISK_GIB=N sets the need)" >&2
    exit 1
  fi
  local need_apt=()
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
  venv
  "$PY" -m pip install -q --disable-pip-version-check -r tests/requirements.txt
}

# PY: DLPX_PYTHON, or .venv/bin/python (created with the peers when missing), as an absolute path.
venv() {
  PY=${DLPX_PYTHON:-.venv/bin/python}
  if [ -z "${DLPX_PYTHON:-}" ] && [ ! -x "$PY" ]; then
    echo "creating .venv with the peers of tests/requirements.txt"
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
  fi
  PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
}

BUILD=${DLPX_BUILD_DIR:-build/ci}
# The simulated CUDA driver ctest builds, for the Python suite's CUDA paths
# (test_cuda_simulated.py): the c stage's, else built alone (the python stage run by itself).
sim_cuda_dir() {
  if [ ! -e "$BUILD/sim_cuda/libcuda.so.1" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLPX_TEST_PYTHON="$PY" -DDLPX_REQUIRE_ALL_TESTS=ON -DDLPX_WERROR=ON >/dev/null
    cmake --build "$BUILD" -j 2 --target sim_cuda >/dev/null
  fi
  echo "$(cd "$BUILD" && pwd)/sim_cuda"
}

stage_quick() {
  stage "quick setup (no root, no apt, no pip)"
  venv
  # cmake from PATH, or the one the quick start installs into the venv (pip install cmake: no root).
  command -v cmake >/dev/null || PATH=$(dirname "$PY"):$PATH
  command -v cmake >/dev/null || { echo "scripts/test.sh quick needs cmake: $PY -m pip install cmake (no root), or your system's" >&2; exit 1; }
  echo "python: $PY; cmake: $(command -v cmake); cargo: $(command -v cargo)"
  local target=${CARGO_TARGET_DIR:-$PWD/target} quick=build/quick

  stage "quick lint: layers, formatting, clippy -D warnings"
  bash scripts/check_layers.sh
  check_format
  check_clippy

  stage "quick cargo test"
  cargo test --release --quiet 2>&1 | tail -n 30

  # The Python suite needs the library and the simulated driver alone: it runs beside the C/C++
  # build and ctest (one core each, mostly), its output shown when it ends, under its own row.
  stage "quick cmake build + ctest (C11 and C++17 builds; no C++20, sanitizers or valgrind)"
  # The library cargo test left in its target directory: CMake's cargo build finds most of it built.
  cmake -S . -B "$quick" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLPX_TEST_PYTHON="$PY" -DDLPX_WERROR=ON \
        -DDLPX_TEST_VARIANTS="c11;cxx17" -DDLPX_CARGO_TARGET_DIR="$target" >/dev/null
  cmake --build "$quick" -j 2 --target dlpx_cargo sim_cuda >/dev/null
  local sim_cuda pytest_log=$quick/pytest.log
  sim_cuda="$(cd "$quick" && pwd)/sim_cuda"
  # Not installed: the tests that build against an installed dlpx skip, and say so (python stage).
  (cd tests && PYTHONPATH="$PWD/../python${PYTHONPATH:+:$PYTHONPATH}" DLPX_LIBRARY="$target/release/libdlpx.so" \
     DLPX_SIM_CUDA_DIR="$sim_cuda" exec "$PY" -m pytest -q -p no:cacheprovider python) >"$pytest_log" 2>&1 &
  pytest_pid=$!
  cmake --build "$quick" -j 2 >/dev/null
  ctest --test-dir "$quick" --output-on-failure -j 2 -LE valgrind

  stage "quick pytest, the tree in place (python/ and the library built above; it ran beside ctest)"
  local pytest_status=0
  wait "$pytest_pid" || pytest_status=$?
  pytest_pid=""
  cat "$pytest_log"
  return "$pytest_status"
}

# rustfmt and clippy, each where it is installed (or rustup adds it); else missing.
check_format() {
  if cargo fmt --version >/dev/null 2>&1 || { command -v rustup >/dev/null && rustup component add rustfmt >/dev/null 2>&1; }; then
    cargo fmt --all -- --check
    (cd fuzz && cargo fmt -- --check)  # its own workspace
  else
    missing "rustfmt is not installed and could not be added: formatting not checked"
  fi
}
check_clippy() {
  if ! cargo clippy --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
    rustup component add clippy >/dev/null 2>&1 || true
  fi
  if cargo clippy --version >/dev/null 2>&1; then
    cargo clippy --release --all-targets --quiet -- -D warnings
  else
    missing "clippy is not installed and could not be added: lints skipped"
  fi
}

stage_lint() {
  stage "layering and formatting"
  bash scripts/check_layers.sh
  check_format

  stage "cargo clippy -D warnings (the CUDA code too: it compiles without a toolkit)"
  check_clippy

  stage "generated headers are up to date"
  bash scripts/regen_headers.sh --check
}

stage_rust() {
  stage "cargo test"
  cargo test --release --quiet 2>&1 | tail -n 30

  stage "cargo package (the crate builds from its packaged files alone)"
  # --allow-dirty: a developer's uncommitted work is packaged as it stands (CI's clone is clean).
  cargo package --allow-dirty --quiet
  cargo package --allow-dirty --list | grep -qx LICENSE || { echo "the crate does not ship LICENSE" >&2; exit 1; }
}

stage_c() {
  stage "cmake build + ctest (C11, C++17, ASan/UBSan/LSan, valgrind memcheck)"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLPX_TEST_PYTHON="$PY" -DDLPX_REQUIRE_ALL_TESTS=ON -DDLPX_WERROR=ON >/dev/null
  cmake --build "$BUILD" -j 2
  ctest --test-dir "$BUILD" --output-on-failure -j 2

  stage "cmake Release build (a packager's -O3), warnings as errors"
  # The library is the same in every build type: share cargo's target directory with the build above.
  cmake -S . -B "$BUILD-release" -DCMAKE_BUILD_TYPE=Release -DDLPX_TEST_PYTHON="$PY" -DDLPX_REQUIRE_ALL_TESTS=ON \
        -DDLPX_WERROR=ON -DDLPX_CARGO_TARGET_DIR="$(cd "$BUILD" && pwd)/cargo" >/dev/null
  # The tests' C11, C++17 and C++20 variants (every use of the public headers): the sanitizer
  # variants are for the runs above, and at -O3 they would add half again to the compile time.
  local release_targets
  release_targets=$(cmake --build "$BUILD-release" --target help | awk '$1 == "..." && $2 ~ /_(c11|cxx17|cxx20)$/ { print $2 }')
  # shellcheck disable=SC2086  # one target a word
  cmake --build "$BUILD-release" -j 2 --target $release_targets
}

stage_python() {
  stage "pip install . and pytest"
  local sim_cuda
  sim_cuda=$(sim_cuda_dir)
  "$PY" -m pip install -q --disable-pip-version-check --no-build-isolation .
  # The simulated CUDA driver runs dlpx's CUDA paths in Python too (test_cuda_simulated.py).
  (cd tests && DLPX_REQUIRE_ALL_TESTS=1 DLPX_SIM_CUDA_DIR="$sim_cuda" "$PY" -m pytest -q -p no:cacheprovider python)
  # The stubs are the runtime: tests/python/entry_points/test_stubs.py runs scripts/check_stubs.sh (stubtest,
  # mypy --strict on tests/typing/usage.py) inside the suite above, once.
  DLPX_PYTHON="$PY" bash scripts/reliability.sh  # fuzz targets over their corpus, the soak (short)
  stage "the CUDA example, compiled with nvcc from PyPI (no GPU needed)" && DLPX_PYTHON="$PY" bash scripts/check_cuda_example.sh

  for b in interop kernel_overhead kernel_add; do "$PY" benches/$b.py --quick | tail -n 2; done  # benchmark smoke run
  "$PY" benches/straddled_loads.py | tail -n 1  # the kernel call's loads that straddle fresh stores (a report)
  stage "scripts/gpu_check.sh --simulated: the GPU check's logic on the simulated driver (not CUDA numbers)"
  DLPX_PYTHON="$PY" DLPX_SIM_CUDA_DIR="$sim_cuda" DLPX_CUDA_KERNEL="$PWD/build/cuda_kernel/libdlpx_cuda_kernel.so" \
    OUT=build/gpu_check bash scripts/gpu_check.sh --simulated --quick \
    | sed -n '/^## Checks/,/^## The GPU suite/p;/^## The allocator/,/^## A kernel/p;/^## Failures/,$p'
}

stage_dist() {
  stage "the manylinux wheels (x86-64, aarch64), the C packages and the sdist (scripts/build_dist.sh)"
  bash scripts/build_dist.sh

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
}

stage_aarch64() {
  stage "the aarch64 wheel and C package under qemu-user (scripts/test_aarch64.sh)"
  ls dist/dlpx-*-cp39-abi3-*aarch64.whl >/dev/null 2>&1 || { echo "scripts/test.sh aarch64 tests the wheel of the dist stage: run scripts/test.sh dist aarch64" >&2; exit 1; }
  DLPX_PYTHON="$PY" bash scripts/test_aarch64.sh
}

stage_ft() {
  stage "free-threaded CPython 3.14t and 3.15t (built from pinned sources, cached): the suite, the soak, the wheels"
  bash scripts/test_free_threaded.sh 3.14 3.15
}

stage_kernels() {
  # Last: it runs on every interpreter the stages before made (the forky chroot of dist, the
  # free-threaded builds of ft), with dist/'s wheels.
  stage "a kernel library as one py3-none wheel on CPython 3.9-3.15, 3.14t and 3.15t (scripts/check_kernel_wheel.sh)"
  DLPX_PYTHON="$PY" DLPX_REQUIRE_ALL_TESTS=$require_all bash scripts/check_kernel_wheel.sh dist
}

# A failed run says which stage to run again alone.
current=""
# (quick's pytest, when it runs beside the C build, ends with the run.)
pytest_pid=""
on_exit() {
  local status=$?
  [ -z "$pytest_pid" ] || kill "$pytest_pid" 2>/dev/null || true
  [ "$status" -eq 0 ] || [ -z "$current" ] || echo "scripts/test.sh: the $current stage failed (exit $status); run it again alone: bash scripts/test.sh $current" >&2
}
trap on_exit EXIT
# quick, lint and rust need cargo and python3 alone; the others, setup_full's disk, tools and venv.
for name in "${run[@]}"; do
  case "$name" in quick | lint | rust) ;; *) setup_full; break ;; esac
done
for name in "${run[@]}"; do
  current=$name
  "stage_$name"
done
current=""
