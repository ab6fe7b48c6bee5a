#!/usr/bin/env bash
# The GPU tests, for a machine with an NVIDIA GPU whose python3 already has torch (and cupy)
# with CUDA: no package registry needed. Build here (cargo build --release), carry
# target/release/libdlpx.so (and build/wheels when that python lacks pytest), run this there.
# Then the CUDA benchmark table (benches/cuda_bench.py; it compiles its C loops with cc, or
# carry build/bench/libcuda_bench_loops.so built here by running it once).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${DLPX_PYTHON:-python3}
lib=${DLPX_LIBRARY:-$PWD/target/release/libdlpx.so}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
ln -sf "$lib" "$stage/libdlpx.so.0"
export DLPX_LIBRARY="$stage/libdlpx.so.0" PYTHONPATH="$PWD/python:$PWD/tests/python/helpers"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible to torch'; print('GPU:', torch.cuda.get_device_name(0))"
if ! "$PY" -c "import pytest" 2>/dev/null; then
  # No registry there: bring pytest along (here: pip download -d build/wheels pytest; carry build/wheels).
  [ -d build/wheels ] || { echo "pytest is missing: carry wheels from 'pip download -d build/wheels pytest'"; exit 2; }
  "$PY" -m pip install -q --no-index --find-links build/wheels --target "$stage/site" pytest
  export PYTHONPATH="$PYTHONPATH:$stage/site"
fi
"$PY" -m pytest -q -p no:cacheprovider tests/python/cuda/test_cuda.py -rs
"$PY" benches/cuda_bench.py
