"""Arguments as users pass them (docs/python.md, "Arguments"): every spelling of a dtype and of a
device that dlpx reads, each peer's own objects among them (numpy, ml_dtypes, jax, torch,
tvm_ffi), every refusal with its kind and the value named, and one parser behind
dlpx.empty, dlpx.from_dlpack, dlpx.Tensor and dlpx.Device.parse."""

import numpy as np
import pytest

# Every spelling is held against each real peer: the module needs them all (the free-threaded
# runs lack torch and jax, and skip it; CI's main run requires them, DLPX_REQUIRE_ALL_TESTS).
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")
tvm_ffi = pytest.importorskip("tvm_ffi")

import dlpx  # noqa: E402
from test_tensor import DTYPES as DTYPES_1_3  # noqa: E402

# Each dtype name dlpx reads, as (code, bits, lanes): DLPack 1.3's (test_tensor.DTYPES), the
# widths the peers name besides (ml_dtypes' and tvm_ffi's int1/2/4, torch's complex32, TVM's
# handle), DLPack's code after 1.3, lanes, and two peers' names for what dlpx names otherwise.
NAMES = {
    **DTYPES_1_3,
    **{f"int{b}": (0, b, 1) for b in (1, 2, 4)},
    **{f"uint{b}": (1, b, 1) for b in (1, 2, 4)},
    "handle64": (3, 64, 1),
    "complex32": (5, 32, 1),
    "bcomplex32": (18, 32, 1),
    "float32x4": (2, 32, 4),
    "bfloat16x2": (4, 16, 2),
    "int8x65535": (0, 8, 65535),
    "handle": (3, 64, 1),
    "float4_e2m1fn_x2": (17, 4, 2),
}

NUMPY_TYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
               np.float16, np.float32, np.float64, np.complex64, np.complex128]  # fmt: skip
ML_DTYPES = ["bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
             "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
             "int1", "int2", "int4", "uint1", "uint2", "uint4", "complex32", "bcomplex32"]  # fmt: skip
JAX_TYPES = ["bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
             "float64", "complex64", "complex128", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
             "float4_e2m1fn", "int4", "uint4"]  # fmt: skip
TORCH_TYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
               "float32", "float64", "bfloat16", "complex32", "complex64", "complex128", "float8_e4m3fn",
               "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2"]  # fmt: skip


def named(dtype):
    """The name dlpx reads for a numpy or ml_dtypes dtype (numpy's name: bool, not bool_)."""
    return NAMES[np.dtype(dtype).name]


# id -> (a function making the spelling, the (code, bits, lanes) it means, the peer whose tensor
# of that dtype dlpx must read the same, or None).
DTYPES = {
    **{f"name {n}": (lambda n=n: n, t, None) for n, t in NAMES.items()},
    "triple": (lambda: (2, 32, 1), (2, 32, 1), None),
    "triple as a list": (lambda: [2, 32, 1], (2, 32, 1), None),
    "triple of numpy ints": (lambda: (np.uint8(2), np.int64(32), 1), (2, 32, 1), None),
    "triple of a width no name has": (lambda: (0, 7, 1), (0, 7, 1), None),
    **{f"numpy {t.__name__}": (lambda t=t: t, named(t), "numpy") for t in NUMPY_TYPES},
    **{f"numpy dtype {np.dtype(t).str}": (lambda t=t: np.dtype(t), named(t), "numpy") for t in NUMPY_TYPES},
    "numpy dtype '=f4'": (lambda: np.dtype("=f4"), (2, 32, 1), "numpy"),
    "numpy array's dtype": (lambda: np.zeros(2, np.float16).dtype, (2, 16, 1), "numpy"),
    **{f"ml_dtypes {n}": (lambda n=n: getattr(ml_dtypes, n), NAMES[n], "numpy") for n in ML_DTYPES},
    **{f"ml_dtypes dtype {n}": (lambda n=n: np.dtype(getattr(ml_dtypes, n)), NAMES[n], "numpy") for n in ML_DTYPES},
    **{f"jnp.{n}": (lambda n=n: getattr(jnp, n), named(getattr(jnp, n)), "jax") for n in JAX_TYPES},
    "jnp.dtype('bfloat16')": (lambda: jnp.dtype("bfloat16"), (4, 16, 1), "jax"),
    "jax array's dtype": (lambda: jnp.zeros(2, jnp.bfloat16).dtype, (4, 16, 1), "jax"),
    **{f"torch.{n}": (lambda n=n: getattr(torch, n), NAMES[n], "torch") for n in TORCH_TYPES},
    **{f"tvm_ffi {n}": (lambda n=n: tvm_ffi.dtype(n), NAMES[n], "tvm_ffi")
       for n in ["bool", "int4", "uint1", "int64", "float16", "bfloat16", "float8_e4m3fn", "float4_e2m1fn",
                 "float6_e3m2fn", "float32x4", "handle"]},  # fmt: skip
}


