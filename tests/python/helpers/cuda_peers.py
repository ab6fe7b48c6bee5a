"""The GPU peers the CUDA tests use, imported once: torch (None when missing), whether it sees a
GPU, cupy (None when missing or without a usable CUDA), and the skip marks that say why."""

import pytest

try:
    import torch

    GPU = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    torch = None
    GPU = False

try:
    import cupy
except Exception:  # ImportError, or a cupy without a usable CUDA
    cupy = None

needs_gpu = pytest.mark.skipif(not GPU, reason="no CUDA GPU (torch.cuda.is_available() is False)")
needs_cupy = pytest.mark.skipif(cupy is None, reason="cupy is not installed (or has no usable CUDA)")
