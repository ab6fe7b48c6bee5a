"""Consumer checks: ``check_consumer(from_dlpack)`` feeds the reference producer (and a
dlpx.Tensor) to a ``from_dlpack`` and watches the deleter, the capsule and the memory."""

from __future__ import annotations

import gc
import sys

from . import abi, clauses as C, reference
from .capsules import describe_error, export_info, read_bytes, read_values, row_major
from .reference import ReferenceProducer, STRAY_DELETES, settle
from .results import Checks

REFCOUNT_ROUNDS = 100
SHAPE = (3, 4)
ARANGE = [float(i) for i in range(12)]
POSITIONS = [(i, j) for i in range(3) for j in range(4)]


def _without_frames(exc):
    """`exc` with its tracebacks dropped: their frames may hold the capsule (torch's
    from_dlpack is Python code), which would keep the kit from settling it."""
    seen = exc
    while seen is not None:
        seen.__traceback__ = None
        seen = seen.__context__ or seen.__cause__
    return exc


class _Import:
    """One ``from_dlpack(producer)``: the result or the error, and what it sees of the memory."""

    def __init__(self, from_dlpack, producer):
        self.producer = producer
        try:
            self.result, self.error = from_dlpack(producer), None
        except Exception as exc:  # noqa: BLE001 - the exception's type is what is judged
            self.result, self.error = None, _without_frames(exc)
        self.seen = None
        if self.result is not None:
            self.seen, error = export_info(self.result, max_version=(1, 3))
            if isinstance(error, TypeError):
                self.seen, _ = export_info(self.result)
        # (name after the import, the used_ name DLPack gives that kind of capsule)
        self.names = [(n, abi.USED_VERSIONED_NAME if t.versioned else abi.USED_LEGACY_NAME)
                      for t in producer.made for n in reference.capsule_names(t)]
        self.calls_while_alive = producer.deleter_calls

    @property
    def zero_copy(self) -> bool:
        made = self.producer.made
        return self.seen is not None and bool(made) and self.seen["data"] + self.seen["byte_offset"] == made[-1].data_address + made[-1].struct.dl_tensor.byte_offset

    def finish(self) -> list:
        """Drop the result, collect, settle the capsules; the deleter calls per tensor."""
        self.result = None
        gc.collect()
        settle()
        return self.producer.deleter_calls


def check_consumer(from_dlpack, *, checks=None) -> Checks:
    """Run every consumer check on `from_dlpack`; returns the recorded checks."""
    checks = Checks() if checks is None else checks
    strays_before = len(STRAY_DELETES)
    _check_versioned(from_dlpack, checks)
    _check_legacy_only(from_dlpack, checks)
    _check_major_2(from_dlpack, checks)
    _check_flags(from_dlpack, checks)
    _check_layouts(from_dlpack, checks)
    _check_dtypes_and_layouts(from_dlpack, checks)
    _check_unknown_device(from_dlpack, checks)
    _check_overflowing_strides(from_dlpack, checks)
    _check_dlpx_tensor(from_dlpack, checks)
    _check_refcount(from_dlpack, checks)
    strays = STRAY_DELETES[strays_before:]
    checks.record("consumer.no_double_delete", not strays, f"{len(strays)} deleter calls for tensors already deleted" if strays else "every deleter ran at most once", C.CONSUMER_OWNS)
    return checks


def _check_versioned(from_dlpack, checks):
    imp = _Import(from_dlpack, ReferenceProducer(shape=SHAPE))
    if imp.error is not None:
        checks.record("consumer.imports", False, describe_error(imp.error), C.ZERO_COPY)
        imp.finish()
        return
    asked = [c.get("max_version") for c in imp.producer.calls]
    checks.record("consumer.asks_versioned", any(v and v[0] >= 1 for v in asked), f"max_version passed: {asked}", C.CONSUMER_ASKS_VERSIONED, required=False)
    if imp.seen is None:
        checks.skip("consumer.zero_copy", "the result has no __dlpack__ to look at its memory", C.ZERO_COPY)
    else:
        checks.record("consumer.zero_copy", imp.zero_copy, "a view of the producer's memory" if imp.zero_copy else "a copy", C.ZERO_COPY)
    # Exactly the used_ name of its kind: a versioned capsule renamed used_dltensor is not.
    used = all(name == expected for name, expected in imp.names)
    shown = [name.decode() if name else name for name, _ in imp.names]
    checks.record("consumer.capsule_renamed", used, f"capsule names after import: {shown}", C.CONSUMER_RENAMES)
    alive = imp.calls_while_alive
    after = imp.finish()
    ok = after == [1] and (alive == [0] or not imp.zero_copy)
    checks.record("consumer.deleter_after_death", ok, f"deleter calls while the import lives: {alive}, after it dies: {after}", C.CONSUMER_OWNS)


