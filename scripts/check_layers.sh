#!/usr/bin/env bash
# The arrows run one way (docs/design.md, "Layers"). Fails, naming file and line, when
# - a module reaches a layer above its own (bottom up: bottom, leaf (cpython), core, Python, top);
# - the Python layer's parts lean upward: arguments, capsules and the dlpx.Tensor type sit below
#   the producer seam, the seam below the kernel loader, and all of them below the module;
# - a file outside src/devices/ and src/memory/ names memory::cuda (the device seam is the way
#   to CUDA);
# - files, or sibling folders, import each other in a circle (scripts/circles.py; also the
#   shared tools/circles.py where CI keeps it beside the clone);
# - a source file is longer than 400 lines (one concept a file).
set -euo pipefail
cd "$(dirname "$0")/.."

bottom="src/abi/*.rs src/error/*.rs src/dtype.rs src/array_formats.rs src/layout.rs src/device_names.rs src/chain.rs src/validate.rs"
leaf="src/cpython/*.rs"
core="src/memory/*.rs src/memory/cuda/*.rs src/devices/*.rs src/stream.rs src/allocation/*.rs src/tensor/*.rs src/legacy.rs src/copy.rs src/kernels/*.rs src/kernels/signature/*.rs"
python="src/args.rs src/args/*.rs src/capsule.rs src/shell.rs src/tensor_type/*.rs src/producers/*.rs src/producers/rows/*.rs src/kernel_loader/*.rs src/module/*.rs"
below_the_seam="src/args.rs src/args/*.rs src/capsule.rs src/shell.rs src/tensor_type/*.rs"

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

top='crate::(exports|EXCHANGE_API)\b'
pythonic='crate::(capsule|tensor_type|producers|kernel_loader|module)\b'
forbid "$bottom" "$top|$pythonic|crate::(cpython|memory|devices|stream|allocation|tensor|legacy|copy)\b" "the bottom names a layer above it"
forbid "$leaf" "$top|$pythonic|crate::(memory|devices|stream|allocation|tensor|legacy|copy|abi|dtype|layout|device_names|chain|validate)\b" "the CPython leaf depends on error alone"
forbid "$core" "$top|$pythonic|crate::cpython\b" "the core names Python (use memory::blocking for the GIL) or the top"
forbid "$python" "$top|UNIVERSAL_API" "the Python layer names the top (it is handed dlpx's table at init)"
forbid "$below_the_seam" 'crate::(producers|kernel_loader|module)\b' "capsules and the dlpx.Tensor type are below the producer seam (the type's constructor is handed down)"
forbid "src/producers/*.rs src/producers/rows/*.rs" 'crate::(kernel_loader|module)\b' "the producer seam is below the kernel loader and the module"
forbid "src/kernel_loader/*.rs" 'crate::module\b' "the kernel loader is below the module"
# shellcheck disable=SC2046  # every source file outside the device seam and memory/
forbid "$(find src -name '*.rs' -not -path 'src/devices/*' -not -path 'src/memory/*' | sort | tr '\n' ' ')" \
  'memory::cuda\b' "only the device seam (src/devices/) names memory::cuda"

for tool in scripts/circles.py ../shared/tools/circles.py; do
  [ -f "$tool" ] || continue
  if ! circles=$(python3 "$tool" src); then
    echo "layering: files or sibling folders import each other in a circle ($tool)" >&2
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

[ $status -eq 0 ] && echo "layers: every arrow runs down, no circle of files or of sibling folders, no file over 400 lines"
exit $status
