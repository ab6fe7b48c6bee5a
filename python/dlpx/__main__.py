"""python -m dlpx --cmakedir | --includedir | --libdir | --library | --version"""

import argparse
import os
import sys

import dlpx

_HERE = os.path.dirname(os.path.abspath(dlpx.__file__))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlpx", description="Where dlpx's C/C++ build files are.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--cmakedir", action="store_true", help="directory of dlpxConfig.cmake (for CMAKE_PREFIX_PATH or dlpx_DIR)")
    group.add_argument("--includedir", action="store_true", help="directory holding dlpx/dlpx.h and dlpx/dlpack.h")
    group.add_argument("--libdir", action="store_true", help="directory holding the libdlpx shared library")
    group.add_argument("--library", action="store_true", help="path of the libdlpx shared library this package loads")
    group.add_argument("--version", action="store_true", help="the dlpx version")
    args = parser.parse_args(argv)
    # dlpx.cpp knows where the installed build files are (and a source checkout's headers).
    from dlpx.cpp import _installed_directory, include_dir

    try:
        if args.cmakedir:
            print(_installed_directory("CMake package", "dlpxConfig.cmake", os.path.join(_HERE, "lib", "cmake", "dlpx")))
        elif args.includedir:
            print(include_dir())
        elif args.libdir:
            print(os.path.dirname(dlpx.library_path()))
        elif args.library:
            print(dlpx.library_path())
        else:
            print(dlpx.__version__)
    except FileNotFoundError as err:
        raise SystemExit(str(err)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
