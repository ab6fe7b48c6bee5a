#!/usr/bin/env bash
# A kernel library shipped as one py3-none wheel (examples/kernel_wheel) on every interpreter CI
# has: the wheel is built once (scikit-build-core, dlpx_add_kernel_library, python -m
# dlpx.stubgen), then for each interpreter a fresh venv gets numpy and, from DIST alone, the
# kernel wheel and the dlpx wheel pip picks for that Python (cp39-abi3; cp314t, cp315t), and
# scripts/kernel_wheel_smoke_test.py runs there, outside the tree.
#   3.9-3.13    the newest patch release of each under ~/.pyenv/versions
#   3.14, 3.15  Debian forky's, in the chroot scripts/check_wheel_pythons.sh keeps (build/forky-chroot)
#   3.14t/3.15t the free-threaded builds scripts/build_free_threaded.sh caches ($DLPX_FT_CACHE)
# It makes none of them: one that is missing is skipped, saying which and why; under
# DLPX_REQUIRE_ALL_TESTS=1 (CI, which runs it after the stages that make them) it fails instead.
# Ends with "kernel wheel: N passed, N failed, N skipped"; fails if any failed.
#   bash scripts/check_kernel_wheel.sh [DIST]   (default dist/: scripts/build_dist.sh's wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dist=$(realpath "${1:-dist}")
work=$root/build/kernel-wheel
ft_cache=${DLPX_FT_CACHE:-$HOME/.cache/dlpx/free-threaded}
source scripts/interpreters.sh
chroot_dir=$forky_chroot
start=$SECONDS
quiet=(-q --disable-pip-version-check)

# The build: a venv with scikit-build-core and the abi3 dlpx wheel (the build requirements; no
# isolation, so dlpx comes from DIST, not an index), the wheel built into $work/wheel.
abi3=$(ls "$dist"/dlpx-*-cp39-abi3-*x86_64.whl | head -n 1)
[ -x "$work/build-venv/bin/python" ] || "${DLPX_PYTHON:-python3}" -m venv "$work/build-venv"
"$work/build-venv/bin/python" -m pip install "${quiet[@]}" "scikit-build-core>=0.10"
"$work/build-venv/bin/python" -m pip install "${quiet[@]}" --force-reinstall --no-deps "$abi3"
rm -rf "$work/wheel" "$work/cmake"
"$work/build-venv/bin/python" -m pip wheel "${quiet[@]}" --no-build-isolation --no-deps -w "$work/wheel" \
  -C build-dir="$work/cmake" examples/kernel_wheel
wheel=$(ls "$work"/wheel/dlpx_example_kernels-*.whl)
echo "== built $(basename "$wheel") in $((SECONDS - start)) s"
# One wheel for every interpreter: py3-none, the library, the package, its stub, dlpx required.
"$work/build-venv/bin/python" - "$wheel" <<'PY'
import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
tag = sys.argv[1].rsplit("/", 1)[-1].split("-", 2)[2]
assert tag.startswith("py3-none-") and "linux" in tag, f"not a py3-none wheel: {tag}"
names = set(wheel.namelist())
for need in ("libdlpx_example_kernels.so", "__init__.py", "__init__.pyi", "py.typed"):
    assert "dlpx_example_kernels/" + need in names, f"{need} is not in the wheel: {sorted(names)}"
assert not [n for n in names if "libdlpx.so" in n], "the wheel holds no libdlpx: the dlpx wheel's is used"
metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
assert "Requires-Dist: dlpx" in metadata, "the wheel depends on dlpx"
PY

# check LABEL PYTHON VENV: VENV made fresh by PYTHON, numpy, the wheels, the smoke test run from
# VENV's parent. Paths as "${runner[@]}" sees them (the chroot's for forky).
check() {
  local label=$1 py=$2 venv=$3
  local pip=("${runner[@]}" "$venv/bin/python" -m pip install "${quiet[@]}" --only-binary :all:)
  echo "== $label"
  if "${runner[@]}" env -u PYTHON_GIL "$py" -m venv --clear "$venv" && "${pip[@]}" numpy &&
     "${pip[@]}" --no-index --find-links "$dist_in" "$wheel_in" &&
     "${runner[@]}" env -u PYTHON_GIL sh -c 'cd "$(dirname "$1")" && exec "$1/bin/python" "$2"' sh "$venv" "$smoke_in"; then
    passed=$((passed + 1))
  else
    echo "FAILED: $label"
    failed=$((failed + 1))
  fi
}

runner=() dist_in=$dist wheel_in=$wheel smoke_in=$root/scripts/kernel_wheel_smoke_test.py
for minor in 9 10 11 12 13; do
  py=$(pyenv_python "$minor")
  if [ -z "$py" ]; then unavailable "CPython 3.$minor" "not found under ~/.pyenv/versions"; continue; fi
  check "CPython 3.$minor ($py)" "$py" "$work/venv-3.$minor"
done
for minor in 14 15; do
  marker=$ft_cache/3.${minor}t/.dlpx-ok py=$ft_cache/3.${minor}t/bin/python3.${minor}t
  if [ ! -s "$marker" ] || [ ! -x "$py" ]; then
    unavailable "CPython 3.${minor}t" "no cached build at $ft_cache/3.${minor}t (scripts/build_free_threaded.sh 3.$minor makes it)"
    continue
  fi
  check "CPython 3.${minor}t ($py)" "$py" "$work/venv-3.${minor}t"
done
if [ ! -f "$chroot_dir/.dlpx-packages" ] || [ "$(id -u)" != 0 ]; then
  unavailable "CPython 3.14 and 3.15 (Debian forky chroot)" \
    "no chroot at $chroot_dir run as root (scripts/check_wheel_pythons.sh makes it)"
else
  inside=/dlpx-kernel-wheel
  rm -rf "${chroot_dir:?}$inside" && mkdir -p "$chroot_dir$inside/dist"
  cp "$dist"/dlpx-*.whl "$chroot_dir$inside/dist/"
  cp "$wheel" "$root/scripts/kernel_wheel_smoke_test.py" "$chroot_dir$inside/"
  runner=("${in_forky[@]}")
  dist_in=$inside/dist wheel_in=$inside/$(basename "$wheel") smoke_in=$inside/kernel_wheel_smoke_test.py
  for minor in 14 15; do
    check "CPython 3.$minor (Debian forky, chroot)" "/usr/bin/python3.$minor" "$inside/venv-3.$minor"
  done
fi

echo "== $((SECONDS - start)) s in all"
echo "kernel wheel: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
