"""libFuzzer (atheris) over dlpx's Python surface: every argument a caller or a producer can
get wrong, chosen by the fuzzer.

Each input picks one operation and its arguments:

- ``dlpx.empty(shape, dtype, device)`` with shapes from values that overflow, go negative or
  are fine;
- ``Tensor.__dlpack__(max_version=, dl_device=, copy=, stream=)`` with any of them wrong, the
  capsule then imported back;
- ``dlpx.from_dlpack`` of a managed tensor (the conformance kit's reference producer) with
  every field from the fuzzer: version, ndim, shape, strides, dtype, device, flags, byte
  offset, NULL data, legacy or versioned.

What must hold: the call returns a tensor that says what was asked, or raises one of the
clean kinds (ValueError, TypeError, OverflowError, BufferError, MemoryError for a shape too
large to allocate, RuntimeError for a missing CUDA driver) with a ``dlpx:`` message; a
producer's deleter runs exactly once; nothing is left set for the next call. Anything else (another exception, a crash, an abort) is a finding.

    python fuzz/python/surface.py -runs=10000 -seed=1    # CI's short run (scripts/reliability.sh)
    python fuzz/python/surface.py -max_total_time=600    # the long run docs/reliability.md reports
"""

import ctypes
import gc
import sys

import atheris

# dlpx's Python half (and the reference producer) gets coverage instrumentation; its Rust half
# does not (no sanitizer-coverage build here): the fuzz_* functions below are instrumented so
# the choices they make guide the fuzzer, and the Rust half is fuzzed by fuzz/fuzz_targets.
with atheris.instrument_imports():
    import dlpx
    from dlpx.conform.reference import ReferenceTensor, settle

# Every fuzzed tensor points at this buffer (or at NULL): dlpx's import reads no data, so its
# size does not matter, and the reference producer allocates nothing for hostile shapes.
BUFFER = (ctypes.c_uint8 * 256)()

CLEAN = (ValueError, TypeError, OverflowError, BufferError, MemoryError, RuntimeError)

# Shape values: fine ones, and the ones that overflow an int64 byte count or are negative.
# Large fine products never occur (any big value overflows), so nothing huge is allocated.
DIMS = [0, 1, 2, 3, 7, -1, -(2**63), 2**31, 2**62, 2**63 - 1]
BIG_INTS = [0, 1, 2, 3, -1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30]
DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int64", "bool", "complex64",
          "float8_e4m3fn", "float4_e2m1fn", "int4", "", "float", "f4", "q", "float33", "int7", "uint8\x00xyz",
          "float32x1", (2, 32, 4)]  # fmt: skip
DEVICES = ["cpu", "cpu:0", "cpu:1", "cuda", "cuda:0", "cuda:-1", "pinned", "xyz", "", None, (1, 0), (1, 1), (2, 0),
           (99, 0), (1,), (1, 0, 0), 7, "cpu:", "cpu\x00xyz", "cuda:01", (1, 2**31)]  # fmt: skip
DLPACK_VALUES = [None, True, False, 0, 1, -1, 2, 2**64, "s", (1, 0), (1, 3), (2, 0), (0, 9), (1, -1), (2**70, 0),
                 (1, 0, 0), (2, 0, 0), (99, 0), ()]  # fmt: skip


def int_of(fdp, values):
    return values[fdp.ConsumeIntInRange(0, len(values) - 1)]


def expect_clean(error):
    if not isinstance(error, CLEAN):
        raise AssertionError(f"unexpected {type(error).__name__}: {error}") from error
    if not str(error).startswith("dlpx: "):
        raise AssertionError(f"{type(error).__name__} without a dlpx: message: {error!r}") from error


@atheris.instrument_func
def fuzz_empty(fdp):
    shape = tuple(int_of(fdp, DIMS) for _ in range(fdp.ConsumeIntInRange(0, 70)))
    dtype = int_of(fdp, DTYPES)
    device = int_of(fdp, DEVICES)
    try:
        t = dlpx.empty(shape, dtype=dtype, device=device)
    except Exception as e:  # noqa: BLE001 - the point is which kinds come out
        expect_clean(e)
        return
    assert t.shape == shape, (t.shape, shape)


@atheris.instrument_func
def fuzz_dlpack_arguments(fdp):
    t = dlpx.empty((2, 3))
    kwargs = {}
    for key in ("max_version", "dl_device", "copy", "stream"):
        if fdp.ConsumeBool():
            kwargs[key] = int_of(fdp, DLPACK_VALUES)
    try:
        capsule = t.__dlpack__(**kwargs)
    except Exception as e:  # noqa: BLE001
        expect_clean(e)
        return
    back = dlpx.from_dlpack(capsule)
    assert back.shape == (2, 3)


@atheris.instrument_func
def fuzz_producer(fdp):
    versioned = fdp.ConsumeBool()
    ndim_choice = fdp.ConsumeIntInRange(0, 3)
    shape = [int_of(fdp, DIMS) for _ in range(fdp.ConsumeIntInRange(0, 6))]
    # ndim is len(shape) (the shape array holds exactly that many values), or a value dlpx
    # must refuse before reading the arrays: a reader of any ndim in between would read past
    # them, which is the fuzzer's fault, not the consumer's.
    ndim = [len(shape), -1, 65, 2**31 - 1][ndim_choice]
    strides = None if fdp.ConsumeBool() else [int_of(fdp, BIG_INTS[:6]) for _ in shape]
    tensor = ReferenceTensor(
        shape=shape,
        dtype=(fdp.ConsumeIntInRange(0, 25), fdp.ConsumeIntInRange(0, 255), fdp.ConsumeIntInRange(0, 4)),
        versioned=versioned,
        version=(fdp.ConsumeIntInRange(0, 3), fdp.ConsumeIntInRange(0, 5)),
        flags=fdp.ConsumeIntInRange(0, 15),
        device=(int_of(fdp, [1, 1, 1, 2, 3, 4, 13, 99, -1]), int_of(fdp, [0, 0, 1, -1])),
        ndim=ndim,
        strides=strides,
        data=None if fdp.ConsumeIntInRange(0, 7) == 0 else ctypes.addressof(BUFFER),
        byte_offset=int_of(fdp, [0, 0, 4, 2**63]),
    )
    capsule = tensor.capsule()
    try:
        t = dlpx.from_dlpack(capsule)
    except Exception as e:  # noqa: BLE001
        if not isinstance(e, BufferError):
            raise AssertionError(f"a malformed producer gave {type(e).__name__}: {e}") from e
        expect_clean(e)
    else:
        assert t.shape == tuple(shape) and t.ndim == ndim, (t.shape, shape, ndim)
        del t
    del capsule
    gc.collect()
    settle()
    assert tensor.deleter_calls == 1, f"deleter ran {tensor.deleter_calls} times"


OPERATIONS = [fuzz_empty, fuzz_dlpack_arguments, fuzz_producer]


@atheris.instrument_func
def test_one_input(data):
    fdp = atheris.FuzzedDataProvider(data)
    OPERATIONS[fdp.ConsumeIntInRange(0, len(OPERATIONS) - 1)](fdp)
    # Nothing left set: a call that succeeds with an exception pending raises SystemError.
    assert dlpx.empty((1,)).shape == (1,)
    assert sys.exc_info() == (None, None, None)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
