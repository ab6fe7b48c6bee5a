"""Producer checks: ``__dlpack__`` and ``__dlpack_device__`` of any array, then its exchange
table (table.py); an array with no DLPack but an older protocol gets protocols.py's checks.
``check_producer(make)`` is the entry point."""

from __future__ import annotations

import gc
import sys

from . import abi, clauses as C
from .cases import DTYPES, LAYOUT_CASES
from .capsules import Spied, consume, describe_error, export, export_info, read_values, row_major
from .libraries import Library
from .protocols import check_protocol_producer, protocol_of
from .results import Checks
from .table import check_table, refcount_through_table

V1 = (1, 0)
REFCOUNT_ROUNDS = 200


def check_producer(make, *, readonly=None, undescribable=None, spec=None, checks=None) -> Checks:
    """Run every producer check on arrays from ``make(shape, dtype_name)`` (see libraries.py for
    the factory contract). ``readonly(array)`` makes a read-only copy, ``undescribable()`` an
    array DLPack cannot describe; ``spec`` (a built-in name or module:function) lets the checks
    that may crash run in a child process. Returns the recorded checks."""
    checks = Checks() if checks is None else checks
    x = make((2, 3), "float32")
    protocol = None if hasattr(x, "__dlpack__") else protocol_of(x)
    if protocol is not None:
        return check_protocol_producer(make, protocol, readonly=readonly, undescribable=undescribable, checks=checks)
    steps = {
        "versions": lambda: _check_versions(x, checks), "device": lambda: _check_device(x, checks),
        "copy_and_stream": lambda: _check_copy_and_stream(x, checks),
        "capsule_lifetime": lambda: _check_capsule_lifetime(x, checks), "layouts": lambda: _check_layouts(make, checks),
        "dtypes": lambda: _check_dtypes(make, checks), "read_only": lambda: _check_read_only(x, readonly, checks),
        "undescribable": lambda: _check_undescribable(undescribable, checks),
        "table": lambda: check_table(x, checks, spec), "refcount": lambda: _check_refcount(x, checks),
    }
    for name, step in steps.items():
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - a hostile producer fails its row, not the kit
            checks.record(f"{name}.raised", False, f"the producer made the kit's check raise {describe_error(exc)}", C.PROTOCOL)
    return checks


def check_library(library: Library, checks=None) -> Checks:
    return check_producer(library.make, readonly=library.readonly, undescribable=library.undescribable, spec=library.spec, checks=checks)


def _legacy_or_buffer_error(info, error):
    if error is not None:
        return isinstance(error, BufferError), describe_error(error)
    return info["name"] == "dltensor", f"{info['name']} capsule"


def _check_versions(x, checks):
    info, error = export_info(x, any_major=True)
    ok, detail = _legacy_or_buffer_error(info, error)
    checks.record("dlpack.max_version_absent", ok, detail, C.MAX_VERSION_NONE)
    info, error = export_info(x, any_major=True, max_version=(0, 8))
    ok, detail = _legacy_or_buffer_error(info, error)
    checks.record("dlpack.max_version_0", ok, detail, C.MAX_VERSION_NONE)
    info, error = export_info(x, any_major=True, max_version=V1)
    if error is not None:
        checks.record("dlpack.max_version_1", False, describe_error(error), C.MAX_VERSION)
    else:
        # A legacy capsule is allowed ("or of a different version"): the consumer verifies.
        ok = info["version"] is None or info["version"][0] == 1
        checks.record("dlpack.max_version_1", ok, f"{info['name']} {info['version'] or ''}", C.MAX_VERSION)
        checks.record("dlpack.max_version_1_versioned", info["version"] is not None, f"{info['name']} capsule", C.MAX_VERSION, required=False)
        if info["version"] is not None and (1, 2) <= info["version"] < (2, 0):
            checks.record("dlpack.strides_non_null", info["strides"] is not None, f"version {info['version']}, strides {info['strides']}", C.STRIDES)
        else:
            checks.skip("dlpack.strides_non_null", "no capsule of version 1.2 or later", C.STRIDES)
    info, error = export_info(x, any_major=True, max_version=(2, 0))
    if error is not None:
        checks.record("dlpack.max_version_2", False, describe_error(error), C.MAX_VERSION_NEWER)
    else:
        checks.record("dlpack.max_version_2", info["version"] is None or info["version"][0] in (1, 2), f"{info['name']} {info['version'] or ''}", C.MAX_VERSION_NEWER)