@pytest.mark.parametrize("case", sorted(DTYPES))
def test_every_dtype_spelling_means_its_dlpack_dtype(case):
    make, expected, _ = DTYPES[case]
    assert dlpx.empty((2, 3), dtype=make()).dtype_raw == expected
    assert dlpx.empty((2, 3), make()).dtype_raw == expected


def peer_tensor(peer, dtype):
    """A tensor of `dtype` made by the peer it belongs to; None where the peer makes none, or one
    of another dtype (jax without x64 makes int32 of int64)."""
    try:
        if peer == "torch":
            return torch.empty(2, dtype=dtype)
        tensor = (np if peer == "numpy" else jnp).zeros(2, dtype)
    except (TypeError, ValueError, RuntimeError):
        return None
    return tensor if tensor.dtype == np.dtype(dtype) else None


@pytest.mark.parametrize("case", sorted(c for c, (_, _, peer) in DTYPES.items() if peer in ("numpy", "jax", "torch")))
def test_a_peer_dtype_reads_as_dlpx_tensor_reads_that_peer_s_tensor_of_it(case):
    # One reading: what dlpx.empty makes of a peer's dtype object is what dlpx.Tensor reads from
    # that peer's tensor of it, where the peer exports one (numpy exports no ml_dtypes dtype,
    # jax no int4: DLPack has no name for theirs, or they refuse).
    make, expected, peer = DTYPES[case]
    tensor = peer_tensor(peer, make())
    if tensor is None:
        pytest.skip(f"{peer} makes no tensor of this dtype")
    try:
        read = dlpx.Tensor(tensor).dtype_raw
    except (BufferError, TypeError, RuntimeError) as refused:
        pytest.skip(f"{peer} exports no tensor of this dtype: {refused}")
    assert read == expected


@pytest.mark.parametrize("name", ["bool", "int4", "uint1", "uint64", "float16", "bfloat16", "float8_e5m2",
                                  "float6_e2m3fn", "float4_e2m1fn", "float32x4", "handle"])  # fmt: skip
def test_a_tvm_ffi_dtype_reads_as_tvm_ffi_reads_itself(name):
    dtype = tvm_ffi.dtype(name)
    assert dlpx.empty((1,), dtype).dtype_raw == (int(dtype.type_code), dtype.bits, dtype.lanes)


def test_every_name_dlpx_prints_for_a_named_dtype_reads_back():
    for name, raw in NAMES.items():
        printed = dlpx.empty((1,), raw).dtype
        assert dlpx.empty((1,), printed).dtype_raw == raw, (name, printed)


