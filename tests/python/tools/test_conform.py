"""The conformance kit (python -m dlpx.conform): dlpx passes its own checks, the checks can
fail (a deliberately broken producer and consumer are caught), the CLI's exit codes (0, 1, and
2 for what does not exist or cannot be loaded here) and JSON."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dlpx
from direct_reads import serves
from dlpx.conform import ReferenceProducer, ReferenceTensor, check_consumer, check_producer, settle
from dlpx.conform.libraries import load
from dlpx.conform.producer import check_library


def failed(checks, required_only=True):
    return {c.name: c.detail for c in checks if c.status == "fail" and (c.required or not required_only)}


def test_dlpx_passes_every_required_producer_check():
    assert failed(check_library(load("dlpx"))) == {}


def test_dlpx_passes_every_required_consumer_check():
    assert failed(check_consumer(dlpx.from_dlpack)) == {}


@pytest.mark.parametrize("library", [pytest.param(row, marks=pytest.mark.direct_read(row))
                                     for row in ("numpy", "tvm_ffi", "jax", "array_api_strict")])
def test_dlpx_synthetic_table_for_each_table_less_producer_passes_the_checks_torchs_table_takes(library):
    pytest.importorskip("torch")  # the yardstick
    pytest.importorskip(library)
    # The table's entries are held to the producer's own __dlpack__: served by the row's direct
    # read, or the check would compare __dlpack__ with itself.
    with serves(library):
        checks = check_library(load(library))
    synthetic = {c.name[len("synthetic."):]: c for c in checks if c.name.startswith("synthetic.")}
    torchs = {c.name for c in check_library(load("torch")) if c.name.split(".")[0] in
              ("table", "allocator", "from_py", "to_py", "view", "current_work_stream")}
    # The same checks (torch's table also has its attribute checks: published, capsule, int, stable).
    assert torchs - {"table.published", "table.capsule", "table.int_form", "table.stable", "table.header_version"} <= set(synthetic)
    assert {name: c.detail for name, c in synthetic.items() if c.status == "fail"} == {}
    assert synthetic["from_py.exports"].status == synthetic["to_py.imports"].status == "pass"


@pytest.mark.xfail(strict=True, reason="dlpx bug: from_dlpack of a tensor on an unknown device type (99) raises BufferError; "
                   "001 Semantics recommends TypeError for 'a device that the requesting library does not support'")
def test_dlpx_passes_every_recommended_consumer_check():
    assert failed(check_consumer(dlpx.from_dlpack), required_only=False) == {}


class _NoFlagOnCopy:
    """numpy's array behind a __dlpack__ that drops IS_COPIED and accepts any stream."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        producer = ReferenceProducer(shape=self.array.shape)
        capsule = producer.__dlpack__(max_version=max_version)
        if copy:
            producer.made[-1].struct.flags = 0  # the deliberate break: a copy without IS_COPIED
        else:
            # One memory for every non-copy export, as a real producer has.
            producer.made[-1].struct.dl_tensor.data = self.array.ctypes.data
        return capsule

    def __dlpack_device__(self):
        return (1, 0)


def test_a_broken_producer_fails_its_checks():
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    checks = check_producer(lambda shape, dtype: _NoFlagOnCopy(base))
    bad = failed(checks)
    assert "copy.true" in bad and "stream.int_on_cpu_refused" in bad
    settle()


def test_a_broken_consumer_fails_its_checks():
    def never_deletes(x):
        # Takes the capsule (renames it) and never calls the deleter: a leak the kit must see.
        from dlpx.conform import abi

        capsule = x.__dlpack__(max_version=(1, 0))
        abi.rename_capsule(capsule, abi.USED_VERSIONED_NAME if abi.capsule_name(capsule) == abi.VERSIONED_NAME else abi.USED_LEGACY_NAME)
        return np.zeros(1)

    bad = failed(check_consumer(never_deletes))
    assert {"consumer.deleter_after_death", "consumer.zero_copy", "consumer.major_2_refused"} <= set(bad)


def test_a_consumer_that_renames_a_versioned_capsule_used_dltensor_fails():
    # 002: a versioned capsule is renamed "used_dltensor_versioned"; any "used_" name passed.
    def wrong_used_name(x):
        from dlpx.conform import abi

        capsule = x.__dlpack__(max_version=(1, 0))
        abi.rename_capsule(capsule, abi.USED_LEGACY_NAME)
        return dlpx.from_dlpack(np.zeros(1))

    assert "consumer.capsule_renamed" in failed(check_consumer(wrong_used_name))


def test_a_consumer_that_reads_strides_as_row_major_or_loses_bytes_fails_the_value_check():
    # Each reads through dlpx first, which refuses the kit's hostile strides (numpy does not).
    def ignores_strides(x):
        a = np.from_dlpack(dlpx.from_dlpack(x))
        compact = np.lib.stride_tricks.as_strided(a, strides=np.empty(a.shape, a.dtype).strides)
        return compact.copy()

    def drops_the_last_byte(x):
        a = np.from_dlpack(dlpx.from_dlpack(x)).copy()
        last = a.reshape(-1).view(np.uint8)[-1:]
        last ^= 1  # a bool stays 0 or 1
        return a

    detail = failed(check_consumer(ignores_strides))["consumer.values_of_each_dtype_and_layout"]
    assert "wrong: int8 column-major" in detail and "row-major," not in detail.split("wrong:")[1], detail
    detail = failed(check_consumer(drops_the_last_byte))["consumer.values_of_each_dtype_and_layout"]
    assert "int8 row-major" in detail and "int64 0-d" in detail and "bool column-major" in detail, detail
    # numpy's own reading holds every value.
    assert "consumer.values_of_each_dtype_and_layout" not in failed(check_consumer(np.from_dlpack))


