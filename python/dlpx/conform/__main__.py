"""python -m dlpx.conform LIB [LIB ...] [--producer module:function ...] [--json]

Exit status: 0 every required check passed; 1 a required check failed; 2 nothing was checked: a
library, module or function that does not exist, or a built-in library whose peer is not usable
here (one line each on stderr), or a bad command line (argparse's own 2). A CI job that names a
typo fails instead of passing on an empty run.
"""

from __future__ import annotations

import argparse
import os
import sys

from .libraries import BUILTIN, Unavailable, load

NOT_CHECKED = 2


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlpx.conform", description="Check DLPack producers and consumers against the spec.")
    parser.add_argument("libraries", nargs="*", help=f"built-in: {', '.join(BUILTIN)}")
    parser.add_argument("--producer", action="append", default=[], metavar="MODULE:FUNCTION", help="function(shape, dtype_name) returning an array; repeatable")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    specs = list(args.libraries) + list(args.producer)
    if not specs:
        parser.error("name at least one library or --producer")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the checks are CPU checks; no accelerator probing
    libraries, missing = [], []
    for spec in specs:
        try:
            libraries.append(load(spec))
        except Unavailable as exc:
            missing.append(str(exc))
    if missing:  # before any check runs: a partial run must not read as a verdict
        for why in missing:
            print(f"dlpx: conform: {why}", file=sys.stderr)
        return NOT_CHECKED
    from .report import all_ok, as_json, as_text, run_library

    runs = [run_library(library) for library in libraries]
    print(as_json(runs) if args.json else as_text(runs))
    return 0 if all_ok(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