# id -> (a function making the spelling, the exception, a text the message holds: the value).
DTYPE_REFUSALS = {
    "float33": (lambda: "float33", ValueError, "'float33'"),
    "int7": (lambda: "int7", ValueError, "'int7'"),
    "int255": (lambda: "int255", ValueError, "'int255'"),
    "bfloat15": (lambda: "bfloat15", ValueError, "'bfloat15'"),
    "uint128": (lambda: "uint128", ValueError, "'uint128'"),
    "float8": (lambda: "float8", ValueError, "'float8'"),
    "name with NUL": (lambda: "uint8\x00xyz", ValueError, r"'uint8\x00xyz'"),
    "name ending in NUL": (lambda: "float32\x00", ValueError, r"'float32\x00'"),
    "leading zero": (lambda: "int08", ValueError, "'int08'"),
    "one lane": (lambda: "float32x1", ValueError, "'float32x1'"),
    "signed lanes": (lambda: "float32x+4", ValueError, "'float32x+4'"),
    "lanes past 16 bits": (lambda: "float32x65536", ValueError, "'float32x65536'"),
    "capitals": (lambda: "Float32", ValueError, "'Float32'"),
    "space": (lambda: " float32", ValueError, "' float32'"),
    "numpy's letter code": (lambda: "f4", ValueError, "'f4'"),
    "empty name": (lambda: "", ValueError, "''"),
    "tvm_ffi int7": (lambda: tvm_ffi.dtype("int7"), ValueError, "int7"),
    "big-endian numpy dtype": (lambda: np.dtype(">f4"), ValueError, "native byte order"),
    "numpy str dtype": (lambda: np.dtype("U5"), ValueError, "<U5"),
    "numpy structured dtype": (lambda: np.dtype([("a", "f4")]), ValueError, "'a'"),
    "numpy longdouble": (lambda: np.longdouble, ValueError, "float128"),
    "numpy object": (lambda: np.object_, ValueError, "dtype('O')"),
    "torch.int4": (lambda: torch.int4, ValueError, "torch.int4"),
    "torch.uint7": (lambda: torch.uint7, ValueError, "torch.uint7"),
    "torch.qint8": (lambda: torch.qint8, ValueError, "torch.qint8"),
    "Python float": (lambda: float, TypeError, "<class 'float'>"),
    "a float": (lambda: 2.5, TypeError, "2.5"),
    "an object": (lambda: object(), TypeError, "object object"),
    "an int": (lambda: 5, TypeError, "dtype=5:"),
    "a pair": (lambda: (2, 32), TypeError, "not 2"),
    "four integers": (lambda: (2, 32, 1, 1), TypeError, "not 4"),
    "code past 8 bits": (lambda: (256, 8, 1), ValueError, "(256, 8, 1)"),
    "negative lanes": (lambda: (2, 32, -1), ValueError, "(2, 32, -1)"),
    "a triple of floats": (lambda: (2.0, 32, 1), TypeError, "dtype[0]"),
}


@pytest.mark.parametrize("case", sorted(DTYPE_REFUSALS))
def test_every_dtype_refusal_has_its_kind_and_names_the_value(case):
    make, kind, text = DTYPE_REFUSALS[case]
    with pytest.raises(kind) as info:
        dlpx.empty((2,), dtype=make())
    message = str(info.value)
    assert message.startswith("dlpx: empty: "), message
    assert text in message, message


@pytest.mark.parametrize("case", ["float33", "name with NUL", "numpy str dtype", "Python float", "an object"])
def test_a_dtype_refusal_lists_what_is_accepted(case):
    make, kind, _ = DTYPE_REFUSALS[case]
    with pytest.raises(kind) as info:
        dlpx.empty((2,), dtype=make())
    message = str(info.value)
    for accepted in ("int1/2/4/8/16/32/64", "float16/32/64", "bfloat16", "float8_e4m3fn", "complex32/64/128",
                     "float32x4", "(code, bits, lanes)", "numpy, torch, jax, ml_dtypes or tvm_ffi"):  # fmt: skip
        assert accepted in message, (accepted, message)


# ---- devices ----------------------------------------------------------------------------------


class JaxGpuShaped:
    """Stands in for a jax GPU device where no GPU is (the real CPU device is tested too): the
    attributes jax's own __dlpack_device__ reads."""

    def __init__(self, platform, version, local_hardware_id):
        self.platform, self.local_hardware_id = platform, local_hardware_id
        self.client = type("Client", (), {"platform_version": version})()


class CupyShaped:
    """Stands in for cupy.cuda.Device where cupy is not installed (test_cupy_device_reads_as_cuda
    takes the real one)."""

    def __init__(self, index):
        self.id, self.compute_capability = index, "90"


