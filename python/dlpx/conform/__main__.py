"""python -m dlpx.conform LIB [LIB ...] [--producer module:function ...] [--json]"""

from __future__ import annotations

import argparse
import os
import sys

from .libraries import BUILTIN


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
    from .report import all_ok, as_json, as_text, run_library

    runs = [run_library(spec) for spec in specs]
    print(as_json(runs) if args.json else as_text(runs))
    return 0 if all_ok(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
