"""Faithful import, differentially (docs/design.md R11): for every producer's catalogue of awkward
tensors (faithful_catalogue.py), every way dlpx reads it — `from_dlpack`, `from_dlpack(copy=True)`,
the kernel API's `dlpx_import` and `dlpx_view_of` — refuses exactly where the producer's own
`__dlpack__` refuses (or where the rule adds a refusal: torch's negative bit), else holds the bytes
the producer's tensor means; every consumer reading dlpx's export then holds them too, or refuses
for a reason the table of known refusals (KNOWN_REFUSALS) gives. Reference counts come back after
each case; the table of what was checked prints at the end."""

import ctypes
import gc
import importlib.util
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from dlpx.conform import abi
import dlpx
from dlpx.conform.abi import DlpxTensorView
import report_tables
from faithful_catalogue import cases, raw_bytes

CATALOGUE = cases()

_LIB = ctypes.PyDLL(dlpx.library_path())
_LIB.dlpx_import.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p)]
_LIB.dlpx_import.restype = ctypes.c_int


View = DlpxTensorView


_LIB.dlpx_view_of.argtypes = [ctypes.py_object, ctypes.POINTER(View)]
_LIB.dlpx_view_of.restype = ctypes.c_int
_LIB.dlpx_view_release.argtypes = [ctypes.POINTER(View)]
_LIB.dlpx_view_release.restype = None

TALLY = defaultdict(lambda: defaultdict(int))


def producer_verdict(x):
    """The producer's own export: (None, its capsule's description) or (what it said, None)."""
    try:
        try:
            capsule = x.__dlpack__(max_version=(1, 3))
        except TypeError:
            capsule = x.__dlpack__()
        return None, abi.read_capsule(capsule)
    except Exception as exc:  # noqa: BLE001 - any refusal counts
        return f"{type(exc).__name__}: {exc}", None  # not the exception: its traceback holds `x`


