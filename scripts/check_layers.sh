#!/usr/bin/env bash
# The arrows run one way (docs/design.md, "Layers"): fails, naming file and line, when a module
# reaches a layer above its own (layers, bottom up: bottom, leaf (cpython), core, python, top),
# when files import each other in a circle (between folders or inside one: scripts/circles.py),
# and when a source file is longer than 400 lines (one concept a file).
set -euo pipefail
cd "$(dirname "$0")/.."

bottom="src/abi/*.rs src/error.rs src/dtype.rs src/array_formats.rs src/layout.rs src/device.rs src/chain.rs src/validate.rs"
leaf="src/cpython/*.rs"
core="src/memory/*.rs src/memory/cuda/*.rs src/devices/*.rs src/stream.rs src/allocation/*.rs src/tensor/*.rs src/legacy.rs src/copy.rs"
python="src/python/*.rs src/python/*/*.rs"

status=0
# forbid FILES PATTERN WHY: every line of FILES matching PATTERN (outside comments) is a violation.
forbid() {
  local files=$1 pattern=$2 why=$3 hits
  # shellcheck disable=SC2086  # the globs are meant to expand
  hits=$(grep -nE "$pattern" $files | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
  if [ -n "$hits" ]; then
    echo "layering: $why" >&2
    echo "$hits" >&2
    status=1
  fi
}

upper='crate::(python|exchange|exports|EXCHANGE_API)\b|super::python'
forbid "$bottom" "$upper|crate::(cpython|memory|stream|allocation|tensor|copy)\b" "the bottom names a layer above it"
forbid "$leaf" "$upper|crate::(memory|stream|allocation|tensor|copy|abi|dtype|layout|device|chain)\b" "the CPython leaf depends on error alone"
forbid "$core" "$upper|crate::cpython\b" "the core names Python (use memory::blocking for the GIL) or the top"
forbid "$python" 'crate::(exchange|exports)\b|EXCHANGE_API|UNIVERSAL_API' "the Python layer names the top (it is handed dlpx's table at init)"

if ! circles=$(python3 scripts/circles.py src); then
  echo "layering: files import each other in a circle" >&2
  echo "$circles" >&2
  status=1
fi

long=$(find src -name '*.rs' -exec wc -l {} + | awk '$2 != "total" && $1 > 400 { print "  " $2 ": " $1 " lines" }')
if [ -n "$long" ]; then
  echo "layering: a source file over 400 lines holds more than one concept; split it" >&2
  echo "$long" >&2
  status=1
fi

[ $status -eq 0 ] && echo "layers: every arrow runs down, no circles, no file over 400 lines"
exit $status
