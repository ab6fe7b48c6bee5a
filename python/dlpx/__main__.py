"""python -m dlpx --cmakedir | --includedir | --libdir | --library | --version"""

import argparse
import os
import sys

import dlpx

_HERE = os.path.dirname(os.path.abspath(dlpx.__file__))


def _directory(what: str, marker: str, *candidates: str) -> str:
    """The first candidate holding `marker`, or SystemExit naming what is missing and why."""
    for path in candidates:
        if os.path.isfile(os.path.join(path, marker)):
            return path
    raise SystemExit(f"dlpx: no {what} at {candidates[0]}: this dlpx ({_HERE}) is not an installed package "
                     "(pip install . installs the C/C++ build files beside it)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlpx", description="Where dlpx's C/C++ build files are.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--cmakedir", action="store_true", help="directory of dlpxConfig.cmake (for CMAKE_PREFIX_PATH or dlpx_DIR)")
    group.add_argument("--includedir", action="store_true", help="directory holding dlpx/dlpx.h and dlpx/dlpack.h")
    group.add_argument("--libdir", action="store_true", help="directory holding the libdlpx shared library")
    group.add_argument("--library", action="store_true", help="path of the libdlpx shared library this package loads")
    group.add_argument("--version", action="store_true", help="the dlpx version")
    args = parser.parse_args(argv)
    if args.cmakedir:
        print(_directory("CMake package", "dlpxConfig.cmake", os.path.join(_HERE, "lib", "cmake", "dlpx")))
    elif args.includedir:
        from dlpx.cpp import include_dir  # the installed headers, else a source checkout's

        try:
            print(include_dir())
        except FileNotFoundError as err:
            raise SystemExit(str(err)) from None
    elif args.libdir:
        print(os.path.dirname(dlpx.library_path()))
    elif args.library:
        print(dlpx.library_path())
    else:
        print(dlpx.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
