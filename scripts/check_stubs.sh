#!/usr/bin/env bash
# The stubs are the runtime: mypy's stubtest holds python/dlpx/*.pyi to the dlpx that PYTHON
# imports (the installed package, or the tree's with PYTHONPATH and DLPX_LIBRARY set), and mypy
# --strict reads tests/typing/usage.py, a user's calls, as the runtime runs them (each
# `# type: ignore[...]` there marks a call the runtime refuses; --warn-unused-ignores fails when
# mypy lets one through). Run by scripts/test.sh and tests/python/entry_points/test_stubs.py.
#   usage: scripts/check_stubs.sh [PYTHON]   (default: $DLPX_PYTHON, else python3; it needs mypy)
set -euo pipefail
py=${1:-${DLPX_PYTHON:-python3}}
cd "$(dirname "$0")/../tests/typing"
allow=(--allowlist stubtest_allowlist.txt)
# Before 3.12 the type has no __buffer__ for stubtest to find; the stub declares it all the same.
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' || allow+=(--allowlist stubtest_allowlist_before_3.12.txt)
"$py" -m mypy.stubtest dlpx --mypy-config-file mypy.ini "${allow[@]}"
"$py" -m mypy --config-file mypy.ini --strict --warn-unused-ignores usage.py
