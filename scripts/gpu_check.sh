#!/usr/bin/env bash
# Every GPU check in one run, for a machine with an NVIDIA GPU and no package registry, in at
# most 8 minutes (DLPX_GPU_CHECK_SECONDS): the GPU suite (tests/python/cuda/test_cuda.py) and the CUDA
# kernel example's tests; compute-sanitizer's memcheck (--leak-check full), racecheck, synccheck
# and initcheck over both (--quick: memcheck over both, the others over the example);
# benches/cuda_bench.py (the allocator, current_work_stream); benches/cuda_kernel_bench.py (a
# kernel call's host overhead); benches/cuda_interop.py (torch, CuPy, jax and dlpx CUDA tensors
# through each other's from_dlpack, and tvm-ffi's). It writes one Markdown report,
# gpu_check.md (GPU, driver, versions, every table, every failure), and gpu_check_logs.tar.gz
# to $OUT when that is set, else to build/gpu_check/. Exit status 1 when any check failed.
#
#   bash scripts/gpu_check.sh [--quick] [--simulated]
#
# What it needs there: python3 (DLPX_PYTHON) with torch, and CuPy, jax and pytest where
# present; the library built here (DLPX_LIBRARY; default target/release/libdlpx.so from cargo
# build --release, else the installed dlpx's); nvcc for the example (NVCC, else on PATH, else
# PyPI's), or the example built already (DLPX_CUDA_KERNEL); wheels of what that Python lacks in
# .whl/ (DLPX_WHEELS): docs/cuda.md, "GPU checks", says how to carry them.
# --simulated runs the same script against dlpx's simulated driver (DLPX_SIM_CUDA_DIR: the
# folder of the simulator's libcuda.so, which ctest builds) where there is no GPU, so that the
# script cannot rot between GPU draws: the report's first line says "simulated, not CUDA numbers".
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

quick=0 simulated=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    --simulated) simulated=1 ;;
    *) echo "usage: scripts/gpu_check.sh [--quick] [--simulated]" >&2; exit 2 ;;
  esac
done

PY=$(command -v "${DLPX_PYTHON:-python3}") || { echo "gpu_check: no ${DLPX_PYTHON:-python3}" >&2; exit 2; }
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")  # scripts run from other folders use it too
out=${OUT:-$root/build/gpu_check}
mkdir -p "$out"
report=$out/gpu_check.md
work=$(mktemp -d)
logs=$work/logs
mkdir -p "$logs"
trap 'rm -rf "$work"' EXIT
# The summary's rows and the failures, one a line (files: checks run in parallel subshells too).
summary=$logs/summary.rows failures=$logs/failures.list
: >"$summary"
: >"$failures"
fail() { echo "$*" >>"$failures"; }
row() { echo "$*" >>"$summary"; }

# ---- what the checks run against --------------------------------------------------------------
lib=${DLPX_LIBRARY:-$root/target/release/libdlpx.so}
[ -f "$lib" ] || [ -n "${DLPX_LIBRARY:-}" ] || lib=$("$PY" -c "import dlpx; print(dlpx.library_path())" 2>/dev/null)
if [ ! -f "$lib" ]; then
  echo "gpu_check: no library (cargo build --release here, then carry target/release/libdlpx.so, or set DLPX_LIBRARY)" >&2
  exit 2
