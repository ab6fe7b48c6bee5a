"""Smoke test of an installed dlpx (the wheel) on one CPython: the CPU paths with numpy, and with
tvm_ffi where it is installed (it has no wheels for some CPythons). Run by check_wheel_pythons.sh
outside the source tree, so the dlpx imported is the installed one."""

import os
import subprocess
import sys

import numpy as np

import dlpx

site = os.path.dirname(os.path.dirname(dlpx.__file__))
assert os.path.basename(site) == "site-packages", f"dlpx imported from {dlpx.__file__}, not an installed wheel"
assert dlpx.library_path() == os.path.join(site, "dlpx", "lib", "libdlpx.so.0"), dlpx.library_path()

# dlpx's allocator seen by numpy, and numpy's array through dlpx and back: one buffer, no copies.
# (numpy before 2.1, the newest for CPython 3.9, imports every DLPack tensor read-only, so the
# writes go to numpy's own array.)
t = dlpx.empty((2, 3), dtype="float32")
assert t.data_ptr % 256 == 0 and t.shape == (2, 3) and t.strides == (3, 1) and t.device == "cpu"
a = np.from_dlpack(t)
assert a.ctypes.data == t.data_ptr and a.shape == (2, 3) and a.dtype == np.float32
src = np.arange(6, dtype=np.float32).reshape(2, 3)
back = np.from_dlpack(dlpx.from_dlpack(src))
src[1, 2] = 50
assert back.ctypes.data == src.ctypes.data and back[1, 2] == 50

# numpy's tensors in dlpx: a strided view without a copy, then an explicit copy.
n = np.arange(12.0).reshape(3, 4)[:, ::2]
v = dlpx.from_dlpack(n)
assert v.data_ptr == n.ctypes.data and v.strides == (4, 2) and v.dtype == "float64", v
c = dlpx.from_dlpack(n, copy=True)
assert c.data_ptr != n.ctypes.data and not c.readonly
np.testing.assert_array_equal(np.from_dlpack(c), n)

# The versioned capsule and dlpx's exchange table.
u = dlpx.from_dlpack(t.__dlpack__(max_version=(1, 3)))
assert u.data_ptr == t.data_ptr
info = dlpx.exchange_api_info(dlpx.Tensor)
assert info is not None and tuple(info["version"]) == (1, 3), info

try:
    import tvm_ffi
except ImportError:
    peer = "tvm_ffi not installed"
else:
    x = tvm_ffi.from_dlpack(t)
    assert x.data_ptr() == t.data_ptr
    y = dlpx.from_dlpack(tvm_ffi.from_dlpack(np.arange(5, dtype=np.int32)))
    assert np.from_dlpack(y)[4] == 4
    peer = f"tvm_ffi {tvm_ffi.__version__}"

# What a C/C++ build of a kernel extension needs is in the wheel.
def where(flag):
    return subprocess.run([sys.executable, "-m", "dlpx", flag], capture_output=True, text=True, check=True).stdout.strip()

for path in (os.path.join(where("--cmakedir"), "dlpxConfig.cmake"), os.path.join(where("--includedir"), "dlpx", "dlpx.hpp"),
             os.path.join(where("--includedir"), "dlpx", "kernel.h"),
             os.path.join(where("--libdir"), "pkgconfig", "dlpx.pc")):
    assert os.path.isfile(path), f"missing from the wheel: {path}"

print(f"CPython {sys.version.split()[0]}: ok (dlpx {dlpx.__version__}, numpy {np.__version__}, {peer})")
