"""Producer checks of the C exchange table a tensor type publishes, each entry called from C
through ctypes function pointers read from the table."""

from __future__ import annotations

import ctypes
import gc

from . import abi, clauses as C
from .capsules import Spied, compact_strides, describe_error, export_info
from .isolated import run_isolated
from .results import Checks

_MAX_CHAIN = 16  # a chain longer than this is treated as a cycle
_SENTINEL = 0x5EB7_1E57  # written into `out` before a call that must leave it untouched


def walk_chain(head: int):
    """[(address, (major, minor))] from `head` along prev_api; raises ValueError on a cycle,
    a chain longer than 16 links, or versions (major, minor) that do not strictly descend."""
    links, seen = [], set()
    address = head
    while address:
        if address in seen or len(links) >= _MAX_CHAIN:
            raise ValueError(f"prev_api chain loops back or exceeds {_MAX_CHAIN} links")
        seen.add(address)
        header = abi.DLPackExchangeAPIHeader.from_address(address)
        version = (header.version.major, header.version.minor)
        if links and version >= links[-1][1]:
            raise ValueError(f"versions do not descend (prev_api names an older table): {links[-1][1]} then {version}")
        links.append((address, version))
        address = header.prev_api or 0
    return links


class _ErrorLog:
    """A C-callable SetError that records (kind, message) pairs."""

    def __init__(self):
        self.calls = []
        self.fn = abi.SetError(lambda ctx, kind, msg: self.calls.append((kind, msg)))
        self.address = ctypes.cast(self.fn, ctypes.c_void_p).value


class _Prefixed:
    """The checks of one table under a name prefix (dlpx's synthetic table: `synthetic.…`)."""

    def __init__(self, checks: Checks, prefix: str):
        self.checks, self.prefix = checks, prefix

    def record(self, name, *args, **kwargs):
        return self.checks.record(self.prefix + name, *args, **kwargs)

    def skip(self, name, *args, **kwargs):
        self.checks.skip(self.prefix + name, *args, **kwargs)


def check_table(x, checks: Checks, spec=None) -> None:
    """Every exchange-table check for the type of `x`; for a type that publishes none, the same
    checks of the synthetic table dlpx reads it through (`synthetic.…`)."""
    cls = type(x)
    address, how = abi.exchange_table_address(cls)
    published = getattr(cls, "__dlpack_c_exchange_api__", None)
    if published is not None and how != "capsule":
        # An attribute that names no table (a capsule of another name, not a capsule at all).
        what = repr(abi.capsule_name(published)) if abi.is_capsule(published) else type(published).__name__
        checks.record("table.published", False, f"{cls.__qualname__}.__dlpack_c_exchange_api__ is {what}, not a capsule named 'dlpack_exchange_api'", C.EXCHANGE_CAPSULE)
        return
    if not address:
        checks.skip("table.published", f"{cls.__qualname__} publishes no exchange table (optional)", C.EXCHANGE_ATTRIBUTE, required=False)
        check_synthetic_table(x, checks, spec)
        return
    checks.record("table.published", True, f"{cls.__qualname__}.{'__dlpack_c_exchange_api__' if how == 'capsule' else '__c_dlpack_exchange_api__'}", C.EXCHANGE_ATTRIBUTE)
    checks.record("table.capsule", how == "capsule", "PyCapsule 'dlpack_exchange_api'" if how == "capsule" else "only the integer form", C.EXCHANGE_CAPSULE, required=False)
    integer = getattr(cls, "__c_dlpack_exchange_api__", None)
    if integer is None or how != "capsule":
        checks.skip("table.int_form", "no __c_dlpack_exchange_api__ beside the capsule", C.EXCHANGE_ATTRIBUTE, required=False)
    else:
        checks.record("table.int_form", integer == address, f"int {integer:#x}, capsule {address:#x}", C.EXCHANGE_ATTRIBUTE)
    again, _ = abi.exchange_table_address(cls)
    checks.record("table.stable", again == address, "the same address on every lookup" if again == address else f"{address:#x} then {again:#x}", C.EXCHANGE_LIFETIME)
    try:
        links = walk_chain(address)
    except ValueError as exc:
        checks.record("table.prev_api_chain", False, str(exc), C.PREV_API)
        return
    checks.record("table.prev_api_chain", True, " -> ".join(f"{v[0]}.{v[1]}" for _, v in links) + " -> NULL", C.PREV_API)
    v1 = [a for a, v in links if v[0] == abi.DLPACK_MAJOR]
    if not checks.record("table.header_version", bool(v1), f"head {links[0][1]}, a major-1 table {'found' if v1 else 'missing'}", C.HEADER_VERSION):
        return
    _check_v1_table(x, abi.DLPackExchangeAPI.from_address(v1[0]), checks, spec, cls, "null_set_error")


