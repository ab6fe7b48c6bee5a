#!/usr/bin/env bash
# The arrows run one way (docs/design.md, "Layers"). Fails, naming file and line, when
# - a module of src/ is in no layer of src/layers.txt (the one declaration), lib.rs lists its
#   modules out of that order, docs/design.md's layer table differs from it, or a module names a
#   layer, or a part of the Python layer, above its own (scripts/layers.py);
# - a file outside src/devices/ and src/memory/ names memory::cuda (the device seam is the way
#   to CUDA);
# - files, or sibling folders, import each other in a circle, in src/ or in python/
#   (scripts/circles.py; also the shared tools/circles.py, Rust only, where CI keeps it beside
#   the clone);
# - a source file is longer than 400 lines (one concept a file).
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
# forbid FILES PATTERN WHY: every line of FILES matching PATTERN (outside comments) is a violation.
# A file grep cannot read (a glob that matches nothing) fails too: no match there proves nothing.
forbid() {
  local files=$1 pattern=$2 why=$3 hits
  # shellcheck disable=SC2086  # the globs are meant to expand
  hits=$(grep -HnE "$pattern" $files) || [ $? -eq 1 ] || { echo "layering: grep cannot read $files" >&2; status=1; }
  hits=$(printf '%s\n' "$hits" | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
  if [ -n "$hits" ]; then
    echo "layering: $why" >&2
    echo "$hits" >&2
    status=1
  fi
}

if ! layers=$(python3 scripts/layers.py --doc docs/design.md src); then
  echo "layering: a module in no layer, or an arrow up (src/layers.txt, scripts/layers.py)" >&2
  echo "$layers" >&2
  status=1
fi
# shellcheck disable=SC2046  # every source file outside the device seam and memory/
forbid "$(find src -name '*.rs' -not -path 'src/devices/*' -not -path 'src/memory/*' | sort | tr '\n' ' ')" \
  'memory::cuda\b' "only the device seam (src/devices/) names memory::cuda"

for run in "scripts/circles.py src" "scripts/circles.py python" "../shared/tools/circles.py src"; do
  tool=${run% *} tree=${run#* }
  [ -f "$tool" ] || continue
  if ! circles=$(python3 "$tool" "$tree"); then
    echo "layering: files or sibling folders of $tree/ import each other in a circle ($tool)" >&2
    echo "$circles" >&2
    status=1
  fi
done

long=$(find src -name '*.rs' -exec wc -l {} + | awk '$2 != "total" && $1 > 400 { print "  " $2 ": " $1 " lines" }')
if [ -n "$long" ]; then
  echo "layering: a source file over 400 lines holds more than one concept; split it" >&2
  echo "$long" >&2
  status=1
fi

[ $status -eq 0 ] && echo "layers: every module in one layer (src/layers.txt), every arrow runs down, no circle of files or of sibling folders in src/ or python/, no file over 400 lines"
exit $status
