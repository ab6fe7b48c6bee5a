"""Runs dlpx_demo.add on tensors of every framework and prints what came back."""

import numpy as np

import dlpx
import dlpx_demo

assert dlpx_demo.table_address() == dlpx._native._exchange_api_address, "two copies of libdlpx are loaded"

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

for name, make in inputs.items():
    a, b = make([1.0, 2.0, 3.0]), make([10.0, 20.0, 30.0])
    c = dlpx_demo.add(a, b)
    print(f"{name:8s} in -> {type(c).__module__}.{type(c).__qualname__} out: {np.from_dlpack(c).tolist()}")
