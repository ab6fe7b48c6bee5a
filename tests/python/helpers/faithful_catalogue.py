"""The catalogue of awkward tensors the faithful-import test (test_faithful_import.py) holds dlpx
to, per producer: each case makes a tensor and says what it means, in bytes, computed with the
producer's own methods (`resolve_conj()`, `to_dense()`, `np.asarray`, ...) — or, where the tensor
is dlpx's or wraps memory another library made (tvm_ffi's), from a second source: the numpy array
or torch tensor it was made from, built again, or the byte pattern written into it. Never from an
export of the tensor itself."""

from __future__ import annotations

import ctypes
import importlib.util
import math
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from dlpx.conform import abi
import dlpx

HUGE = 2**40  # elements: only a broadcast view has this many; its description is compared, not its bytes


@dataclass
class Case:
    producer: str
    name: str
    make: Callable[[], Any]
    # The bytes the tensor means, in row-major order (None: no values to speak of, e.g. meta),
    # computed from the object `make` returned.
    meaning: Optional[Callable[[Any], Optional[bytes]]]


def raw_bytes(dl: dict, flags: int = 0) -> Optional[bytes]:
    """The bytes a described CPU tensor holds, row-major (None for a huge broadcast view)."""
    numel = math.prod(dl["shape"])
    code, bits, lanes = dl["dtype"]
    if numel == 0:
        return b""
    if numel > 1 << 24:
        return None
    element_bits = bits * lanes
    base = dl["data"] + dl["byte_offset"]
    if element_bits < 8 and not flags & abi.FLAG_IS_SUBBYTE_TYPE_PADDED:
        compact = dl["strides"] == tuple(compact_strides(dl["shape"]))
        assert compact, "a strided packed sub-byte tensor has no byte layout"
        return ctypes.string_at(base, (numel * element_bits + 7) // 8)
    item = max(element_bits // 8, 1)
    offsets = [s * item for s in dl["strides"]]
    low = sum(o * (n - 1) for o, n in zip(offsets, dl["shape"]) if o < 0)
    high = sum(o * (n - 1) for o, n in zip(offsets, dl["shape"]) if o > 0) + item
    buffer = (ctypes.c_uint8 * (high - low)).from_address(base + low)
    array = np.frombuffer(buffer, dtype=np.dtype((np.void, item)))
    view = np.lib.stride_tricks.as_strided(array[-low // item:], shape=dl["shape"], strides=offsets)
    return view.tobytes()


def sub_byte_bits(dtype) -> Optional[int]:
    """The bit width of an ml_dtypes sub-byte type (float4_e2m1fn, int4, ...), stored a byte each."""
    import ml_dtypes

    for info in (ml_dtypes.finfo, ml_dtypes.iinfo):
        try:
            bits = info(dtype).bits
        except (TypeError, ValueError):
            continue
        return bits if bits < 8 else None
    return None


def packed(codes: np.ndarray, bits: int) -> bytes:
    """Elements of `bits` bits (one a byte in `codes`) packed as DLPack packs them: the first
    element in the lowest bits of a byte."""
    per_byte = 8 // bits
    codes = np.concatenate([codes & ((1 << bits) - 1), np.zeros(-len(codes) % per_byte, np.uint8)])
    lanes = codes.reshape(-1, per_byte).astype(np.uint16)
    return bytes((sum(int(v) << (bits * i) for i, v in enumerate(row))) for row in lanes)


def compact_strides(shape):
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return list(reversed(out))


def element_bits(dtype: str) -> int:
    """The bits of one element of a dlpx dtype, read off its name (`float6_e2m3fn` 6, `bool` 8,
    `float32x4` 128): DLPack's sizes, not dlpx's."""
    if dtype == "bool":
        return 8
    bits = re.match(r"[a-z]+(\d+)(?:x(\d+))?", dtype)
    return int(bits.group(1)) * int(bits.group(2) or 1)


def pattern_bytes(shape, dtype: str) -> bytes:
    """The byte pattern a compact tensor of `shape` and `dtype` is filled with: as many bytes as
    DLPack packs its elements into (sub-byte types packed)."""
    return bytes((i * 37 + 11) % 251 for i in range((math.prod(shape) * element_bits(dtype) + 7) // 8))


def patterned(shape, dtype: str = "float32") -> "dlpx.Tensor":
    """A fresh dlpx tensor holding `pattern_bytes(shape, dtype)` (any dtype: bytes, not values)."""
    t = dlpx.empty(shape, dtype)
    data = pattern_bytes(shape, dtype)
    assert t.nbytes == len(data), f"dlpx.empty({shape}, {dtype!r}) holds {t.nbytes} bytes, DLPack packs {len(data)}"
    ctypes.memmove(t.data_ptr, data, len(data))
    return t


def numpy_bytes(array: np.ndarray) -> Optional[bytes]:
    """What a numpy array means, row-major (None for a huge broadcast view)."""
    return None if array.size > HUGE // 2 else np.ascontiguousarray(array).tobytes()


def torch_bytes(t) -> Optional[bytes]:
    """What a torch tensor means, row-major, by torch's own methods (None where it has no values
    to speak of: meta, quantized, nested, a huge expanded view)."""
    import torch

    if t.is_meta or t.is_quantized or t.is_nested or t.numel() > HUGE // 2:
        return None
    if t.layout != torch.strided:
        t = t.to_dense()
    t = t.detach().resolve_conj().resolve_neg().contiguous()
    if t.numel() == 0:
        return b""
    return t.flatten().view(torch.uint8).numpy().tobytes()


def made_from(wrap: Callable[[Any], Any], source: Callable[[], Any], meaning: Callable[[Any], Optional[bytes]]):
    """A case's `make` and `meaning` for a tensor that wraps what `source()` makes: the meaning is
    that of a second `source()`, built again, not of the tensor."""
    return (lambda: wrap(source())), (lambda _: meaning(source()))


def cases() -> list[Case]:
    out = []
    for make in (_numpy, _torch, _jax, _tvm_ffi, _array_api_strict, _dlpx):
        out += make()
    return out


# ---- numpy ----------------------------------------------------------------------------------------

NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                "float32", "float64", "complex64", "complex128", "longdouble", "clongdouble", "datetime64[s]",
                "timedelta64[ms]", "object", "U3", "S4", "V8"]


def _numpy():
    def numpy_meaning(a):
        return None if a.dtype.hasobject else numpy_bytes(a)

    def readonly(a):
        a.flags.writeable = False
        return a

    def unaligned():
        raw = np.zeros(4 * 8 + 1, np.uint8)
        return raw[1:].view(np.float32)

    out = [Case("numpy", d, (lambda d=d: (np.arange(6) % 2 if d == "bool" else np.arange(6)).astype(d).reshape(2, 3)),
                numpy_meaning) for d in NUMPY_DTYPES]
    layouts = {
        "0-d": lambda: np.array(2.5, np.float32),
        "0-size": lambda: np.zeros((0, 3), np.float32),
        "0-size 1-d": lambda: np.zeros(0, np.int8),
        "negative strides": lambda: np.arange(10, dtype=np.int16)[::-1],
        "negative strides 2-d": lambda: np.arange(12.0).reshape(3, 4)[::-1, ::-2],
        "zero strides": lambda: np.broadcast_to(np.arange(3.0), (4, 3)),
        "broadcast scalar": lambda: np.broadcast_to(np.float32(7), (5,)),
        "huge broadcast": lambda: np.broadcast_to(np.arange(2.0), (HUGE, 2)),
        "transposed": lambda: np.arange(12, dtype=np.int64).reshape(3, 4).T,
        "sliced with offset": lambda: np.arange(20.0).reshape(4, 5)[1:3, 2:],
        "read-only": lambda: readonly(np.arange(4.0)),
        "read-only view of writable": lambda: np.arange(4.0).view().setflags(write=False) or None,
        "big-endian": lambda: np.arange(4, dtype=">f4"),
        "little-endian explicit": lambda: np.arange(4, dtype="<i4"),
        "unaligned": unaligned,
        "structured": lambda: np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")]),
        "fortran order": lambda: np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "matrix subclass": lambda: np.matrix([[1.0, 2.0]]),
        "masked array": lambda: np.ma.masked_array([1.0, 2.0], mask=[0, 1]),
        "0-d bool": lambda: np.array(True),
        "3-d 0-size": lambda: np.zeros((2, 0, 3), np.int16),
        "int8 negative strides 2-d": lambda: np.arange(12, dtype=np.int8).reshape(3, 4)[::-1, ::-1],
    }
    layouts.pop("read-only view of writable")
    out += [Case("numpy", name, make, numpy_meaning) for name, make in layouts.items()]
    return out


# ---- torch -----------------------------------------------------------------------------------------

TORCH_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
                "bfloat16", "float32", "float64", "complex32", "complex64", "complex128", "float8_e4m3fn",
                "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
                "bits8", "quint8", "qint8", "qint32", "int4", "uint1"]


def _torch():
    try:
        import torch
    except ImportError:  # the free-threaded interpreters have none
        return []

    meaning = torch_bytes

    def sample(name):
        dtype = getattr(torch, name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if name.startswith("q"):
                return torch.quantize_per_tensor(torch.arange(6.0).reshape(2, 3), 0.5, 0, dtype)
            base = torch.arange(6, dtype=torch.uint8).reshape(2, 3)
            if dtype.itemsize == 1:
                return base.view(dtype)  # any bit pattern of a one-byte type
            return (torch.arange(6).reshape(2, 3) % 2 if name == "bool" else torch.arange(6).reshape(2, 3)).to(dtype)

    def complex_():
        return torch.complex(torch.arange(4.0), torch.arange(4.0) + 10)

    out = [Case("torch", d, (lambda d=d: sample(d)), meaning) for d in TORCH_DTYPES if hasattr(torch, d)]
    layouts = {
        "conj": lambda: torch.conj(complex_()),
        "conj of a view": lambda: torch.conj(complex_())[1:],
        "conj, resolved": lambda: torch.conj(complex_()).resolve_conj(),
        "neg (imag of conj)": lambda: torch.conj(complex_()).imag,
        "neg view float": lambda: torch._neg_view(torch.arange(4.0)),
        "neg view int": lambda: torch._neg_view(torch.arange(4)),
        "neg view, sliced": lambda: torch._neg_view(torch.arange(6.0))[::2],
        "neg, resolved": lambda: torch._neg_view(torch.arange(4.0)).resolve_neg(),
        "requires_grad": lambda: torch.ones(2, requires_grad=True),
        "requires_grad, detached": lambda: torch.ones(2, requires_grad=True).detach(),
        "requires_grad int (impossible)": lambda: torch.ones(2, dtype=torch.int32),
        "non-leaf requiring grad": lambda: torch.ones(2, requires_grad=True) * 2,
        "sparse coo": lambda: torch.eye(3).to_sparse(),
        "sparse csr": lambda: torch.eye(3).to_sparse_csr(),
        "meta": lambda: torch.empty(2, 3, device="meta"),
        "nested": lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
        "0-d": lambda: torch.tensor(3.5),
        "0-size": lambda: torch.zeros(0, 3),
        "zero strides (expand)": lambda: torch.arange(3.0).expand(4, 3),
        "huge expand": lambda: torch.arange(2.0).expand(HUGE, 2),
        "transposed": lambda: torch.arange(12.0).reshape(3, 4).t(),
        "sliced with offset": lambda: torch.arange(20.0).reshape(4, 5)[1:3, 2:],
        "channels last": lambda: torch.arange(24.0).reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last),
        "inference tensor": lambda: _inference(torch),
        "subclass": lambda: torch.arange(3.0).as_subclass(type("Sub", (torch.Tensor,), {})),
        "neg of a conj": lambda: torch._neg_view(torch.conj(complex_())),
        "neg of one requiring grad": lambda: torch._neg_view(torch.ones(3, requires_grad=True)),
        "conj requiring grad": lambda: torch.conj(complex_().requires_grad_()),
        "bfloat16 transposed": lambda: torch.arange(6.0).reshape(2, 3).to(torch.bfloat16).t(),
        "float8 sliced": lambda: torch.arange(8, dtype=torch.uint8).view(torch.float8_e4m3fn)[1::2],
        "0-d bool": lambda: torch.tensor(True),
        "3-d 0-size": lambda: torch.zeros(2, 0, 3, dtype=torch.int16),
    }
    out += [Case("torch", name, make, meaning) for name, make in layouts.items()]
    return out


def _inference(torch):
    with torch.inference_mode():
        return torch.arange(3.0)


# ---- jax -------------------------------------------------------------------------------------------

JAX_DTYPES = ["bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "bfloat16", "float32",
              "complex64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e3m4",
              "float8_e4m3", "float8_e8m0fnu", "float8_e4m3b11fnuz", "float4_e2m1fn", "int4", "uint4", "int2"]


def _jax():
    try:
        import jax.numpy as jnp
    except ImportError:
        return []

    def meaning(a):
        values = np.asarray(a)
        bits = sub_byte_bits(values.dtype)
        return values.tobytes() if bits is None else packed(values.view(np.uint8).ravel(), bits)

    def sample(name):
        dtype = getattr(jnp, name)
        return (jnp.arange(6).reshape(2, 3) % 2 if name == "bool" else jnp.arange(6).reshape(2, 3)).astype(dtype)

    out = [Case("jax", d, (lambda d=d: sample(d)), meaning) for d in JAX_DTYPES if hasattr(jnp, d)]
    layouts = {
        "0-d": lambda: jnp.array(1.5, jnp.float32),
        "0-size": lambda: jnp.zeros((0, 3), jnp.float32),
        "transposed (materialised by jax)": lambda: jnp.arange(12.0).reshape(3, 4).T,
        "deleted": lambda: _deleted(jnp),
        "3-d": lambda: jnp.arange(24, dtype=jnp.int32).reshape(2, 3, 4),
        "bfloat16 0-d": lambda: jnp.array(2.0, jnp.bfloat16),
    }
    out += [Case("jax", name, make, meaning if name != "deleted" else None) for name, make in layouts.items()]
    return out


def _deleted(jnp):
    x = jnp.arange(3.0)
    x.delete()
    return x


# ---- tvm_ffi ---------------------------------------------------------------------------------------

def _tvm_ffi():
    try:
        import tvm_ffi
    except ImportError:
        return []

    # A tvm_ffi tensor means the memory it wraps (no flags, no bits): that of the numpy array,
    # or the dlpx tensor's pattern, it was made from.
    def of(array):
        return made_from(tvm_ffi.from_dlpack, array, numpy_bytes)

    def of_pattern(dtype):
        return (lambda: tvm_ffi.from_dlpack(patterned((2, 3), dtype))), (lambda _: pattern_bytes((2, 3), dtype))

    sources = {d: of(lambda d=d: np.arange(6).astype(d).reshape(2, 3))
               for d in ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                         "float32", "float64", "complex64", "complex128"]}
    sources |= {
        "0-d": of(lambda: np.array(4.0)),
        "0-size": of(lambda: np.zeros((0, 2), np.float32)),
        "negative strides": of(lambda: np.arange(6.0)[::-1]),
        "zero strides": of(lambda: np.lib.stride_tricks.as_strided(np.arange(3.0), (2, 3), (0, 8), writeable=True)),
        "sliced with offset": of(lambda: np.arange(20.0).reshape(4, 5)[1:3, 2:]),
        "bfloat16 from dlpx": of_pattern("bfloat16"),
        "float8_e4m3fn from dlpx": of_pattern("float8_e4m3fn"),
    }
    # (A wrapper whose handle was moved out is no case: tvm_ffi's own __dlpack__ crashes on it;
    # test_consumer_fast_paths.py holds dlpx's BufferError for it.)
    return [Case("tvm_ffi", name, make, meaning) for name, (make, meaning) in sources.items()]


# ---- array_api_strict ------------------------------------------------------------------------------

STRICT_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32",
                 "float64", "complex64", "complex128"]


def _array_api_strict():
    try:
        import array_api_strict as xp
    except ImportError:
        return []

    def meaning(a):
        return np.ascontiguousarray(a._array).tobytes()  # the numpy array it holds and forwards

    def sample(name):
        return xp.reshape(xp.asarray(np.arange(6) % 2 if name == "bool" else np.arange(6), dtype=getattr(xp, name)), (2, 3))

    out = [Case("array_api_strict", d, (lambda d=d: sample(d)), meaning) for d in STRICT_DTYPES]
    layouts = {
        "0-d": lambda: xp.asarray(3.0),
        "0-size": lambda: xp.zeros((0, 3)),
        "sliced": lambda: xp.reshape(xp.arange(12.0), (3, 4))[1:, ::2],
        "make-believe device": lambda: xp.asarray([1.0, 2.0], device=xp.Device("device1")),
        "read-only inside": lambda: _strict_readonly(xp),
    }
    out += [Case("array_api_strict", name, make, meaning) for name, make in layouts.items()]
    return out


def _strict_readonly(xp):
    a = np.arange(4.0)
    a.flags.writeable = False
    return xp.asarray(a)


# ---- dlpx ------------------------------------------------------------------------------------------


DLPX_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
               "bfloat16", "float32", "float64", "complex64", "complex128", "float8_e3m4", "float8_e4m3",
               "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
               "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "float32x4"]


def _dlpx():
    # dlpx produces these: each means what it was made from — the pattern written into it, or the
    # numpy array or torch tensor it imported, built again — never what dlpx's export says.
    def of_pattern(shape, dtype):
        return (lambda: patterned(shape, dtype)), (lambda _: pattern_bytes(shape, dtype))

    def of_numpy(array, wrap=dlpx.from_dlpack):
        return made_from(wrap, array, numpy_bytes)

    def of_torch(make):
        import torch

        return made_from(dlpx.from_dlpack, lambda: make(torch), torch_bytes)

    def readonly():
        a = np.arange(4.0)
        a.flags.writeable = False
        return a

    sources = {d: of_pattern((2, 4), d) for d in DLPX_DTYPES}
    sources |= {
        "0-d": of_pattern((), "float32"),
        "0-size": of_pattern((3, 0), "float32"),
        "read-only": of_numpy(readonly),
        "strided view": of_numpy(lambda: np.arange(12.0).reshape(3, 4)[:, ::2]),
        "negative strides": of_numpy(lambda: np.arange(5.0)[::-1]),
        "zero strides": of_numpy(lambda: np.broadcast_to(np.arange(2.0), (3, 2))),
        "huge broadcast": of_numpy(lambda: np.broadcast_to(np.arange(2.0), (HUGE, 2))),
        "legacy import": of_numpy(lambda: np.arange(6.0), lambda a: dlpx.from_dlpack(a.__dlpack__())),
        "subclass": of_numpy(lambda: np.arange(3.0), type("Sub", (dlpx.Tensor,), {})),
    }
    if importlib.util.find_spec("torch") is not None:  # the free-threaded interpreters have none
        sources |= {
            "bfloat16 strided from torch": of_torch(lambda torch: torch.arange(12.0).reshape(3, 4).to(torch.bfloat16)[:, ::2]),
            "float8 from torch": of_torch(lambda torch: torch.arange(4, dtype=torch.uint8).view(torch.float8_e5m2)),
        }
    return [Case("dlpx", name, make, meaning) for name, (make, meaning) in sources.items()]
