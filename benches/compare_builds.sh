#!/usr/bin/env bash
# Compares two builds of libdlpx on the exchange-table benchmark, for a change that must not
# cost speed (a refactor): the C harness runs alternately with each library loaded as dlpx's
# native module, ROUNDS times, and prints every row's dlpx/torch ratio per build and round.
# torch's table, timed in the same process each time, is the yardstick the noise cancels against.
#
#   bash benches/compare_builds.sh OLD_TREE [NEW_TREE] [ROUNDS]
#
# A tree is a dlpx checkout with a release build (`cargo build --release`): its
# target/release/libdlpx.so and its python/dlpx package are loaded together (a `git worktree`
# of the old commit is one). NEW_TREE defaults to this checkout. DLPX_PYTHON names a Python
# with torch and numpy.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${DLPX_PYTHON:-.venv/bin/python}
old=$(realpath "$1")
new=$(realpath "${2:-.}")
rounds=${3:-3}
base=$("$PY" -c 'import sys; print(sys.base_prefix)')
ver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
site=$("$PY" -c 'import site; print(site.getsitepackages()[0])')
incdir=$new/include
out=build/bench
mkdir -p "$out"
# Linked against neither build: each run loads the library under test as dlpx's native module.
cc -O2 -std=c11 -Wall -Wextra -I"$incdir" $("$base/bin/python$ver-config" --includes) benches/exchange_bench.c \
   -o "$out/exchange_bench_ab" "$new/target/release/libdlpx.so" $("$base/bin/python$ver-config" --ldflags --embed) -lpthread
run() {  # TREE LABEL: one quick run, its rows as "label | entry | dlpx | torch | ratio"
  local stage="$out/ab-$2"
  mkdir -p "$stage"
  cp "$1/target/release/libdlpx.so" "$stage/libdlpx.so.0"
  LD_LIBRARY_PATH="$stage" DLPX_LIBRARY="$stage/libdlpx.so.0" PYTHONPATH="$1/python:$site" PYTHONNOUSERSITE=1 \
    "$out/exchange_bench_ab" --quick dlpx.Tensor torch.Tensor |
    awk -F'|' -v label="$2" 'NF > 5 && $2 ~ /[a-z]/ && $3 ~ /[0-9]/ { gsub(/ +$/, "", $2); printf "%-4s|%s|%s|%s|%s\n", label, $2, $3, $4, $5 }'
}
echo "build | entry point | dlpx ns | torch ns | dlpx/torch"
for r in $(seq "$rounds"); do
  run "$old" "old"
  run "$new" "new"
done
