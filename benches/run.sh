#!/usr/bin/env bash
# Runs every dlpx benchmark and prints its tables: the C harness over the exchange tables
# (dlpx vs torch), the C++ layer's conversions, and the Python interop matrix with the demo
# kernel's call overhead. Pass --quick for a short run.
# DLPX_PYTHON names a Python with dlpx installed and the peers (default: .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${DLPX_PYTHON:-.venv/bin/python}
quick=${1:-}
base=$("$PY" -c 'import sys; print(sys.base_prefix)')
ver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
site=$("$PY" -c 'import site; print(site.getsitepackages()[0])')
libdir=$("$PY" -m dlpx --libdir)
incdir=$("$PY" -m dlpx --includedir)
out=build/bench
mkdir -p "$out"
cc -O2 -std=c11 -Wall -Wextra -I"$incdir" $("$base/bin/python$ver-config" --includes) benches/exchange_bench.c \
   -o "$out/exchange_bench" "$libdir/libdlpx.so.0" $("$base/bin/python$ver-config" --ldflags --embed) \
   -Wl,-rpath,"$libdir" -lpthread
echo "== exchange tables from C (machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
PYTHONPATH="$site" PYTHONNOUSERSITE=1 "$out/exchange_bench" $quick dlpx.Tensor torch.Tensor
echo
echo "== CUDA exchange tables (C loops through ctypes)"
if "$PY" -c "import dlpx, sys; sys.exit(0 if dlpx.cuda.is_available() else 1)"; then
  "$PY" benches/cuda_bench.py $quick
else
  echo "skipped: no CUDA driver on this machine"
fi
echo
echo "== C++ layer: mdspan <-> DLTensor conversions"
c++ -O2 -std=c++17 -I"$incdir" c_tests/cpp/bench_conversions.cpp -o "$out/cpp_conversions" "$libdir/libdlpx.so.0" \
    -Wl,-rpath,"$libdir"
"$out/cpp_conversions"
echo
echo "== Python interop matrix"
cmake -S examples/add_extension -B "$out/demo" -Ddlpx_DIR="$("$PY" -m dlpx --cmakedir)" -DPython3_EXECUTABLE="$PY" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$out/demo" >/dev/null
PYTHONPATH="$out/demo" "$PY" benches/interop.py $quick
