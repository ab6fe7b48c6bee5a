#!/bin/sh
# Installs the dlpx build in $1 to a fresh prefix, then builds and runs the consumer in $3
# twice: with CMake's find_package(dlpx) and with pkg-config (merged with another package whose
# flags use -Xlinker, which pkg-config drops when repeated). Scratch space: $2.
set -eu
build=$1 work=$2 src=$3
prefix="$work/prefix"
rm -rf "$work" && mkdir -p "$work"
printf 'Name: other\nDescription: a package linked beside dlpx\nVersion: 1\nLibs: -Xlinker --as-needed\n' > "$work/other.pc"
cmake --install "$build" --prefix "$prefix" >/dev/null
echo "== find_package(dlpx CONFIG REQUIRED)"
cmake -S "$src" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
"$work/cmake/consumer"
echo "== pkg-config --cflags --libs dlpx"
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$work" pkg-config --cflags --libs dlpx other)
echo "flags: $flags"
cc -std=c11 -Wall -Wextra -Werror "$src/consumer.c" $flags -o "$work/consumer_pc"
"$work/consumer_pc"
echo "== the installed headers include the kernel ABI"
test -f "$prefix/include/dlpx/kernel.h"
echo "== the installed layout has the SONAME link"
ls -l "$prefix/lib/" | grep libdlpx
test -e "$prefix/lib/libdlpx.so.0" && test -L "$prefix/lib/libdlpx.so"
