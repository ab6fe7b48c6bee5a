"""A producer for `python -m dlpx.conform --producer conform_broken_producer:make` in
test_conform.py: a copy without IS_COPIED and a stream accepted on CPU."""

import numpy as np

from test_conform import _NoFlagOnCopy


def make(shape, dtype):
    return _NoFlagOnCopy(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
