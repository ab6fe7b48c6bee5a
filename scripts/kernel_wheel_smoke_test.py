"""Run by scripts/check_kernel_wheel.sh in a fresh venv holding the dlpx wheel, numpy and the
example kernel wheel (examples/kernel_wheel): the kernels run with numpy and dlpx tensors, give
the right values and types, and share the process's one libdlpx (no second copy loaded)."""

import ctypes
import os
import sys
import sysconfig

import numpy as np

import dlpx
import dlpx_example_kernels as kernels

here = os.path.dirname(os.path.abspath(kernels.__file__))
assert os.path.isfile(os.path.join(here, "__init__.pyi")), "the wheel holds the stub"
for dtype in ("float32", "float64", "int32", "int64"):
    a = np.arange(6, dtype=dtype).reshape(2, 3)
    out = kernels.add(a, a[:, ::-1])  # any strides
    assert type(out) is np.ndarray and out.dtype == a.dtype, (type(out), out.dtype)
    assert out.tolist() == (a + a[:, ::-1]).tolist(), out
t = dlpx.from_dlpack(np.ones(3))
out = kernels.add(t, t)
assert type(out) is dlpx.Tensor and np.from_dlpack(out).tolist() == [2.0, 2.0, 2.0]
assert kernels.nop() is None and kernels.nop(np.ones(2), t, np.zeros((2, 2), np.int32)) is None
try:
    kernels.add(np.ones(2), "x")
except TypeError as err:
    assert "add" in str(err) and "'b'" in str(err), err
else:
    raise AssertionError("a str for a tensor is a TypeError")

class LinkMap(ctypes.Structure):
    """glibc's `struct link_map` (<link.h>): its public head."""


LinkMap._fields_ = [("l_addr", ctypes.c_void_p), ("l_name", ctypes.c_char_p), ("l_ld", ctypes.c_void_p),
                    ("l_next", ctypes.POINTER(LinkMap)), ("l_prev", ctypes.POINTER(LinkMap))]


def loaded_objects():
    """The paths of every shared object loaded, as the dynamic linker lists them (dlinfo's
    RTLD_DI_LINKMAP: no /proc needed, which the chroot of plain 3.14/3.15 has not)."""
    libc = ctypes.CDLL(None)
    libc.dlopen.restype = ctypes.c_void_p
    libc.dlinfo.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    head = ctypes.POINTER(LinkMap)()
    assert libc.dlinfo(libc.dlopen(None, 1), 2, ctypes.byref(head)) == 0, "dlinfo(RTLD_DI_LINKMAP)"
    while head:
        if head.contents.l_name:
            yield head.contents.l_name.decode()
        head = head.contents.l_next


loaded = {os.path.realpath(p) for p in loaded_objects() if os.path.basename(p).startswith("libdlpx.so")}
assert loaded == {os.path.realpath(dlpx.library_path())}, f"one libdlpx, dlpx's: {loaded}"
free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
assert not (free_threaded and sys._is_gil_enabled()), "the kernels enabled the GIL"
gil = "free-threaded, GIL disabled" if free_threaded else "GIL"
print(f"CPython {sys.version.split()[0]} ({gil}): {kernels.__name__} ok (add x4 dtypes, nop), "
      f"libdlpx {dlpx.library_path()}")