def test_reference_tensor_sets_hostile_fields():
    t = ReferenceTensor(shape=(2**63, -1), dtype=(200, 7, 0), ndim=5, device=(99, -1), version=(2, 9), flags=0xFF, deleter=None, strides=None)
    dl = t.struct.dl_tensor
    assert (dl.shape[0], dl.shape[1], dl.ndim) == (-(2**63), -1, 5)
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (200, 7, 0)
    assert (dl.device.device_type, dl.device.device_id) == (99, -1)
    assert (t.struct.version.major, t.struct.flags, t.struct.deleter, bool(dl.strides)) == (2, 0xFF, None, False)


def test_reference_capsule_deletes_once_unless_consumed():
    from dlpx.conform import abi

    kept, dropped = ReferenceTensor(), ReferenceTensor()
    capsule = kept.capsule()
    abi.rename_capsule(capsule, abi.USED_VERSIONED_NAME)
    del capsule
    dropped.capsule()  # dropped at once, unconsumed
    settle()
    assert (kept.deleter_calls, dropped.deleter_calls) == (0, 1)
    abi.call_deleter(kept.address, kept.struct.deleter)
    assert kept.deleter_calls == 1


def _python(*args):
    # The child must import conform_broken_producer from this directory and the helpers it
    # needs, as conftest lets us.
    here = os.path.dirname(os.path.abspath(__file__))
    helpers = os.path.join(here, "..", "helpers")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(filter(None, [here, helpers, os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)


def _cli(*args):
    return _python("-m", "dlpx.conform", *args)


def test_cli_exit_zero_for_dlpx_and_json_shape():
    done = _cli("dlpx", "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["ok"] is True
    [library] = report["libraries"]
    check = library["producer"][0]
    assert set(check) == {"name", "status", "required", "detail", "clause"}
    assert set(check["clause"]) == {"file", "section", "quote"}


@pytest.mark.parametrize("typo, named", [
    (["nunpy"], "unknown library 'nunpy'"),
    (["--producer", "numpy:nosuchfn"], "module 'numpy' has no function 'nosuchfn'"),
    (["--producer", "nosuchmod:fn"], "cannot import module 'nosuchmod'"),
])  # fmt: skip
def test_cli_exit_two_naming_what_does_not_exist(typo, named):
    # Beside a library that conforms: one typo is enough to make the run no verdict.
    done = _cli("dlpx", *typo)
    assert done.returncode == 2, f"status {done.returncode} for a typo; stdout:\n{done.stdout[-2000:]}"
    assert done.stderr.splitlines() == [done.stderr.strip()] and named in done.stderr, done.stderr
    assert done.stdout == "", done.stdout[-2000:]  # no table: nothing reads as a verdict


def test_cli_exit_two_when_a_built_in_library_s_peer_is_missing():
    # cupy made unimportable whatever this machine has (None in sys.modules): a library whose
    # peer is missing was not checked, which is no verdict either.
    code = "import sys; sys.modules['cupy'] = None; from dlpx.conform.__main__ import main; sys.exit(main(['dlpx', 'cupy']))"
    done = _python("-c", code)
    assert done.returncode == 2, f"status {done.returncode}; stdout:\n{done.stdout[-2000:]}"
    assert done.stderr.startswith("dlpx: conform: cupy: not usable here (ModuleNotFoundError"), done.stderr
    assert done.stdout == "", done.stdout[-2000:]  # no table: nothing reads as a verdict


def test_cli_exit_one_when_a_required_check_fails():
    done = _cli("--producer", "conform_broken_producer:make")
    assert done.returncode == 1, done.stdout[-2000:]
    assert "DOES NOT CONFORM" in done.stdout and "copy.true" in done.stdout


@pytest.mark.parametrize("library", ["buffer", "array_interface"])
def test_an_object_that_speaks_only_an_older_protocol_gets_that_protocol_s_checks(library):
    from dlpx.conform.report import run_library

    run = run_library(load(library))
    names = {c.name for c in run["producer"]}
    assert {"protocol.no_dlpack", "layout.non_contiguous", "read_only.kept", "lifetime.exporter_held"} <= names
    assert not any(n.startswith("dlpack.") or n.startswith("capsule.") for n in names)
    assert run["producer"].ok, [(c.name, c.detail) for c in run["producer"] if c.failed_required]


def test_the_protocol_checks_catch_a_consumer_that_reads_a_buffer_wrong(monkeypatch):
    from dlpx.conform import protocols

    real = dlpx.from_dlpack
    monkeypatch.setattr(dlpx, "from_dlpack", lambda x, **kw: real(bytes(x)) if isinstance(x, memoryview) else real(x, **kw))
    checks = protocols.check_protocol_producer(lambda shape, dtype: memoryview(np.arange(int(np.prod(shape))).astype(dtype).reshape(shape)), "buffer protocol")
    assert not checks.ok