def check_synthetic_table(x, checks: Checks, spec=None) -> None:
    """dlpx's synthetic table for `type(x)` (dlpx.exchange_api_of), checked as a published table
    is; its `to_py` gives the table's own type, dlpx.Tensor (docs/design.md, "Synthetic tables")."""
    try:
        import dlpx
    except ImportError:
        checks.skip("synthetic.table", "dlpx is not importable here", C.EXCHANGE_ATTRIBUTE, required=False)
        return
    checks = _Prefixed(checks, "synthetic.")
    address = abi.capsule_pointer(dlpx.exchange_api_of(type(x)))
    try:
        links = walk_chain(address)
    except ValueError as exc:
        checks.record("table.prev_api_chain", False, str(exc), C.PREV_API)
        return
    checks.record("table.prev_api_chain", links == [(address, (1, 3))], " -> ".join(f"{v[0]}.{v[1]}" for _, v in links) + " -> NULL", C.PREV_API)
    _check_v1_table(x, abi.DLPackExchangeAPI.from_address(address), checks, spec, dlpx.Tensor, "null_set_error_synthetic")


def _check_v1_table(x, table, checks, spec, owner_type, null_set_error_probe_name) -> None:
    required = ("managed_tensor_allocator", "managed_tensor_from_py_object_no_sync", "managed_tensor_to_py_object_no_sync", "current_work_stream")
    missing = [name for name in required if not getattr(table, name)]
    if not checks.record("table.required_entries", not missing, f"NULL: {', '.join(missing)}" if missing else "all four non-NULL", C.REQUIRED_ENTRIES):
        return
    _check_allocator(table, checks, spec, null_set_error_probe_name)
    _check_from_to_py(x, table, checks, owner_type)
    _check_view(x, table, checks)
    _check_work_stream(table, checks)


def _allocate(table, proto, set_error):
    out = ctypes.c_void_p(_SENTINEL)
    rc = abi.Allocator(table.managed_tensor_allocator)(ctypes.byref(proto), ctypes.byref(out), None, set_error)
    return rc, out.value


# One aligned address proves little: an allocator aligning to 64 bytes lands on a multiple of
# 256 a quarter of the time. Several tensors alive together have distinct addresses.
ALIGNMENT_SAMPLES = 8


def data_remainders(table, samples=ALIGNMENT_SAMPLES):
    """`data % 256` of `samples` (2, 3) float32 tensors from `table`'s allocator, all alive at
    once (fewer if it refuses one)."""
    tensors, errors = [], _ErrorLog()
    try:
        for _ in range(samples):
            rc, out = _allocate(table, abi.prototype((2, 3)), errors.address)
            if rc != 0 or out in (None, 0, _SENTINEL):
                break
            tensors.append(out)
        return [abi.read_managed(out, True)["data"] % 256 for out in tensors]
    finally:
        for out in tensors:
            abi.call_deleter(out, abi.read_managed(out, True)["deleter"])