def _check_legacy_only(from_dlpack, checks):
    imp = _Import(from_dlpack, ReferenceProducer(shape=SHAPE, legacy_only=True))
    zero_copy = imp.zero_copy
    after = imp.finish()
    ok = imp.error is None and after == [1]
    detail = describe_error(imp.error) if imp.error else f"{'zero-copy' if zero_copy else 'copied'}, deleter calls {after}, calls {imp.producer.calls}"
    checks.record("consumer.legacy_only_producer", ok, detail, C.CONSUMER_FALLBACK)


def _check_major_2(from_dlpack, checks):
    imp = _Import(from_dlpack, ReferenceProducer(shape=SHAPE, version=(2, 0)))
    after = imp.finish()
    if imp.producer.made and not imp.producer.made[0].versioned:
        checks.skip("consumer.major_2_refused", "the consumer never asks for a versioned capsule", C.CONSUMER_MAJOR)
        return
    ok = isinstance(imp.error, BufferError) and after == [1]
    detail = (describe_error(imp.error) if imp.error else "imported a major-2 tensor") + f"; deleter calls {after}"
    checks.record("consumer.major_2_refused", ok, detail, C.CONSUMER_MAJOR)


def _flags_flagged(seen, flag):
    return seen is not None and seen.get("flags") is not None and bool(seen["flags"] & flag)


def _check_flags(from_dlpack, checks):
    imp = _Import(from_dlpack, ReferenceProducer(shape=SHAPE, flags=abi.FLAG_READ_ONLY))
    versioned = bool(imp.producer.made) and imp.producer.made[0].versioned
    honoured = not imp.zero_copy or _flags_flagged(imp.seen, abi.FLAG_READ_ONLY)
    after = imp.finish()
    if not versioned:
        checks.skip("consumer.read_only", "the consumer never asks for a versioned capsule (no flags)", C.CONSUMER_READ_ONLY, required=False)
    else:
        # Honouring the flag and ignoring it are both right; raising is what the spec advises against.
        detail = describe_error(imp.error) if imp.error else ("honoured: the import is read-only or a copy" if honoured else "ignored: the import is a writable view")
        checks.record("consumer.read_only", imp.error is None and after == [1], detail + f"; deleter calls {after}", C.CONSUMER_READ_ONLY, required=False)

    imp = _Import(from_dlpack, ReferenceProducer(shape=SHAPE, flags=abi.FLAG_IS_COPIED))
    zero_copy = imp.zero_copy
    after = imp.finish()
    ok = imp.error is None and after == [1]
    checks.record("consumer.is_copied", ok, describe_error(imp.error) if imp.error else f"{'zero-copy' if zero_copy else 'copied again'}, deleter calls {after}", C.CONSUMER_IS_COPIED)

    imp = _Import(from_dlpack, ReferenceProducer(shape=(4,), dtype=(17, 4, 1), flags=abi.FLAG_IS_SUBBYTE_TYPE_PADDED))
    after = imp.finish()
    outcome = describe_error(imp.error) if imp.error else "imported"
    checks.record("consumer.padded_subbyte", after == [1], f"{outcome}; deleter calls {after}", C.CONSUMER_SUBBYTE)


def _check_layouts(from_dlpack, checks):
    imp = _Import(from_dlpack, ReferenceProducer(shape=SHAPE, strides=None, legacy_only=True))
    values = read_values(imp.seen, POSITIONS) if imp.seen else None
    after = imp.finish()
    ok = imp.error is None and values == ARANGE and after == [1]
    detail = describe_error(imp.error) if imp.error else f"strides seen {imp.seen and imp.seen['strides']}, values {'row-major' if values == ARANGE else values}"
    checks.record("consumer.null_strides_row_major", ok, detail, C.CONSUMER_NULL_STRIDES)

    imp = _Import(from_dlpack, ReferenceProducer(shape=(4,), byte_offset=16))
    values = read_values(imp.seen, [(i,) for i in range(4)]) if imp.seen else None
    after = imp.finish()
    ok = imp.error is None and values == ARANGE[:4] and after == [1]
    checks.record("consumer.byte_offset", ok, describe_error(imp.error) if imp.error else f"values {values}, deleter calls {after}", C.BYTE_OFFSET)


#: The dtypes the value check imports, (code, bits): every byte-sized one numpy, torch and jax
#: all name, bool among them.
CHECKED_DTYPES = {"int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64), "uint8": (1, 8),
                  "float16": (2, 16), "float64": (2, 64), "complex64": (5, 64), "complex128": (5, 128),
                  "bool": (abi.KDL_BOOL, 8)}
#: Layouts within a compact buffer: (shape, strides in elements; None for compact row-major).
CHECKED_LAYOUTS = {"row-major": ((3, 4), None), "column-major": ((3, 4), (1, 3)), "0-d": ((), None)}


