"""Loads the example kernel library (the path given, libdlpx_example_kernels.so) and runs its
`add` (C) and `scale` (typed C++) on tensors of every framework installed, printing what came
back: each framework's own type, from one library built once for every CPython."""

import sys

import numpy as np

import dlpx

lib = dlpx.load_library(sys.argv[1])

inputs = {"numpy": lambda v: np.asarray(v, dtype=np.float32), "dlpx": lambda v: dlpx.from_dlpack(np.asarray(v, dtype=np.float32))}
try:
    import torch
    inputs["torch"] = lambda v: torch.tensor(v, dtype=torch.float32)
except ImportError:
    pass
try:
    import tvm_ffi
    inputs["tvm_ffi"] = lambda v: tvm_ffi.from_dlpack(np.asarray(v, dtype=np.float32))
except ImportError:
    pass
try:
    import jax.numpy as jnp
    inputs["jax"] = lambda v: jnp.asarray(v, dtype=jnp.float32)
except ImportError:
    pass
try:
    import array_api_strict as xp
    inputs["array_api_strict"] = lambda v: xp.asarray(v, dtype=xp.float32)
except ImportError:
    pass

print(f"{lib.__name__}: {', '.join(k for k in dir(lib) if not k.startswith('_'))}; add{lib.add.__text_signature__}")
for name, make in inputs.items():
    a, b = make([1.0, 2.0, 3.0]), make([10.0, 20.0, 30.0])
    c = lib.add(a, b)
    d = lib.scale(a, alpha=0.5)
    print(f"{name:16s} in -> {type(c).__module__}.{type(c).__qualname__} out: add {np.from_dlpack(c).tolist()}, "
          f"scale {np.from_dlpack(d).tolist()}")