def _check_allocator(table, checks, spec, probe="null_set_error"):
    errors = _ErrorLog()
    rc, out = _allocate(table, abi.prototype((2, 3)), errors.address)
    ok = rc == 0 and not errors.calls and out not in (None, 0, _SENTINEL)
    detail = f"rc={rc}, SetError calls={len(errors.calls)}"
    if ok:
        info = abi.read_managed(out, True)
        ok = info["version"][0] == abi.DLPACK_MAJOR and info["shape"] == (2, 3) and info["dtype"] == (2, 32, 1) and info["device"] == (1, 0) and info["strides"] is not None
        detail = f"version {info['version']}, shape {info.get('shape')}, strides {info.get('strides')}"
        remainders = [info["data"] % 256] + data_remainders(table, ALIGNMENT_SAMPLES - 1)
        checks.record("allocator.aligned", not any(remainders), f"data % 256 of {len(remainders)} live tensors: {remainders}", C.ALIGNMENT, required=False)
        spied = Spied(out, True)
        spied.delete()
        calls = spied.forget()
        ok = ok and calls == 1
    checks.record("allocator.good_prototype", ok, detail, C.ALLOCATOR_PROTOTYPE)
    for name, proto in (("negative_shape", abi.prototype((2, -3))), ("unknown_device", abi.prototype((2,), device=(99, 0)))):
        errors = _ErrorLog()
        rc, out = _allocate(table, proto, errors.address)
        # On failure the allocator gives no tensor: `out` left as it was, or NULL written.
        ok = rc != 0 and len(errors.calls) == 1 and out in (_SENTINEL, None, 0)
        kind = errors.calls[0][0].decode(errors="replace") if errors.calls else "-"
        checks.record(f"allocator.{name}", ok, f"rc={rc}, SetError calls={len(errors.calls)} (kind {kind}), out {_out_text(out)}", C.ALLOCATOR)
        if rc == 0 and out and out != _SENTINEL:
            abi.call_deleter(out, abi.read_managed(out, True)["deleter"])
    if spec is None:
        checks.skip("allocator.null_set_error", "needs the factory by name (module:function) to run in a child process", C.NULL_SET_ERROR, required=False)
        return
    # Run in a child: a producer that calls a NULL SetError crashes the process (torch does).
    outcome = run_isolated(probe, spec)
    checks.record("allocator.null_set_error", outcome == "ok", outcome, C.NULL_SET_ERROR, required=False)


def null_set_error_probe(x, synthetic=False) -> str:
    """Child-process half of allocator.null_set_error: 'ok' or what went wrong."""
    if synthetic:
        import dlpx

        address = abi.capsule_pointer(dlpx.exchange_api_of(type(x)))
    else:
        address, _ = abi.exchange_table_address(type(x))
    table = abi.DLPackExchangeAPI.from_address([a for a, v in walk_chain(address) if v[0] == 1][0])
    rc, out = _allocate(table, abi.prototype((2, -3)), None)
    return "ok" if rc != 0 and out in (_SENTINEL, None, 0) else f"rc={rc}, out {_out_text(out)}"


def _out_text(out) -> str:
    return "untouched" if out == _SENTINEL else "NULL" if not out else "a tensor"


