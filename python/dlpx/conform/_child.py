"""The child process of `isolated.run_isolated`: python -m dlpx.conform._child PROBE SPEC."""

import sys

from .libraries import load
from .table import null_set_error_probe

PROBES = {
    "null_set_error": null_set_error_probe,
    "null_set_error_synthetic": lambda x: null_set_error_probe(x, synthetic=True),
}

if __name__ == "__main__":
    probe, spec = sys.argv[1], sys.argv[2]
    library = load(spec)
    print(PROBES[probe](library.make((2, 3), "float32")), flush=True)