def _check_device(x, checks):
    device = tuple(int(v) for v in x.__dlpack_device__())
    info, error = export_info(x, max_version=V1)
    ok = error is None and device == info["device"]
    checks.record("dlpack_device.matches", ok, f"__dlpack_device__ {device}, capsule {info['device'] if info else describe_error(error)}", C.DLPACK_DEVICE)
    same, error = export_info(x, max_version=V1, dl_device=device)
    ok = error is None and info is not None and _first_element(same) == _first_element(info) and same["device"] == device
    checks.record("dl_device.own_device", ok, describe_error(error) if error else f"device {same['device']}, {'same data' if ok else 'other data'}", C.DL_DEVICE_SAME)
    other, error = export_info(x, max_version=V1, dl_device=(abi.KDL_HEXAGON, 0))
    ok = isinstance(error, BufferError)
    checks.record("dl_device.unsupported_type", ok, describe_error(error) if error else f"returned a capsule on {other['device']}", C.DL_DEVICE)
    if device[0] == abi.KDL_CPU:
        # A CPU array asked for CUDA: refusing (with BufferError, as any device it cannot
        # handle) is right; a capsule must then be on CUDA.
        other, error = export_info(x, max_version=V1, dl_device=(abi.KDL_CUDA, 0))
        ok = isinstance(error, BufferError) or (error is None and other["device"] == (abi.KDL_CUDA, 0))
        checks.record("dl_device.honoured", ok, describe_error(error) if error else f"asked for (2, 0), got a capsule on {other['device']}", C.DL_DEVICE)


def _first_element(info) -> int:
    """Where a capsule's tensor starts: its data pointer plus byte_offset (either may carry it)."""
    return info["data"] + info["byte_offset"]


def _check_copy_and_stream(x, checks):
    base, _ = export_info(x, max_version=V1, values=True)
    copied, error = export_info(x, max_version=V1, copy=True, values=True)
    if error is not None:
        checks.record("copy.true", False, describe_error(error), C.COPY_TRUE)
    else:
        moved = base is not None and _first_element(copied) != _first_element(base)
        same_values = base is not None and copied["values"] == base["values"]
        flagged = copied["flags"] is not None and bool(copied["flags"] & abi.FLAG_IS_COPIED)
        # A legacy capsule cannot carry the flag; then only the new memory is checked.
        ok = moved and same_values and (flagged or copied["flags"] is None)
        checks.record("copy.true", ok, f"{'new' if moved else 'same'} memory, {'the same' if same_values else 'other'} values, IS_COPIED {'set' if flagged else 'absent' if copied['flags'] is not None else 'n/a (legacy capsule)'}", C.COPY_TRUE)
    kept, error = export_info(x, max_version=V1, copy=False)
    ok = error is None and base is not None and _first_element(kept) == _first_element(base) and not (kept["flags"] or 0) & abi.FLAG_IS_COPIED
    checks.record("copy.false", ok, describe_error(error) if error else ("same memory, no IS_COPIED" if ok else "copied"), C.COPY_FALSE)
    # IS_COPIED says the consumer alone owns the memory: never on the array's own memory.
    if error is None and base is not None:
        lying = [name for name, info in (("the default export", base), ("copy=False", kept))
                 if (info["flags"] or 0) & abi.FLAG_IS_COPIED and _first_element(info) == _first_element(kept)]
        checks.record("copy.flag_only_on_copies", not lying, f"IS_COPIED on the array's own memory: {', '.join(lying)}" if lying else "not on the array's own memory", C.IS_COPIED)
    if tuple(x.__dlpack_device__())[0] != abi.KDL_CPU:
        return
    _, error = export_info(x, max_version=V1, stream=None)
    checks.record("stream.none_on_cpu", error is None, describe_error(error) if error else "accepted", C.STREAM_CPU)
    _, error = export_info(x, max_version=V1, stream=1)
    checks.record("stream.int_on_cpu_refused", error is not None, describe_error(error) if error else "stream=1 accepted on a CPU array", C.STREAM_CPU)


