#!/usr/bin/env bash
# Installs the built wheel (argument 1, default: dist/'s manylinux wheel) into a fresh venv of
# every CPython 3.9-3.15 and runs scripts/wheel_smoke_test.py there, with numpy and apache-tvm-ffi
# (a failed install of either fails that interpreter: both publish wheels for all seven): one
# binary, every interpreter.
#   3.9-3.13  the newest patch release of each under ~/.pyenv/versions
#   3.14-3.15 Debian testing's (forky) python3.14/python3.15, in a chroot made by debootstrap and
#             kept in build/forky-chroot (forky's glibc is newer than this machine's, so its
#             Pythons cannot run outside it).
# An interpreter that cannot be had (not under ~/.pyenv, or debootstrap cannot run) is skipped,
# saying why; under DLPX_REQUIRE_ALL_TESTS=1 (CI) it fails instead.
# Ends with "pythons: N passed, N failed, N skipped"; fails if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
wheel=$(realpath "${1:-$(ls dist/dlpx-*-cp39-abi3-manylinux*x86_64.whl)}")
work=$root/build/wheel-pythons
source scripts/interpreters.sh
chroot_dir=$forky_chroot

# check LABEL PYTHON VENV: a fresh VENV from PYTHON, the wheel and the peers, the smoke test run
# from VENV's parent (outside the source tree, so `import dlpx` is the wheel's). Paths are as the
# ${runner[@]} prefix sees them (nothing on the host, chroot for forky); so are $wheel_in, $smoke_in.
check() {
  local label=$1 py=$2 venv=$3
  local pip=("${runner[@]}" "$venv/bin/python" -m pip install -q --disable-pip-version-check --only-binary :all:)
  echo "== $label"
  if "${runner[@]}" "$py" -m venv --clear "$venv" && "${pip[@]}" "$wheel_in" numpy apache-tvm-ffi &&
     "${runner[@]}" sh -c 'cd "$(dirname "$1")" && exec "$1/bin/python" "$2"' sh "$venv" "$smoke_in"; then
    passed=$((passed + 1))
  else
    echo "FAILED: $label"
    failed=$((failed + 1))
  fi
}

runner=() wheel_in=$wheel smoke_in=$root/scripts/wheel_smoke_test.py
mkdir -p "$work"
for minor in 9 10 11 12 13; do
  py=$(pyenv_python "$minor")
  if [ -z "$py" ]; then unavailable "CPython 3.$minor" "not found under ~/.pyenv/versions"; continue; fi
  check "CPython 3.$minor ($py)" "$py" "$work/venv-3.$minor"
done

# Mounts under the chroot (debootstrap's own /proc and /sys, when it stopped half way) go before
# the chroot is deleted; --one-file-system keeps rm inside it whatever is still mounted.
unmount_under() {
  local m
  for m in $(awk -v d="$1" 'index($2, d "/") == 1 { print $2 }' /proc/mounts | sort -r); do umount "$m" || umount -l "$m"; done
}

# Why the forky chroot cannot be made here, or nothing.
forky_impossible() {
  [ "$(id -u)" = 0 ] || { echo "debootstrap and chroot need root"; return; }
  if ! command -v debootstrap >/dev/null; then
    command -v apt-get >/dev/null || { echo "no debootstrap and no apt-get to install it"; return; }
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; } >/dev/null 2>&1 ||
      { echo "apt-get could not install debootstrap"; return; }
  fi
  local scripts=/usr/share/debootstrap/scripts
  # This debootstrap predates forky; forky's layout is sid's.
  [ -e "$scripts/forky" ] || ln -s sid "$scripts/forky" || { echo "cannot add the forky script to $scripts"; return; }
}

packages=python3.14,python3.14-venv,python3.15,python3.15-venv
reason=$(forky_impossible)
if [ -n "$reason" ]; then
  unavailable "CPython 3.14 and 3.15 (Debian forky chroot)" "$reason"
else
  if [ "$(cat "$chroot_dir/.dlpx-packages" 2>/dev/null)" != "$packages" ]; then
    echo "== debootstrap forky into $chroot_dir (kept for later runs)"
    unmount_under "$chroot_dir"
    rm -rf --one-file-system "$chroot_dir"
    if debootstrap --variant=minbase --include="$packages" forky "$chroot_dir" >"$work/debootstrap.log" 2>&1; then
      echo "$packages" >"$chroot_dir/.dlpx-packages"
    else
      tail -n 5 "$work/debootstrap.log"
    fi
    unmount_under "$chroot_dir"
  fi
  if [ ! -f "$chroot_dir/.dlpx-packages" ]; then
    unavailable "CPython 3.14 and 3.15 (Debian forky chroot)" "debootstrap failed (log: $work/debootstrap.log)"
  else
    # pip in the chroot reaches PyPI with the host's CA bundle and resolver.
    mkdir -p "$chroot_dir/etc/ssl/certs" "$chroot_dir/dlpx-check"
    cp /etc/ssl/certs/ca-certificates.crt "$chroot_dir/etc/ssl/certs/"
    cp --remove-destination /etc/resolv.conf "$chroot_dir/etc/resolv.conf"
    rm -f "$chroot_dir"/dlpx-check/dlpx-*.whl
    cp "$wheel" "$root/scripts/wheel_smoke_test.py" "$chroot_dir/dlpx-check/"
    runner=("${in_forky[@]}")
    wheel_in=/dlpx-check/$(basename "$wheel") smoke_in=/dlpx-check/wheel_smoke_test.py
    for minor in 14 15; do
      check "CPython 3.$minor (Debian forky, chroot)" "/usr/bin/python3.$minor" "/dlpx-check/venv-3.$minor"
    done
  fi
fi

echo "pythons: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
