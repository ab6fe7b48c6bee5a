#!/usr/bin/env bash
# The arrows run one way (docs/design.md, "Layers"): fails, naming file and line, when a module
# reaches a layer above its own. Layers, bottom up: bottom, leaf (cpython), core, python, top.
set -euo pipefail
cd "$(dirname "$0")/.."

bottom="src/abi/*.rs src/error.rs src/dtype.rs src/layout.rs src/device.rs src/chain.rs src/validate.rs"
leaf="src/cpython/*.rs"
core="src/memory/*.rs src/memory/cuda/*.rs src/devices/*.rs src/stream.rs src/allocation/*.rs src/tensor/*.rs src/legacy.rs src/copy.rs"
python="src/python/*.rs"

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

[ $status -eq 0 ] && echo "layers: every arrow runs down"
exit $status