def negated(x) -> bool:
    """The one refusal the rule adds: torch's negative bit (its `__dlpack__` exports the raw memory)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "is_neg") and x.is_neg()


def tensor_bytes(t):
    """(bytes, read-only) of a dlpx.Tensor, through its own export."""
    info = abi.read_capsule(t.__dlpack__(max_version=(1, 3)))
    return raw_bytes(info, info["flags"]), bool(info["flags"] & abi.FLAG_READ_ONLY)


def managed_bytes(address):
    m = abi.managed_at(address)
    return raw_bytes(abi.describe(m.dl_tensor), m.flags), bool(m.flags & abi.FLAG_READ_ONLY)


def read_from_dlpack(x):
    return tensor_bytes(dlpx.from_dlpack(x))


def read_copy(x):
    t = dlpx.from_dlpack(x, copy=True)
    got = tensor_bytes(t)
    assert not got[1], "a copy is writable"
    return got


def read_import(x):
    out = ctypes.c_void_p()
    assert _LIB.dlpx_import(x, ctypes.byref(out)) == 0
    try:
        return managed_bytes(out.value)
    finally:
        abi.call_deleter(out.value, abi.managed_at(out.value).deleter)


def read_view(x):
    view = View()
    assert _LIB.dlpx_view_of(x, ctypes.byref(view)) == 0
    try:
        flags = abi.managed_at(view.owner).flags if view.owner else 0
        return raw_bytes(abi.describe(view.tensor), flags), None
    finally:
        _LIB.dlpx_view_release(ctypes.byref(view))


PATHS = {"from_dlpack": read_from_dlpack, "copy=True": read_copy, "dlpx_import": read_import, "dlpx_view_of": read_view}


def consumers():
    out = {"numpy": np.from_dlpack}
    for name in ("torch", "jax.numpy", "tvm_ffi", "array_api_strict"):
        try:
            module = __import__(name, fromlist=["_"])
        except ImportError:
            continue
        out[name.split(".")[0]] = module.from_dlpack
    return out


CONSUMERS = consumers()


def description(info):
    return {k: info[k] for k in ("data", "shape", "strides", "dtype", "byte_offset")}


# ---- what a consumer may refuse of dlpx's export, and why --------------------------------------

# DLPack dtype codes.
INT, UINT, FLOAT, COMPLEX, BOOL = 0, 1, 2, 5, 6
FLOAT6, FLOAT4 = (15, 16), 17


def numpy_has(dtype) -> bool:
    """Whether numpy has a dtype for a DLPack (code, bits, lanes)."""
    code, bits, lanes = dtype
    return lanes == 1 and bits in {INT: (8, 16, 32, 64), UINT: (8, 16, 32, 64), FLOAT: (16, 32, 64),
                                   COMPLEX: (64, 128), BOOL: (8,)}.get(code, ())


def transposed_compact(shape, strides) -> bool:
    """Whether `strides` are compact for some order of the dimensions (jax takes those)."""
    step = 1
    for extent, stride in sorted(((n, s) for n, s in zip(shape, strides) if n != 1), key=lambda d: d[1]):
        if stride != step:
            return False
        step *= extent
    return True


@dataclass
class Refusal:
    consumer: str
    seen_with: str  # the consumer's version the refusal was seen with
    reason: str
    applies: Callable[[dict], bool]  # of the producer's export, with its "readonly"
    message: str  # a pattern the consumer's "Type: message" matches
    seen: int = 0


KNOWN_REFUSALS = [
    Refusal("numpy", "2.4.6; 2.5.5", "numpy has no dtype for it (bfloat16, float8, float6, float4, complex32, lanes); "
            "numpy 2.5 raises BufferError where 2.4 raised RuntimeError",
            lambda e: not numpy_has(e["dtype"]), r"^(RuntimeError|BufferError): Unsupported (dtype|lanes) in DLTensor"),
    Refusal("array_api_strict", "2.6.1", "it wraps numpy arrays: numpy has no dtype for it",
            lambda e: not numpy_has(e["dtype"]), r"^(RuntimeError|BufferError): Unsupported (dtype|lanes) in DLTensor"),
    Refusal("array_api_strict", "2.6.1", "the array API has no float16",
            lambda e: e["dtype"] == (FLOAT, 16, 1), r"^TypeError: .*does not support the dtype 'float16'"),
    Refusal("jax", "0.10.2", "jax asks for a legacy capsule, which cannot say read-only: dlpx refuses to "
            "export a read-only tensor in one (rows/test_jax.py)",
            lambda e: e["readonly"], r"^BufferError: dlpx: __dlpack__: the tensor is read-only, which a legacy capsule .* cannot say"),
    Refusal("jax", "0.10.2", "jax takes compact strides only, in any order of the dimensions",
            lambda e: not transposed_compact(e["shape"], e["strides"]), r"trivial \(compact\) striding"),
    Refusal("jax", "0.10.2", "jax has no vector lanes, complex32 or float6 types",
            lambda e: e["dtype"][2] != 1 or e["dtype"][:2] == (COMPLEX, 32) or e["dtype"][0] in FLOAT6,
            r"UNIMPLEMENTED: (DLPack types with lanes|Invalid or unsupported DLPack complex width|Unknown or invalid "
            r"DLPack type code)"),
    Refusal("jax", "0.10.2", "jax's CPU client takes float4 only in the layout jax made it in",
            lambda e: e["dtype"][0] == FLOAT4, r"PjRt CPU buffers only support default layout"),
    Refusal("torch", "2.15.0", "torch has no float8_e3m4, float8_e4m3, float8_e4m3b11fnuz, float6, single float4 "
            "or vector lanes", lambda e: e["dtype"][2] != 1 or e["dtype"][0] in (7, 8, 9, *FLOAT6, FLOAT4),
            r"^BufferError: (Unsupported code|Unsupported kDLFloat4_e2m1fn lanes|ATen does not support lanes)"),
    Refusal("torch", "2.15.0", "torch has no negative strides", lambda e: any(s < 0 for s in e["strides"] or ()),
            r"^RuntimeError: Storage size calculation overflowed"),
]


def known_refusal(consumer, exported, readonly, said):
    """The known refusal that explains `consumer` refusing dlpx's export with `said`, or None."""
    export = dict(exported, readonly=readonly)
    return next((r for r in KNOWN_REFUSALS
                 if r.consumer == consumer and r.applies(export) and re.search(r.message, said)), None)


# jax without jax_enable_x64 makes 64-bit types 32-bit: its values, not the bytes, are kept.
NARROWED_WITHOUT_X64 = {(INT, 64, 1): (INT, 32, 1), (UINT, 64, 1): (UINT, 32, 1), (FLOAT, 64, 1): (FLOAT, 32, 1),
                        (COMPLEX, 128, 1): (COMPLEX, 64, 1)}


def narrowed_by_jax(name, exported_dtype, got_dtype) -> bool:
    if name != "jax":
        return False
    import jax

    return not jax.config.jax_enable_x64 and NARROWED_WITHOUT_X64.get(exported_dtype) == got_dtype