fi
ln -s "$(realpath "$lib")" "$work/libdlpx.so.0"
export DLPX_LIBRARY=$work/libdlpx.so.0 PYTHONPATH="$root/python:$root/tests/python/helpers${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
wheels=${DLPX_WHEELS:-$root/.whl}
if compgen -G "$wheels/*.whl" >/dev/null; then
  # Each on its own: a wheel for another Python is left out.
  for wheel in "$wheels"/*.whl; do
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$wheel" 2>/dev/null
  done
  export PYTHONPATH="$PYTHONPATH:$work/site"
fi
if [ $simulated = 1 ]; then
  sim=${DLPX_SIM_CUDA_DIR:?gpu_check --simulated: set DLPX_SIM_CUDA_DIR to the folder of the simulated libcuda.so}
  export LD_LIBRARY_PATH="$sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" SIM_CUDA_VERBOSE=0
fi
# The suite's conftest pins jax to its CPU backend; the checks here want CUDA where it is.
export JAX_PLATFORMS=${JAX_PLATFORMS-} XLA_PYTHON_CLIENT_PREALLOCATE=false

find_tool() {  # on PATH, else in CUDA's usual folders
  command -v "$1" 2>/dev/null && return
  for dir in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer /opt/nvidia/compute-sanitizer; do
    [ -x "$dir/$1" ] && { echo "$dir/$1"; return; }
  done
  return 1
}

# The whole run's time (DLPX_GPU_CHECK_SECONDS, default 480): no check starts past it, and
# each is cut to what is left, so the report is always written.
budget=${DLPX_GPU_CHECK_SECONDS:-480}
began=$(date +%s)

# run NAME SECONDS COMMAND...: the command's output in $logs/NAME.log, its status and time in
# the summary; a failure (or running past SECONDS) is recorded, and the run goes on.
run() {
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  local left=$((budget - (start - began) - 15))
  if [ $left -lt 10 ]; then
    row "| $name | NOT RUN: the run's $budget s were spent | |"
    fail "$name: not run, the run's $budget s were spent (DLPX_GPU_CHECK_SECONDS)"
    return 1
  fi
  [ $limit -gt $left ] && limit=$left
  echo "== $name" >&2
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  local took=$(($(date +%s) - start)) verdict=ok
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    verdict="TIMED OUT after ${limit} s"
  elif [ $rc != 0 ]; then
    verdict="FAILED (exit $rc)"
  fi
  row "| $name | $verdict | $took |"
  [ "$verdict" = ok ] || fail "$name: $verdict (its log: $name.log)"
  return $rc
}

# ---- the checks ---------------------------------------------------------------------------------
pytest_args=(-q -p no:cacheprovider -rsfE)
"$PY" -c "import pytest" 2>/dev/null || fail "pytest is not importable by $PY: the test suites cannot run"

# The CUDA kernel library example and benches/cuda_kernel_overhead, built for sm_90 (nvcc there,
# else PyPI's), without running the tests yet (DLPX_CUDA_KERNEL: a library built already; the
# kernel bench then needs DLPX_CUDA_OVERHEAD too).
example_dir=$work/cuda_kernel
if [ -z "${NVCC:-}" ]; then NVCC=$(find_tool nvcc) || NVCC=""; fi
export NVCC
if [ -n "${DLPX_CUDA_KERNEL:-}" ]; then
  row "| build_example | given: $(basename "$DLPX_CUDA_KERNEL") | |"
elif run build_example 120 env DLPX_PYTHON="$PY" DLPX_CUDA_KERNEL_DIR="$example_dir" DLPX_CUDA_EXAMPLE_NO_TESTS=1 \
  bash scripts/check_cuda_example.sh; then
  DLPX_CUDA_KERNEL=$example_dir/libdlpx_cuda_kernel.so
  DLPX_CUDA_OVERHEAD=$(ls "$example_dir"/dlpx_cuda_overhead*.so)
  export DLPX_CUDA_KERNEL DLPX_CUDA_OVERHEAD
fi

run gpu_suite 150 "$PY" -m pytest "${pytest_args[@]}" tests/python/cuda/test_cuda.py tests/python/protocols/test_cuda_array_interface.py
if [ -n "${DLPX_CUDA_KERNEL:-}" ]; then
  run example_tests 150 "$PY" -m pytest "${pytest_args[@]}" tests/python/kernels/test_cuda_kernel.py
fi

bench_args=()
[ $quick = 1 ] && bench_args=(--quick)
run cuda_bench 150 "$PY" benches/cuda_bench.py "${bench_args[@]}"
if [ $simulated = 1 ]; then
  row "| cuda_kernel_bench | not run: it launches kernels on a GPU | |"
elif [ -n "${DLPX_CUDA_OVERHEAD:-}" ]; then
  run cuda_kernel_bench 120 "$PY" benches/cuda_kernel_bench.py "${bench_args[@]}" --library "$DLPX_CUDA_KERNEL" \
    --extension "$DLPX_CUDA_OVERHEAD"
  # The same output made through torch's exchange table instead of its C shim.
  run cuda_outputs_shim_off 60 env DLPX_DIRECT_OFF=torch "$PY" benches/cuda_kernel_bench.py "${bench_args[@]}" \
    --outputs --library "$DLPX_CUDA_KERNEL"
fi
interop_args=("${bench_args[@]}")
[ $simulated = 1 ] && interop_args+=(--simulated)
run cuda_interop 120 "$PY" benches/cuda_interop.py "${interop_args[@]}"

# compute-sanitizer: every tool over both suites at once (one GPU serves them all). It runs each
# kernel to completion before its launch returns: DLPX_LAUNCHES_SERIALISED tells the tests.
# Expected errors: tool|what the error says|where its backtrace passes|why.
expected=(
  "memcheck|CUDA_ERROR_OUT_OF_MEMORY||the out-of-memory tests ask for more than the GPU has, on purpose"
  "memcheck|^Leaked [0-9,]+ bytes|c10::cuda::CUDACachingAllocator|torch's caching allocator keeps its device blocks until the process ends"
  "memcheck|^Leaked [0-9,]+ bytes|CUDACachingHostAllocator|torch's pinned-memory cache keeps its blocks until the process ends"
  "memcheck|^Leaked [0-9,]+ bytes|cupy_backends|CuPy's memory pool keeps its blocks until the process ends"
  "memcheck|^Leaked [0-9,]+ bytes|dlpx::memory::cuda|compute-sanitizer's Python backtraces hold the allocating test's frame, and the tensor in it, until exit (the memcheck-leaks run, without backtraces: dlpx holds nothing at exit)"
)
if [ $simulated = 1 ]; then
  row "| compute-sanitizer | not run: the simulated driver is not CUDA | |"
elif cs=$(find_tool compute-sanitizer); then
  # Quick: memcheck over both suites, the other tools over the example (its kernels are dlpx's).
  suites=(test_cuda.py)
  [ -n "${DLPX_CUDA_KERNEL:-}" ] && suites+=(test_cuda_kernel.py)
  # memcheck-leaks: the leak check again without backtraces. compute-sanitizer's Python
  # backtraces hold every frame that allocated, and so the tensors in it, until exit; without
  # them lifetimes are the program's own, and dlpx's accounting at exit (dlpx_accounting.py)
  # says whether any memory left is dlpx's.
  sanitizer_runs=() accounting=()
  for tool in memcheck memcheck-leaks racecheck synccheck initcheck; do
    for suite in "${suites[@]}"; do
      [ $quick = 1 ] && [ $tool != memcheck ] && [ $tool != memcheck-leaks ] && [ $suite = test_cuda.py ] && continue
      name=sanitize_${tool}_${suite%.py}
      options=(--tool "${tool%-leaks}") plugin=()
      [ $tool = memcheck ] && options+=(--leak-check full)
      [ $tool = memcheck-leaks ] && options+=(--leak-check full --show-backtrace no) plugin=(-p dlpx_accounting) \
        && accounting+=(--accounting "$suite=$logs/$name.accounting")
      run "$name" 300 env DLPX_LAUNCHES_SERIALISED=1 DLPX_ACCOUNTING_FILE="$logs/$name.accounting" "$cs" "${options[@]}" \
        --print-limit 10000 --log-file "$logs/$name.sanitizer" "$PY" -m pytest "${pytest_args[@]}" "${plugin[@]}" tests/python/*/"$suite" &
      sanitizer_runs+=("$tool:$suite:$logs/$name.sanitizer")
    done
  done
  wait
  rules=()
  for rule in "${expected[@]}"; do rules+=(--expect "$rule"); done
  "$PY" scripts/sanitizer_errors.py "${rules[@]}" "${accounting[@]}" "${sanitizer_runs[@]}" >"$logs/sanitizers.md" 2>&1 \
    || fail "compute-sanitizer: errors no rule expects, or a run that did not finish (see its table)"