def _check_from_to_py(x, table, checks, owner_type):
    from_py = abi.FromPyObject(table.managed_tensor_from_py_object_no_sync)
    to_py = abi.ToPyObject(table.managed_tensor_to_py_object_no_sync)
    reference, error = export_info(x, max_version=(1, 3))
    out = ctypes.c_void_p()
    try:
        rc = from_py(x, ctypes.byref(out))
    except Exception as exc:  # noqa: BLE001
        checks.record("from_py.exports", False, describe_error(exc), C.FROM_PY)
        return
    if rc != 0 or not out.value:
        checks.record("from_py.exports", False, f"rc={rc}, out {_out_text(out.value)}: no tensor for a plain array", C.FROM_PY)
        return
    info = abi.read_managed(out.value, True)
    same = error is None and all(_field(info, k) == _field(reference, k) for k in ("data", "shape", "strides", "dtype", "device", "byte_offset"))
    checks.record("from_py.exports", rc == 0 and info["version"][0] == 1 and same, f"rc={rc}, version {info['version']}, {'equal to' if same else 'differs from'} __dlpack__'s tensor", C.FROM_PY)
    spied = Spied(out.value, True)
    spied.delete()
    checks.record("from_py.deleter_once", spied.forget() == 1, "the kit's one call reached the producer's deleter", C.FROM_PY)

    rc = from_py(x, ctypes.byref(out))
    if rc != 0 or not out.value:
        checks.record("to_py.imports", False, f"from_py: rc={rc}, out {_out_text(out.value)}", C.TO_PY)
        return
    data = abi.read_managed(out.value, True)["data"]
    result = ctypes.c_void_p()
    try:
        rc = to_py(out.value, ctypes.byref(result))
    except Exception as exc:  # noqa: BLE001 - ruling 4: on failure the caller still owns it
        abi.call_deleter(out.value, abi.read_managed(out.value, True)["deleter"])
        checks.record("to_py.imports", False, describe_error(exc), C.TO_PY)
        return
    obj = abi.object_at(result.value)
    abi.decref(result.value)  # the reference to_py handed over; `obj` holds its own
    back, _ = export_info(obj, max_version=(1, 3))
    ok = rc == 0 and isinstance(obj, owner_type) and back is not None and back["data"] == data
    checks.record("to_py.imports", ok, f"rc={rc}, {type(obj).__name__}, {'zero-copy' if back and back['data'] == data else 'other data'}", C.TO_PY)
    del obj
    gc.collect()


def _field(info, key):
    """A description's field, NULL strides read as the compact strides they mean."""
    if key == "strides" and info.get(key) is None:
        return compact_strides(info["shape"])
    return info.get(key)


def _check_view(x, table, checks):
    if not table.dltensor_from_py_object_no_sync:
        checks.skip("view.matches_dlpack", "dltensor_from_py_object_no_sync is NULL (allowed)", C.VIEW, required=False)
        return
    reference, _ = export_info(x, max_version=(1, 3))
    dl = abi.DLTensor()
    try:
        rc = abi.DLTensorFromPyObject(table.dltensor_from_py_object_no_sync)(x, ctypes.byref(dl))
    except Exception as exc:  # noqa: BLE001
        checks.record("view.matches_dlpack", False, describe_error(exc), C.VIEW)
        return
    view = abi.describe(dl)
    diff = [k for k in view if reference is not None and _field(view, k) != _field(reference, k)]
    checks.record("view.matches_dlpack", rc == 0 and reference is not None and not diff, f"rc={rc}" + (f", differs in {diff}" if diff else ", every field equal"), C.VIEW)


def _check_work_stream(table, checks):
    out = ctypes.c_void_p(_SENTINEL)
    rc = abi.CurrentWorkStream(table.current_work_stream)(abi.KDL_CPU, 0, ctypes.byref(out))
    checks.record("current_work_stream.cpu", rc == 0 and out.value != _SENTINEL, f"rc={rc}, stream {'NULL' if not out.value else hex(out.value)}", C.WORK_STREAM)


def refcount_through_table(x) -> None:
    """One from_py + deleter round, for the producer's flat-refcount loop."""
    address, _ = abi.exchange_table_address(type(x))
    if not address:
        return
    table = abi.DLPackExchangeAPI.from_address(address)
    if table.header.version.major != abi.DLPACK_MAJOR:
        return
    out = ctypes.c_void_p()
    if abi.FromPyObject(table.managed_tensor_from_py_object_no_sync)(x, ctypes.byref(out)) == 0 and out.value:
        abi.call_deleter(out.value, abi.read_managed(out.value, True)["deleter"])

