"""dlpx's example kernels (examples/kernel_library: add, nop), shipped as one py3-none wheel.

``import dlpx`` comes first: it loads libdlpx.so.0, and the kernel library beside this file,
which needs that SONAME, gets the copy already loaded (docs/kernels.md, "Shipping a kernel
library"). The kernels are this package's functions; ``__init__.pyi`` (python -m dlpx.stubgen)
types them.
"""

import os as _os

import dlpx as _dlpx

_library = _dlpx.load_library(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)),
                                            "libdlpx_example_kernels.so"))
# Every kernel, by name: a kernel added to the library needs no line here.
globals().update({_name: getattr(_library, _name) for _name in dir(_library) if not _name.startswith("_")})
