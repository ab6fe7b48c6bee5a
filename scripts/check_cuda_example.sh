#!/usr/bin/env bash
# Compiles and links the CUDA kernel library examples/cuda_kernel for sm_90 with a plain nvcc
# command line — nvcc from PyPI (nvidia-cuda-nvcc, in tests/requirements.txt) unless NVCC names
# another — against the dlpx that DLPX_PYTHON imports, so the CUDA example cannot rot on a
# machine without a GPU, and benches/cuda_kernel_overhead (the same launch as a CPython
# extension). Then checks the library (dlpx_kernel_library exported, no Py* symbol, libdlpx.so.0
# needed, the CUDA runtime static), loads it (no driver is needed until a kernel launches) and
# runs tests/python/kernels/test_cuda_kernel.py on it:
# without a GPU only the checks that need none run, the others say why they skip
# (DLPX_CUDA_EXAMPLE_NO_TESTS=1: build and check the module only).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${DLPX_PYTHON:-.venv/bin/python}
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
out=${DLPX_CUDA_KERNEL_DIR:-build/cuda_kernel}
site=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
NVCC=${NVCC:-$site/nvidia/cu13/bin/nvcc}
[ -x "$NVCC" ] || { echo "check_cuda_example: no nvcc at $NVCC (pip install nvidia-cuda-nvcc, or set NVCC)"; exit 1; }

# nvcc must match the runtime headers it compiles against (cuda_runtime_api.h's CUDART_VERSION).
release=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\),.*/\1 \2/p')
headers=$(printf '#include <cuda_runtime_api.h>\nCUDART_VERSION\n' | "$NVCC" -E -x cu - 2>/dev/null | tail -n 1)
read -r major minor <<<"$release"
if [ "$headers" != "$((major * 1000 + minor * 10))" ]; then
  echo "check_cuda_example: nvcc $major.$minor but the CUDA runtime headers are $headers (keep them one release)"
  exit 1
fi

library=$("$PY" -m dlpx --library)
include=$("$PY" -m dlpx --includedir)
[ -f "$include/dlpx/dlpx.h" ] || include=$PWD/include  # dlpx run from the tree (DLPX_LIBRARY)
mkdir -p "$out"
kernels=$out/libdlpx_cuda_kernel.so
flags=(-std=c++17 -O2 -arch=sm_90 -cudart static -shared -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra
  -Werror all-warnings -I "$include" -Xlinker "$library" -Xlinker -rpath,"$(dirname "$library")")

# The kernel library: no Python in it.
start=$(date +%s%N)
"$NVCC" "${flags[@]}" examples/cuda_kernel/cuda_kernel.cu -o "$kernels"
echo "check_cuda_example: nvcc $major.$minor built $kernels for sm_90 in $(( ($(date +%s%N) - start) / 1000000 )) ms"
nm -D --defined-only "$kernels" | grep -qE ' [TW] dlpx_kernel_library$' \
  || { echo "check_cuda_example: $kernels does not export dlpx_kernel_library"; exit 1; }
python_symbols=$(nm -D "$kernels" | grep -E ' (U|T|D|B) _?Py' || true)
[ -z "$python_symbols" ] || { echo "check_cuda_example: $kernels names Python symbols:"; echo "$python_symbols"; exit 1; }
needed=$(readelf -d "$kernels" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
case " $needed" in *" libdlpx.so.0 "*) ;; *) echo "check_cuda_example: libdlpx.so.0 is not needed: $needed"; exit 1 ;; esac
case " $needed" in *libcudart*|*libcuda.*|*libpython*) echo "check_cuda_example: links the CUDA runtime, the driver or Python dynamically: $needed"; exit 1 ;; esac

# The same launch written by hand as a CPython extension, for benches/cuda_kernel_bench.py.
python_include=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
overhead=$out/dlpx_cuda_overhead$suffix
"$NVCC" "${flags[@]}" -I "$python_include" benches/cuda_kernel_overhead/extension.cu -o "$overhead"

kernels=$(realpath "$kernels")
[ -n "${DLPX_CUDA_EXAMPLE_NO_TESTS:-}" ] && exit 0  # scripts/gpu_check.sh runs the tests itself
(cd tests && DLPX_CUDA_KERNEL="$kernels" "$PY" -m pytest -q -p no:cacheprovider python/kernels/test_cuda_kernel.py -rs)
