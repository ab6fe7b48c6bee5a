"""A pytest plugin for scripts/gpu_check.sh (`-p dlpx_accounting`): at the session's end, after
a garbage collection, the device's work and `dlpx.cuda.empty_cache()`, writes what dlpx still
holds of CUDA device 0 (its own accounting, `dlpx.cuda.memory_stats`) to the file
DLPX_ACCOUNTING_FILE names. compute-sanitizer's leak check then says which memory is left at
exit; dlpx's accounting says whether any of it is dlpx's."""

import gc
import json
import os

import dlpx


def pytest_sessionfinish(session):
    path = os.environ.get("DLPX_ACCOUNTING_FILE")
    if not path or not dlpx.cuda.is_available():
        return
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except ImportError:
        pass
    dlpx.cuda.empty_cache()
    stats = dlpx.cuda.memory_stats(0)
    keys = ("allocated_bytes.all.current", "reserved_bytes.all.current", "num_device_alloc", "num_device_free")
    with open(path, "w") as f:
        json.dump({k: stats[k] for k in keys}, f)