def _check_capsule_lifetime(x, checks):
    # The versioned capsule's rows keep their names; the legacy capsule's are `capsule.legacy_…`.
    for prefix, max_version in (("capsule.", V1), ("capsule.legacy_", None)):
        capsule, error = export(x, max_version=max_version)
        if error is not None:
            checks.record(f"{prefix}name", False, describe_error(error), C.CAPSULE_NAME)
            continue
        name = abi.capsule_name(capsule) if abi.is_capsule(capsule) else None
        known = name in ((abi.VERSIONED_NAME, abi.LEGACY_NAME) if max_version else (abi.LEGACY_NAME,))
        checks.record(f"{prefix}name", known, repr(name.decode() if name else name), C.CAPSULE_NAME)
        if not known:
            continue
        # Unconsumed: the capsule's destructor must call the deleter, once.
        has_destructor = abi.capsule_has_destructor(capsule)
        spied = Spied(abi.capsule_pointer(capsule), name == abi.VERSIONED_NAME)
        del capsule
        gc.collect()
        calls = spied.forget()
        if not has_destructor:
            checks.record(f"{prefix}unconsumed_deleted_once", False, "the capsule has no destructor: an unconsumed tensor is never deleted", C.CAPSULE_DESTRUCTOR)
        elif calls == 0 and spied.had_deleter:
            # jax's destructor calls its deleter function directly, not through the struct's field:
            # the call cannot be seen from here, which is no evidence of a leak.
            checks.skip(f"{prefix}unconsumed_deleted_once", "the destructor does not call through the struct's deleter field: not measurable", C.CAPSULE_DESTRUCTOR)
        else:
            checks.record(f"{prefix}unconsumed_deleted_once", calls == 1 or not spied.had_deleter, f"deleter calls: {calls}" if spied.had_deleter else "NULL deleter", C.CAPSULE_DESTRUCTOR)
        # Consumed: renamed, the destructor must leave it alone; the consumer's call frees it.
        capsule, _ = export(x, max_version=max_version)
        _, spied = consume(capsule)
        del capsule
        gc.collect()
        after_drop = spied.calls
        spied.delete()
        total = spied.forget()
        checks.record(f"{prefix}consumed_not_deleted", after_drop == 0 and total == 1, f"deleter calls after dropping the used capsule: {after_drop}, after the consumer's call: {total}", C.CAPSULE_DESTRUCTOR)


def _expect(name, build, shape, expected_values, checks):
    try:
        view = build()
    except Exception as exc:  # noqa: BLE001 - the library cannot make this layout
        checks.skip(f"layout.{name}", f"cannot make it: {describe_error(exc)}", C.LAYOUT)
        return None
    info, error = export_info(view, max_version=V1)
    if error is not None:
        checks.record(f"layout.{name}", False, describe_error(error), C.LAYOUT)
        return None
    positions = row_major(info["shape"])
    values = read_values(info, positions) if info["data"] or not positions else None
    ok = info["shape"] == shape and values == expected_values
    checks.record(f"layout.{name}", ok, f"shape {info['shape']}, strides {info['strides']}, values {'as expected' if values == expected_values else values}", C.LAYOUT)
    return info


def _check_layouts(make, checks):
    for name, build, shape, expected in LAYOUT_CASES:
        info = _expect(name, lambda: build(make), shape, expected, checks)
        if name == "zero_size" and info is not None:
            checks.record("layout.zero_size_null_data", info["data"] == 0, f"data {info['data']:#x}", C.ZERO_SIZE, required=False)


def _check_dtypes(make, checks):
    absent = []
    for name, expected in DTYPES.items():
        try:
            x = make((4,), name)
        except Exception:  # noqa: BLE001 - the library has no such dtype
            absent.append(name)
            continue
        info, error = export_info(x, max_version=V1)
        if isinstance(error, BufferError):
            checks.record(f"dtype.{name}", True, f"BufferError (allowed): {describe_error(error)}", C.BUFFER_ERROR)
        elif error is not None:
            checks.record(f"dtype.{name}", False, describe_error(error), C.DTYPE)
        else:
            checks.record(f"dtype.{name}", info["dtype"] == expected, f"(code, bits, lanes) = {info['dtype']}", C.DTYPE)
    if absent:
        checks.skip("dtype.absent", f"not offered: {', '.join(absent)}", C.DTYPE, required=False)


def _check_read_only(x, readonly, checks):
    if readonly is None:
        checks.skip("read_only.flag", "the library has no read-only arrays (or no factory for them)", C.READ_ONLY)
        return
    info, error = export_info(readonly(x), max_version=V1)
    if error is not None:
        checks.record("read_only.flag", isinstance(error, BufferError), describe_error(error), C.READ_ONLY)
    else:
        ok = info["flags"] is not None and bool(info["flags"] & abi.FLAG_READ_ONLY)
        checks.record("read_only.flag", ok, f"flags {info['flags']}", C.READ_ONLY)


def _check_undescribable(undescribable, checks):
    if undescribable is None:
        checks.skip("dlpack.buffer_error", "no factory for an array DLPack cannot describe", C.BUFFER_ERROR, required=False)
        return
    _, error = export_info(undescribable(), max_version=V1)
    checks.record("dlpack.buffer_error", isinstance(error, BufferError), describe_error(error) if error else "exported", C.BUFFER_ERROR)


def _check_refcount(x, checks):
    def rounds(n):
        for _ in range(n):
            export_info(x, max_version=V1)
            export_info(x)
            capsule, _ = export(x, max_version=V1)
            del capsule  # unconsumed: the producer's destructor frees it
            refcount_through_table(x)
        gc.collect()

    rounds(2)  # first calls may fill caches
    before = sys.getrefcount(x)
    rounds(REFCOUNT_ROUNDS)
    after = sys.getrefcount(x)
    checks.record("refcount.flat", before == after, f"sys.getrefcount {before} -> {after} over {REFCOUNT_ROUNDS} rounds", C.REFCOUNT)
