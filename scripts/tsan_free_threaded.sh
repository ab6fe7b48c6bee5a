#!/usr/bin/env bash
# ThreadSanitizer over the free-threaded soak (docs/design.md, "Free-threaded CPython"): dlpx
# built by nightly rustc with -Zsanitizer=thread and an instrumented std (-Zbuild-std, needs the
# nightly rust-src component), loaded into free-threaded CPython 3.14t (scripts/
# build_free_threaded.sh) with GCC's libtsan preloaded, and the soak's 8 threads mixing numpy,
# tvm-ffi and dlpx tensors. The interpreter itself is not instrumented: the suppressions name
# only its frames (scripts/tsan/suppressions.txt). Fails on any other report.
#   bash scripts/tsan_free_threaded.sh [soak arguments, default --short]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${DLPX_TSAN_DIR:-$root/build/tsan}
runtime=$(gcc -print-file-name=libtsan.so)
[ -f "$runtime" ] || { echo "tsan_free_threaded: no libtsan (apt-get install libtsan2)"; exit 2; }
rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src' \
  || { echo "tsan_free_threaded: needs nightly rustc with rust-src (rustup component add rust-src --toolchain nightly)"; exit 2; }
mkdir -p "$out"
RUSTFLAGS="-Zsanitizer=thread --cfg dlpx_tsan" CARGO_TARGET_DIR="$out/target" \
  cargo +nightly build --quiet -Zbuild-std --target x86_64-unknown-linux-gnu --release --lib
cc -O1 -fno-builtin -shared -fPIC scripts/tsan/tsan_memcpy_shim.c -o "$out/libtsan_memcpy_shim.so"
py=$(bash scripts/build_free_threaded.sh 3.14 | tail -n 1)
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--short)
log=$out/soak.log
status=0
env -u PYTHON_GIL LD_PRELOAD="$runtime $out/libtsan_memcpy_shim.so" \
  TSAN_OPTIONS="suppressions=$root/scripts/tsan/suppressions.txt halt_on_error=0 report_signal_unsafe=0 exitcode=66" \
  DLPX_LIBRARY="$out/target/x86_64-unknown-linux-gnu/release/libdlpx.so" PYTHONPATH="$root/python" \
  "$py" tests/soak.py --rss-slack 256 "${args[@]}" >"$log" 2>&1 || status=$?
grep -E '^soak' "$log" || true
reports=$(grep -c 'WARNING: ThreadSanitizer' "$log" || true)
echo "tsan_free_threaded: $reports reports (log: $log)"
[ "$reports" -eq 0 ] && [ "$status" -eq 0 ]