# id -> (a function making the spelling, the (device_type, device_id) it means).
DEVICES = {
    **{f"name {n}": (lambda n=n: n, (t, 0)) for t, n in dlpx._native.DEVICE_TYPE_NAMES.items()},
    **{f"name {n}:3": (lambda n=n: f"{n}:3", (t, 3)) for t, n in dlpx._native.DEVICE_TYPE_NAMES.items()},
    "name cpu:0": (lambda: "cpu:0", (1, 0)),
    "name cuda:2147483647": (lambda: "cuda:2147483647", (2, 2**31 - 1)),
    "pair": (lambda: (1, 0), (1, 0)),
    "pair as a list": (lambda: [2, 1], (2, 1)),
    "pair of numpy ints": (lambda: (np.int32(2), np.int64(1)), (2, 1)),
    "dlpx.Device": (lambda: dlpx.Device(2, 1), (2, 1)),
    "torch cpu": (lambda: torch.device("cpu"), (1, 0)),
    "torch cpu 0": (lambda: torch.device("cpu", 0), (1, 0)),
    "torch cuda:1": (lambda: torch.device("cuda:1"), (2, 1)),
    "torch cuda, 2": (lambda: torch.device("cuda", 2), (2, 2)),
    "torch xpu:2": (lambda: torch.device("xpu:2"), (14, 2)),
    "torch mps:0": (lambda: torch.device("mps:0"), (8, 0)),
    "torch maia:1": (lambda: torch.device("maia:1"), (17, 1)),
    "jax cpu": (lambda: jax.devices("cpu")[0], (1, 0)),
    "jax-shaped cuda gpu": (lambda: JaxGpuShaped("gpu", "cuda 12.8", 1), (2, 1)),
    "jax-shaped rocm gpu": (lambda: JaxGpuShaped("gpu", "rocm 6.4", 0), (10, 0)),
    "jax-shaped tpu": (lambda: JaxGpuShaped("tpu", "tpu", 3), (19, 3)),
    "cupy-shaped device": (lambda: CupyShaped(1), (2, 1)),
    "tvm_ffi cpu": (lambda: tvm_ffi.device("cpu"), (1, 0)),
    "tvm_ffi cuda:1": (lambda: tvm_ffi.device("cuda:1"), (2, 1)),
    "tvm_ffi rocm, 2": (lambda: tvm_ffi.device("rocm", 2), (10, 2)),
    "tvm_ffi metal": (lambda: tvm_ffi.device("metal:1"), (8, 1)),
}


@pytest.mark.parametrize("case", sorted(DEVICES))
def test_every_device_spelling_means_its_dlpack_device(case):
    make, expected = DEVICES[case]
    parsed = dlpx.Device.parse(make())
    assert type(parsed) is dlpx.Device
    assert parsed == expected
    assert dlpx.Device.parse(str(parsed)) == parsed
    assert eval(repr(parsed), {"dlpx": dlpx}) == parsed


@pytest.mark.parametrize("case", sorted(c for c, (_, expected) in DEVICES.items() if expected == (1, 0)))
def test_empty_from_dlpack_and_tensor_read_a_cpu_device_as_device_parse_does(case):
    make, expected = DEVICES[case]
    assert dlpx.empty((2,), device=make()).device == expected
    assert dlpx.from_dlpack(np.zeros(2), device=make()).device == expected
    assert dlpx.Tensor(torch.zeros(2, device="cpu")).device == dlpx.Device.parse(make())


def test_cupy_device_reads_as_cuda():
    cupy = pytest.importorskip("cupy")
    assert dlpx.Device.parse(cupy.cuda.Device(0)) == (10 if cupy.cuda.runtime.is_hip else 2, 0)


