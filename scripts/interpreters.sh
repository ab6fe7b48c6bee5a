# What the checks that run a wheel on every interpreter share (sourced by
# scripts/check_wheel_pythons.sh and scripts/check_kernel_wheel.sh): the tally, the verdict on an
# interpreter this machine cannot provide, where CPython 3.9-3.13 are, and how a command runs in
# the Debian forky chroot (build/forky-chroot) that holds 3.14 and 3.15.
# shellcheck shell=bash

passed=0 failed=0 skipped=0
forky_chroot=$PWD/build/forky-chroot
# The host's PIP_FIND_LINKS and PATH name directories the chroot does not have.
in_forky=(env -u PIP_FIND_LINKS PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root chroot "$forky_chroot")

# unavailable LABEL WHY: an interpreter this machine cannot provide: a skip, or under
# DLPX_REQUIRE_ALL_TESTS=1 (CI) a failure.
unavailable() {
  if [ -n "${DLPX_REQUIRE_ALL_TESTS:-}" ]; then
    echo "FAILED: $1: $2 (DLPX_REQUIRE_ALL_TESTS=1: every interpreter is checked)"
    failed=$((failed + 1))
  else
    echo "== $1: skipped: $2"
    skipped=$((skipped + 1))
  fi
}

# pyenv_python MINOR: the newest patch release of CPython 3.MINOR under ~/.pyenv/versions, or "".
pyenv_python() {
  ls -d "$HOME"/.pyenv/versions/3."$1".*/bin/python3 2>/dev/null | sort -V | tail -n 1 || true
}
