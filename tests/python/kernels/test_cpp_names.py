"""The C++ layer's printable names (include/dlpx/cpp/dtype.hpp: `dlpx::dtype_name`,
`dlpx::device_name`) are the Python side's (`dlpx.Tensor.dtype`, `.device`), compared over every
dtype code DLPack names and many widths and lanes, and every device type: a kernel's error message
and Python's say the same."""

import os

import pytest

import c_build
import dlpx

CODES = range(19)
WIDTHS = (1, 2, 4, 6, 7, 8, 16, 32, 33, 64, 128)
LANES = (1, 2, 4)
PROGRAM = r"""
#include <dlpx/dlpx.hpp>
#include <cstdio>
#include <cstring>
int main() {
  const int widths[] = {WIDTHS_HERE};
  const int lanes[] = {LANES_HERE};
  for (int code = 0; code < 19; ++code)
    for (int bits : widths)
      for (int l : lanes) {
        DLDataType d{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(l)};
        std::printf("dtype %d %d %d %s\n", code, bits, l, dlpx::dtype_name(d).c_str());
      }
  for (int32_t type = 0; type < 20; ++type) {
    DLDevice d{};
    std::memcpy(&d.device_type, &type, sizeof type);
    d.device_id = 3;
    std::printf("device %d %s\n", type, dlpx::device_name(d).c_str());
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def printed(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cpp_names")
    source = directory / "names.cpp"
    source.write_text(PROGRAM.replace("WIDTHS_HERE", ", ".join(map(str, WIDTHS)))
                      .replace("LANES_HERE", ", ".join(map(str, LANES))))
    program = str(directory / "names")
    try:
        done = c_build.build("c++", [str(source)], program)
    except c_build.NoCompiler as missing:
        c_build.skip_or_fail(str(missing))
    assert done.returncode == 0, c_build.failure(done)
    import subprocess

    lines = subprocess.run([program], capture_output=True, text=True, check=True).stdout.splitlines()
    return [line.split() for line in lines]


def test_every_dtype_python_names_is_named_alike_in_cpp(printed):
    compared = 0
    for kind, code, bits, lanes, name in (row for row in printed if row[0] == "dtype"):
        try:
            python = dlpx.empty((0,), dtype=(int(code), int(bits), int(lanes))).dtype
        except (ValueError, TypeError):
            continue  # no tensor of it: Python prints no name to compare
        assert name == python, (code, bits, lanes)
        compared += 1
    assert compared > 100


def test_every_device_type_is_named_alike_in_cpp(printed):
    names = dict((int(row[1]), row[2]) for row in printed if row[0] == "device")
    assert names[1] == "cpu:3" and names[2] == "cuda:3"
    for type_, name in names.items():
        try:
            python = str(dlpx.Device(type_, 3))
        except (ValueError, TypeError):
            assert name.startswith("device(type="), (type_, name)
            continue
        assert name == python, type_