else
  fail "compute-sanitizer: not found (PATH, /usr/local/cuda/bin)"
fi

# ---- the report -----------------------------------------------------------------------------------
versions=$("$PY" - <<'EOF' 2>/dev/null
import importlib, platform
cells = [f"Python {platform.python_version()}"]
for name in ("dlpx", "torch", "cupy", "jax", "tvm_ffi", "numpy"):
    try:
        cells.append(f"{name} {importlib.import_module(name).__version__}")
    except Exception as err:
        cells.append(f"{name}: not importable ({type(err).__name__})")
print(", ".join(cells))
EOF
)
if [ $simulated = 1 ]; then
  title="dlpx GPU check: simulated, not CUDA numbers (c_tests/sim_cuda)"
  machine="the simulated driver, $(uname -m)"
else
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
  title="dlpx GPU check: ${gpu:-no GPU found by nvidia-smi}"
  machine="$gpu; $(nproc) CPU cores"
fi
pytest_summary() {  # the last line pytest printed, and its failures and skips
  [ -f "$logs/$1.log" ] || { echo "not run"; return; }
  echo '```'
  grep -E '^(FAILED|ERROR)' "$logs/$1.log" | cut -c1-300 | head -n 40
  tail -n 1 "$logs/$1.log"
  echo '```'
  echo
  echo "Skipped, by reason:"
  echo
  sed -n 's/^SKIPPED \[\([0-9]*\)\] [^:]*:[0-9]*: /\1 /p' "$logs/$1.log" \
    | awk '{n[substr($0, index($0, " ") + 1)] += $1} END {for (r in n) printf "- %d: %s\n", n[r], r}' | sort
}
tables() {  # the Markdown a bench printed (tables and their captions), else its last lines
  [ -f "$logs/$1.log" ] || { echo "not run"; return; }
  grep -vE 'Warning|warn\(|^\s+(return|warnings)' "$logs/$1.log" | tail -n 60
}
{
  echo "# $title"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit ${DLPX_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}," \
    "$([ $quick = 1 ] && echo quick || echo full) run on $machine."
  echo
  echo "Versions: $versions; $(grep -ho 'nvcc [0-9.]* built' "$logs/build_example.log" 2>/dev/null | sed 's/ built//' || echo 'no nvcc');" \
    "compute-sanitizer: $( (cs=$(find_tool compute-sanitizer) && "$cs" --version | sed -n 's/.*Version \(.*\)/\1/p' | head -n 1) || echo none)."
  echo
  echo "## Checks"
  echo
  echo "| check | result | seconds |"
  echo "|---|---|---|"
  cat "$summary"
  echo
  echo "## The GPU suite (tests/python/cuda/test_cuda.py)"
  echo
  pytest_summary gpu_suite
  echo
  echo "## The CUDA kernel example's tests (tests/python/kernels/test_cuda_kernel.py)"
  echo
  pytest_summary example_tests
  echo
  echo "## compute-sanitizer"
  echo
  if [ -f "$logs/sanitizers.md" ]; then cat "$logs/sanitizers.md"; else echo "not run"; fi
  echo
  echo "## The allocator and current_work_stream (benches/cuda_bench.py)"
  echo
  tables cuda_bench
  echo
  echo "## A kernel call's host overhead (benches/cuda_kernel_bench.py)"
  echo
  tables cuda_kernel_bench
  echo
  echo "With torch's C shim off (DLPX_DIRECT_OFF=torch):"
  echo
  tables cuda_outputs_shim_off
  echo
  echo "## The CUDA interop matrix (benches/cuda_interop.py)"
  echo
  tables cuda_interop
  echo
  echo "## Failures"
  echo
  if [ -s "$failures" ]; then sed 's/^/- /' "$failures"; else echo "none"; fi
} >"$report"
tar -czf "$out/gpu_check_logs.tar.gz" -C "$work" logs
echo "gpu_check: wrote $report and $out/gpu_check_logs.tar.gz" >&2
cat "$report"
[ ! -s "$failures" ]