def _check_dtypes_and_layouts(from_dlpack, checks):
    """Each dtype in each layout: the import holds the producer's bytes, element by element (a
    view or a copy), or refuses with an exception, or converts to another dtype (its values are
    then not compared); the deleter runs once either way."""
    wrong, refused, converted, unseen, deletes = [], [], [], 0, []
    for name, (code, bits) in CHECKED_DTYPES.items():
        for layout, (shape, strides) in CHECKED_LAYOUTS.items():
            options = {"shape": shape, "dtype": (code, bits, 1)}
            if strides is not None:
                options["strides"] = strides
            imp = _Import(from_dlpack, ReferenceProducer(**options))
            case = f"{name} {layout}"
            if imp.error is not None:
                refused.append(f"{case} ({type(imp.error).__name__})")
            elif imp.seen is None or imp.seen["device"][0] != abi.KDL_CPU:
                unseen += 1
            elif imp.seen["dtype"] != (code, bits, 1):
                # Another dtype is the consumer's choice (jax without x64 makes int64 int32).
                converted.append(f"{case} to {imp.seen['dtype']}")
            else:
                made = imp.producer.made[-1]
                sent = {"data": made.data_address, "byte_offset": made.struct.dl_tensor.byte_offset,
                        "shape": shape, "strides": strides}
                positions = row_major(shape)
                same_shape = tuple(imp.seen["shape"]) == tuple(shape)
                if not same_shape or read_bytes(imp.seen, positions, bits // 8) != read_bytes(sent, positions, bits // 8):
                    wrong.append(case if same_shape else f"{case} (shape {tuple(imp.seen['shape'])})")
            after = imp.finish()
            if after != [1]:
                deletes.append(f"{case}: {after}")
    total = len(CHECKED_DTYPES) * len(CHECKED_LAYOUTS)
    held = total - len(wrong) - len(refused) - len(converted) - unseen
    detail = (f"{held} of {total} imports hold the producer's values"
              + (f"; wrong: {', '.join(wrong)}" if wrong else "")
              + (f"; refused: {', '.join(refused)}" if refused else "")
              + (f"; converted (not compared): {', '.join(converted)}" if converted else "")
              + (f"; {unseen} not looked at (no CPU __dlpack__ on the result)" if unseen else "")
              + (f"; deleter calls {', '.join(deletes)}" if deletes else ""))
    checks.record("consumer.values_of_each_dtype_and_layout", not wrong and not deletes, detail, C.ZERO_COPY)


def _check_unknown_device(from_dlpack, checks):
    imp = _Import(from_dlpack, ReferenceProducer(shape=SHAPE, device=(99, 0)))
    after = imp.finish()
    checks.record("consumer.unknown_device_deleted", all(c == 1 for c in after), f"deleter calls {after}", C.CONSUMER_OWNS)
    detail = describe_error(imp.error) if imp.error else "imported a tensor on device type 99"
    checks.record("consumer.unknown_device_type_error", isinstance(imp.error, TypeError), detail, C.CONSUMER_DEVICE, required=False)


def _check_overflowing_strides(from_dlpack, checks):
    """Strides whose byte offsets overflow 64 bits (2^61 float32 elements: the byte stride wraps to
    INT64_MIN) must be refused, not read through a wrapped stride, and the tensor deleted once.
    Advisory: the spec leaves hostile layouts to the consumer; torch refuses this one."""
    imp = _Import(from_dlpack, ReferenceProducer(shape=(2, 4), strides=(2**61, 1)))
    after = imp.finish()
    detail = describe_error(imp.error) if imp.error else "imported strides whose byte offsets overflow"
    checks.record("consumer.overflowing_strides_refused", imp.error is not None and after == [1], f"{detail}; deleter calls {after}", C.CONSUMER_OVERFLOW, required=False)


def _check_dlpx_tensor(from_dlpack, checks):
    try:
        import dlpx
    except ImportError as exc:
        checks.skip("consumer.dlpx_tensor", describe_error(exc), C.ZERO_COPY)
        return
    t = dlpx.empty((4,), dtype="float32")
    try:
        y = from_dlpack(t)
    except Exception as exc:  # noqa: BLE001
        checks.record("consumer.dlpx_tensor", False, describe_error(exc), C.ZERO_COPY)
        return
    seen, _ = export_info(y, max_version=(1, 3))
    ok = seen is not None and seen["data"] + seen["byte_offset"] == t.data_ptr
    checks.record("consumer.dlpx_tensor", ok, "a view of the dlpx.Tensor" if ok else "a copy", C.ZERO_COPY)


def _check_refcount(from_dlpack, checks):
    producer = ReferenceProducer(shape=SHAPE)
    try:
        import dlpx

        tensor = dlpx.empty((4,), dtype="float32")
    except ImportError:
        tensor = None

    def rounds(n):
        for _ in range(n):
            for source in (producer, tensor):
                try:
                    from_dlpack(source)
                except Exception:  # noqa: BLE001 - failures are judged elsewhere; leaks here
                    pass
        gc.collect()
        settle()

    rounds(2)
    before = sys.getrefcount(producer), sys.getrefcount(tensor)
    rounds(REFCOUNT_ROUNDS)
    after = sys.getrefcount(producer), sys.getrefcount(tensor)
    calls = producer.deleter_calls
    ok = before == after and all(c == 1 for c in calls)
    checks.record("consumer.refcount_flat", ok, f"refcounts (producer, dlpx.Tensor) {before} -> {after}; {sum(calls)} deleter calls for {len(calls)} imports", C.REFCOUNT)
