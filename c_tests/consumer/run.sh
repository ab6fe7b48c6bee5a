#!/bin/sh
# Installs the dlpx build in $1 to a fresh prefix, then builds and runs the consumer in $3
# twice: with CMake's find_package(dlpx) and with pkg-config. Scratch space: $2.
set -eu
build=$1 work=$2 src=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
echo "== find_package(dlpx CONFIG REQUIRED)"
cmake -S "$src" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
"$work/cmake/consumer"
echo "== pkg-config --cflags --libs dlpx"
flags=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs dlpx)
echo "flags: $flags"
cc -std=c11 -Wall -Wextra -Werror "$src/consumer.c" $flags -o "$work/consumer_pc"
"$work/consumer_pc"
echo "== the installed headers include the kernel ABI"
test -f "$work/prefix/include/dlpx/kernel.h"
echo "== the installed layout has the SONAME link"
ls -l "$work/prefix/lib/" | grep libdlpx
test -e "$work/prefix/lib/libdlpx.so.0" && test -L "$work/prefix/lib/libdlpx.so"
