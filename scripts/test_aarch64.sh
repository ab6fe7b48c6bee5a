#!/usr/bin/env bash
# The aarch64 wheel and C package (scripts/build_dist.sh) tested on this x86-64 machine under
# qemu-user: Debian's arm64 CPython 3.11 (its packages unpacked into a sysroot, no chroot, cached
# in ${DLPX_AARCH64_CACHE:-~/.cache/dlpx/aarch64}) with the aarch64 wheels of numpy, tvm-ffi,
# array-api-strict and pytest, and the wheel installed the way pip installs it there, runs the
# conformance kit and the Python tests that need no torch or jax; the allocator, ABI and
# no-Python C tests, cross-compiled against the C package, run too. The kernel's binfmt_misc runs
# aarch64 programs through qemu (a test may start its own interpreter), so this needs root.
#   bash scripts/test_aarch64.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache=${DLPX_AARCH64_CACHE:-$HOME/.cache/dlpx/aarch64}
PY=${DLPX_PYTHON:-.venv/bin/python}
wheel=$(ls dist/dlpx-*-cp39-abi3-*aarch64.whl)
package=$(ls dist/dlpx-*-c-manylinux_2_17_aarch64.tar.gz)
start=$(date +%s)

need=()
for p in qemu-user-static gcc-aarch64-linux-gnu libc6-dev-arm64-cross; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "test_aarch64: needs root and apt-get for ${need[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
binfmt=/proc/sys/fs/binfmt_misc
mountpoint -q "$binfmt" || mount -t binfmt_misc binfmt_misc "$binfmt"
[ -e "$binfmt/qemu-aarch64" ] || cat /usr/lib/binfmt.d/qemu-aarch64.conf >"$binfmt/register"

# A wheel for the wrong machine is pip's to refuse, not Python's to load.
if "$PY" -m pip install -q --dry-run --no-deps "$wheel" >/dev/null 2>&1; then
  echo "test_aarch64: pip on x86-64 accepted $wheel" >&2
  exit 1
fi
echo "pip on x86-64 refuses $(basename "$wheel")"

sysroot=$cache/sysroot
if [ ! -f "$sysroot/.dlpx-ok" ]; then
  echo "== Debian arm64 python3.11 and what it needs, unpacked into $sysroot"
  rm -rf "$cache"
  mkdir -p "$cache/lists/partial" "$cache/debs/partial" "$sysroot"
  # An empty dpkg status: every package of the closure is fetched, whatever this machine has.
  apt=(apt-get -qq -o APT::Architecture=arm64 -o APT::Architectures=arm64 -o APT::Sandbox::User=root
       -o "Dir::State::Lists=$cache/lists"
       -o "Dir::Cache::Archives=$cache/debs" -o Dir::State::status=/dev/null)
  "${apt[@]}" update
  "${apt[@]}" install -y --download-only python3.11 libstdc++6 >/dev/null
  for deb in "$cache"/debs/*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
  rm -rf "$cache/debs" "$cache/lists"
  touch "$sysroot/.dlpx-ok"
fi
export QEMU_LD_PREFIX=$sysroot
arm_python=$sysroot/usr/bin/python3.11
site=$cache/site
pip_arm=("$PY" -m pip install -q --disable-pip-version-check --target "$site" --upgrade --only-binary=:all:
         --implementation cp --python-version 3.11 --platform manylinux2014_aarch64
         --platform manylinux_2_17_aarch64 --platform manylinux_2_28_aarch64)
[ -f "$site/.dlpx-ok" ] || { rm -rf "$site"; "${pip_arm[@]}" numpy apache-tvm-ffi array-api-strict pytest; touch "$site/.dlpx-ok"; }
rm -rf "$site"/dlpx "$site"/dlpx-*.dist-info
"${pip_arm[@]}" --no-deps "$wheel"
run() { env -u DLPX_LIBRARY PYTHONPATH="$site" "$arm_python" "$@"; }
run -c 'import platform, dlpx, numpy as np
t = dlpx.from_dlpack(np.arange(6, dtype=np.float32))
assert platform.machine() == "aarch64" and float(np.from_dlpack(t).sum()) == 15.0
print("aarch64 CPython", platform.python_version(), "imports dlpx", dlpx.__version__, "from", dlpx.library_path())'

echo "== the conformance kit (dlpx and numpy) on aarch64"
run -m dlpx.conform dlpx numpy | grep -E '^== '
echo "== the Python tests that need neither torch nor jax nor a compiler for aarch64, on aarch64"
# (The others skip without torch; test_cpp_kernel and test_demo_kernel build with this machine's
# compiler.) test_consumer_fast_paths, 2 of these minutes, checks the direct reads of numpy's and
# tvm-ffi's structs against their __dlpack__ on this machine's layout.
(cd tests && run -m pytest -q -p no:cacheprovider python/entry_points/test_from_dlpack.py python/entry_points/test_tensor.py \
  python/rows/test_numpy.py python/rows/test_array_api_strict.py python/rows/test_array_api_strict_direct.py \
  python/protocols/test_dlpack_protocol.py python/entry_points/test_errors.py python/guarantees/test_faithful_import.py python/tools/test_conform.py \
  python/rows/test_consumer_fast_paths.py python/entry_points/test_main.py | tail -n 1)

echo "== C tests, cross-compiled against the aarch64 C package, on aarch64"
c=$(mktemp -d)
tar -C "$c" -xzf "$package"
prefix=$(echo "$c"/dlpx-*)
flags=$(PKG_CONFIG_PATH="$prefix/dlpx/lib/pkgconfig" pkg-config --cflags --libs dlpx)
official=$("$PY" -c "import os, tvm_ffi; print(os.path.join(os.path.dirname(tvm_ffi.__file__), 'include'))")
for test in "test_allocator test_allocator.c" "test_allocator_errors test_allocator_errors.c" \
            "test_allocator_threads test_allocator_threads.c" "test_no_python test_no_python.c" \
            "test_abi test_abi.c abi_official.c abi_dlpx.c abi_order_official_first.c abi_order_dlpx_first.c"; do
  set -- $test
  name=$1
  shift
  # shellcheck disable=SC2086  # pkg-config's flags are words
  aarch64-linux-gnu-gcc -std=c11 -O2 -Wall -Wextra -Werror -I c_tests -I "$official" "${@/#/c_tests/}" \
    -o "$c/$name" $flags -lpthread -ldl
  QEMU_LD_PREFIX=/usr/aarch64-linux-gnu "$c/$name" | tail -n 1 | sed "s/^/$name (aarch64): /"
done
# The CMake package too: a project cross-configured for aarch64 finds it from its own folder.
cat >"$c/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(dlpx_c_package C)
find_package(dlpx CONFIG REQUIRED)
find_package(Threads REQUIRED)
add_executable(test_no_python_cmake "${TESTS}/test_no_python.c")
target_include_directories(test_no_python_cmake PRIVATE "${TESTS}")
target_link_libraries(test_no_python_cmake PRIVATE dlpx::dlpx Threads::Threads ${CMAKE_DL_LIBS})
CMAKE
cmake -S "$c" -B "$c/build" -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
  -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -Ddlpx_DIR="$prefix/dlpx/lib/cmake/dlpx" -DTESTS="$root/c_tests" >/dev/null
cmake --build "$c/build" >/dev/null
QEMU_LD_PREFIX=/usr/aarch64-linux-gnu "$c/build/test_no_python_cmake" | tail -n 1 | sed 's/^/test_no_python through the CMake package (aarch64): /'
rm -rf "$c"
echo "test_aarch64: done in $(( $(date +%s) - start )) s"
