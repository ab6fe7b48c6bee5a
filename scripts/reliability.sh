#!/usr/bin/env bash
# Reliability checks that are neither ctest nor pytest cases (valgrind is a ctest label, the
# hostile-input tests are pytest's tests/python/guarantees/test_hostile_inputs.py):
#  - the fuzz targets (fuzz/) over their checked-in corpus and 20 000 inputs derived from it
#    each, through a plain `cargo test` on the stable toolchain (libFuzzer needs nightly, which
#    CI does not require); with DLPX_FUZZ_SECONDS=N and `cargo +nightly fuzz` present,
#    libFuzzer also explores each target for N seconds;
#  - the Python surface under atheris (fuzz/python/surface.py): 10 000 inputs from a fixed seed;
#  - the soak in its short mode (8 threads x 20 000 operations).
# DLPX_PYTHON names the Python with dlpx installed and the peers (default: .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${DLPX_PYTHON:-.venv/bin/python}

echo "== fuzz targets over the checked-in corpus and derived inputs (cargo test, fuzz/)"
if ! out=$(cd fuzz && cargo test --no-default-features -- --nocapture 2>&1); then
  echo "$out"
  exit 1
fi
echo "$out" | grep -E '^(test |[a-z_]+: [0-9]+ corpus inputs)' || true

if [ -n "${DLPX_FUZZ_SECONDS:-}" ] && cargo +nightly fuzz --version >/dev/null 2>&1; then
  for target in $(cd fuzz && cargo +nightly fuzz list); do
    echo "== libFuzzer: $target for ${DLPX_FUZZ_SECONDS} s"
    work=$(mktemp -d)
    cp fuzz/corpus/"$target"/* "$work"/
    (cd fuzz && cargo +nightly fuzz run "$target" "$work" -- -max_total_time="$DLPX_FUZZ_SECONDS" 2>&1 | tail -n 3)
    rm -rf "$work"
  done
fi

echo "== the Python surface under atheris (fuzz/python/surface.py), 10 000 inputs"
work=$(mktemp -d)
if ! out=$("$PY" fuzz/python/surface.py -runs=10000 -seed=1 -artifact_prefix="$work/" 2>&1); then
  echo "$out" | tail -n 40
  exit 1
fi
echo "$out" | grep -E '^(#[0-9]+[[:space:]]+DONE|Done )' || true
rm -rf "$work"

echo "== soak, short"
"$PY" tests/soak.py --short