@pytest.mark.parametrize("case", CATALOGUE, ids=[f"{c.producer}: {c.name}" for c in CATALOGUE])
def test_every_path_refuses_what_the_producer_refuses_and_holds_what_it_means(case):
    x = case.make()
    references = sys.getrefcount(x)
    refusal, exported = producer_verdict(x)
    rule = negated(x)
    meaning = case.meaning(x) if case.meaning is not None and (refusal is None or rule) else None
    readonly = exported is not None and (exported["flags"] is None or bool(exported["flags"] & abi.FLAG_READ_ONLY))
    tally = TALLY[case.producer]
    tally["cases"] += 1
    tally["refused by the producer"] += refusal is not None
    tally["refused by the rule (negative bit)"] += rule
    for path, read in PATHS.items():
        refuse = refusal is not None or (rule and path != "copy=True")
        try:
            got = read(x)
        except MemoryError:
            assert path == "copy=True" and meaning is None, f"{path} ran out of memory"
            tally["copies of a huge view refused (MemoryError)"] += 1
            continue
        except Exception as exc:  # noqa: BLE001
            kind, text = type(exc).__name__, str(exc)
            exc.__traceback__ = None  # it would hold `x`
            del exc
            assert refuse, f"{path} refused what the producer exports: {kind}: {text}"
            if rule or case.producer == "torch":
                assert kind == "BufferError", f"{path}: a refusal is a BufferError, got {kind}: {text}"
            tally["paths refused"] += 1
            continue
        assert not refuse, f"{path} accepted what {'the rule' if rule else 'the producer'} refuses: {refusal}"
        data, flagged_readonly = got
        if data is None:  # a huge broadcast view: its description, not its bytes
            assert path == "copy=True" or case.producer != "jax"
            tally["paths held the description (huge)"] += 1
            continue
        assert data == meaning, f"{path}: {len(data)} bytes differ from the {len(meaning)} the tensor means"
        if path in ("from_dlpack", "dlpx_import") and not rule:
            assert flagged_readonly == readonly, f"{path}: read-only {flagged_readonly}, the producer says {readonly}"
        tally["paths held its bytes"] += 1
    if refusal is None and not rule:
        check_consumers_of_dlpxs_export(x, meaning, readonly, exported, tally)
    gc.collect()
    assert sys.getrefcount(x) == references, "a reference to the producer's tensor was kept or lost"


def check_consumers_of_dlpxs_export(x, meaning, readonly, exported, tally):
    d = dlpx.from_dlpack(x)
    for name, from_dlpack in CONSUMERS.items():
        try:
            y = from_dlpack(d)
        except Exception as exc:  # noqa: BLE001 - a consumer may refuse what it cannot take, for a known reason
            said = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            exc.__traceback__ = None
            del exc
            refusal = known_refusal(name, exported, readonly, said)
            assert refusal is not None, f"{name} refuses dlpx's export, for no known reason: {said}"
            refusal.seen += 1
            tally["consumers refused dlpx's export (known reasons)"] += 1
            continue
        info = abi.read_capsule(y.__dlpack__(max_version=(1, 3)) if name != "jax" else y.__dlpack__())
        if info["dtype"] != exported["dtype"]:
            assert narrowed_by_jax(name, exported["dtype"], info["dtype"]), \
                f"{name} imports dlpx's {exported['dtype']} export as {info['dtype']}"
            tally["jax without x64 narrowed the dtype"] += 1
            continue
        if meaning is None:
            assert info["shape"] == exported["shape"]
        else:
            assert raw_bytes(info, info["flags"] or 0) == meaning, f"{name} reads other bytes through dlpx's export"
        if name == "numpy" and readonly:
            assert not y.flags.writeable, "a read-only import exports read-only"
            if y.size:
                with pytest.raises(ValueError):
                    y[(0,) * y.ndim] = 0
        tally["consumers held its bytes"] += 1
        del y, info


def test_the_catalogue_is_large_and_the_table_prints():
    every_peer = all(importlib.util.find_spec(p) for p in ("torch", "jax", "tvm_ffi", "array_api_strict"))
    assert len(CATALOGUE) >= (200 if every_peer else 100), "every producer's catalogue"
    columns = ["cases", "refused by the producer", "refused by the rule (negative bit)", "paths refused",
               "paths held its bytes", "paths held the description (huge)",
               "copies of a huge view refused (MemoryError)", "consumers held its bytes",
               "jax without x64 narrowed the dtype", "consumers refused dlpx's export (known reasons)"]
    lines = ["| producer | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]
    for producer, tally in TALLY.items():
        lines.append(f"| {producer} | " + " | ".join(str(tally[c]) for c in columns) + " |")
    report_tables.add("faithful import: every producer's awkward tensors through every path", lines)
    installed = {name: getattr(sys.modules.get(name), "__version__", "?") for name in CONSUMERS}
    lines = ["| consumer (seen with; installed) | refuses dlpx's export where | times |", "|---|---|---|"]
    lines += [f"| {r.consumer} ({r.seen_with}; {installed.get(r.consumer, 'absent')}) | {r.reason} | {r.seen} |"
              for r in KNOWN_REFUSALS]
    report_tables.add("faithful import: the consumers' known refusals of dlpx's export", lines)
    # With the whole catalogue run, and every consumer here, each known refusal happened: none is stale.
    if sum(t["cases"] for t in TALLY.values()) == len(CATALOGUE) and every_peer:
        assert [r.reason for r in KNOWN_REFUSALS if not r.seen] == []