# id -> (a function making the spelling, the exception, a text the message holds).
DEVICE_REFUSALS = {
    "cpu:": (lambda: "cpu:", ValueError, "'cpu:'"),
    "cuda:01": (lambda: "cuda:01", ValueError, "'cuda:01'"),
    "cuda:+1": (lambda: "cuda:+1", ValueError, "'cuda:+1'"),
    "cuda:-1": (lambda: "cuda:-1", ValueError, "'cuda:-1'"),
    "cuda: 1": (lambda: "cuda: 1", ValueError, "'cuda: 1'"),
    "a digit that is not ASCII": (lambda: "cuda:\u0661", ValueError, "'cuda:\u0661'"),
    "cuda:2147483648": (lambda: "cuda:2147483648", ValueError, "'cuda:2147483648'"),
    "name with NUL": (lambda: "cpu\x00xyz", ValueError, r"'cpu\x00xyz'"),
    "id with NUL": (lambda: "cpu:0\x00", ValueError, r"'cpu:0\x00'"),
    "gpu": (lambda: "gpu", ValueError, "'gpu'"),
    "CPU": (lambda: "CPU", ValueError, "'CPU'"),
    "empty name": (lambda: "", ValueError, "''"),
    "unknown type": (lambda: (99, 0), ValueError, "(99, 0)"),
    "type DLPack skips": (lambda: (5, 0), ValueError, "(5, 0)"),
    "negative id": (lambda: (1, -1), ValueError, "(1, -1)"),
    "id past 31 bits": (lambda: (2, 2**31), ValueError, "(2, 2147483648)"),
    "one integer": (lambda: 7, TypeError, "got one integer"),
    "three integers": (lambda: (1, 0, 0), TypeError, "got 3 integers"),
    "a name and an id": (lambda: ("cpu", 0), TypeError, "device[0]"),
    "a float": (lambda: 2.5, TypeError, "2.5"),
    "an object": (lambda: object(), TypeError, "object object"),
    "torch cuda without an index": (lambda: torch.device("cuda"), ValueError, "current device"),
    "torch meta": (lambda: torch.device("meta"), ValueError, "'meta'"),
    "jax-shaped unknown platform": (lambda: JaxGpuShaped("metal", "metal", 0), ValueError, "'metal'"),
}


def refusal(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("case", sorted(DEVICE_REFUSALS))
def test_every_device_refusal_is_the_same_in_empty_from_dlpack_and_device_parse(case):
    make, kind, text = DEVICE_REFUSALS[case]
    device = make()
    answers = {
        "empty": refusal(lambda: dlpx.empty((2,), device=device)),
        "from_dlpack": refusal(lambda: dlpx.from_dlpack(np.zeros(2), device=device)),
        "Device.parse": refusal(lambda: dlpx.Device.parse(device)),
    }
    facts = set()
    for entry, (raised, message) in answers.items():
        assert raised is kind, (entry, raised, message)
        assert message.startswith(f"dlpx: {entry}: "), message
        facts.add(message.removeprefix(f"dlpx: {entry}: "))
    assert len(facts) == 1, facts
    fact = facts.pop()
    assert text in fact, fact


@pytest.mark.parametrize("case", ["cpu:", "name with NUL", "an object"])
def test_a_device_refusal_lists_what_is_accepted(case):
    make, kind, _ = DEVICE_REFUSALS[case]
    with pytest.raises(kind) as info:
        dlpx.Device.parse(make())
    message = str(info.value)
    for accepted in ("cpu, cuda, cuda_host", "cuda:1", "(device_type, device_id) pair", "dlpx.Device",
                     "tvm_ffi, jax, cupy or torch device"):  # fmt: skip
        assert accepted in message, (accepted, message)


def test_device_equality_with_a_name_reads_the_name_as_parse_does():
    assert dlpx.Device(1, 0) == "cpu" == dlpx.Device(1, 0)
    assert dlpx.Device(1, 0) != "cpu:"
    assert dlpx.Device(2, 1) != "cuda:01"
    assert dlpx.Device(1, 0) != "cpu\x00xyz"


@pytest.mark.parametrize("device", [dlpx.Device(1, 0), dlpx.Device(2, 1), dlpx.Device(21, 7), dlpx.Device(99, 0)])
def test_device_repr_is_an_expression_that_makes_it_again(device):
    assert repr(device) == f"dlpx.Device({device.device_type}, {device.device_id})"
    assert eval(repr(device), {"dlpx": dlpx}) == device
