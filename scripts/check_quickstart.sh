#!/usr/bin/env bash
# The quick start on a bare machine: a copy of the tree with no .venv, and a PATH without cmake
# (nor ctest, cpack, ccmake), so examples/quickstart.sh must create its venv, install cmake from
# PyPI into it, say so, and run the demo. Then, on a PATH without cargo, it must stop at once with
# one sentence naming it.
# The copy's .venv holds numpy and torch with its CUDA libraries, 5.5 GiB: it is removed when the
# check ends, pass or fail, so that the stages after it have that room (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(pwd)/build/quickstart-check
rm -rf "$work"
mkdir -p "$work/src" "$work/bin" "$work/bin-no-cargo"
trap 'rm -rf "$work/src/.venv"' EXIT
git ls-files -z -co --exclude-standard | xargs -0 tar -cf - | tar -xf - -C "$work/src"

# PATH's programs, the first of each name, as links: without cmake's, and (second) without cargo.
IFS=: read -r -a dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
  [ -d "$dir" ] || continue
  for tool in "$dir"/*; do
    name=$(basename "$tool")
    [ -x "$tool" ] && [ ! -d "$tool" ] || continue
    case "$name" in cmake | ctest | cpack | ccmake | cmake-gui) continue ;; esac
    [ -e "$work/bin/$name" ] || ln -s "$tool" "$work/bin/$name"
    [ "$name" = cargo ] || [ -e "$work/bin-no-cargo/$name" ] || ln -s "$tool" "$work/bin-no-cargo/$name"
  done
done
! PATH="$work/bin" command -v cmake >/dev/null || { echo "check_quickstart: cmake still on PATH" >&2; exit 1; }

start=$(date +%s)
PATH="$work/bin" bash "$work/src/examples/quickstart.sh" >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
cat "$work/out.txt"
grep -q "quickstart: installed cmake .* from PyPI" "$work/out.txt" || { echo "check_quickstart: no word of cmake's install" >&2; exit 1; }
# The kernel library's outputs come back as each caller's type.
for line in "^numpy +in -> numpy.ndarray out: add \[11.0, 22.0, 33.0\], scale \[0.5, 1.0, 1.5\]" \
  "^torch +in -> torch.Tensor out: add \[11.0, 22.0, 33.0\]" "^dlpx +in -> dlpx.Tensor out"; do
  grep -qE "$line" "$work/out.txt" || { echo "check_quickstart: no line matching '$line'" >&2; exit 1; }
done
echo "quick start without cmake on PATH: ok in $(($(date +%s) - start)) s"

if PATH="$work/bin-no-cargo" bash "$work/src/examples/quickstart.sh" >"$work/no-cargo.txt" 2>&1; then
  echo "check_quickstart: the quick start ran without cargo" >&2
  exit 1
fi
cat "$work/no-cargo.txt"
[ "$(wc -l <"$work/no-cargo.txt")" -eq 1 ] && grep -q "needs Rust's cargo" "$work/no-cargo.txt" ||
  { echo "check_quickstart: expected one sentence naming cargo" >&2; exit 1; }
echo "quick start without cargo: refused in one sentence"
