"""Minimal reproductions of every deviation `python -m dlpx.conform` reports for a peer, each
asserting today's (deviating) behaviour with the clause it departs from. A peer that fixes one
makes its test fail here: update the test and the conformance table in docs/conformance.md."""

import gc
import subprocess
import sys

import numpy as np
import pytest

from dlpx.conform import ReferenceProducer, abi, settle

torch = pytest.importorskip("torch")
tvm_ffi = pytest.importorskip("tvm_ffi")
jnp = pytest.importorskip("jax.numpy")
xp = pytest.importorskip("array_api_strict")


# ---- torch ---------------------------------------------------------------------------------


def test_torch_copy_true_does_not_set_is_copied():
    # 002 __dlpack__ copy: "When a copy happens, the DLPACK_FLAG_BITMASK_IS_COPIED flag must be set".
    x = torch.arange(6.0)
    info = abi.read_capsule(x.__dlpack__(max_version=(1, 0), copy=True))
    assert info["data"] != x.data_ptr()  # it did copy
    assert info["flags"] & abi.FLAG_IS_COPIED == 0


def test_torch_and_jax_refuse_cuda_they_cannot_reach_with_runtime_error():
    # 002 __dlpack__ dl_device: "If the device type cannot be handled by the producer, this
    # function must raise BufferError" (both raise RuntimeError on a machine without CUDA).
    for x in (torch.arange(3.0), jnp.arange(3.0)):
        try:
            x.__dlpack__(max_version=(1, 0), dl_device=(abi.KDL_CUDA, 0))
        except BufferError:
            pytest.fail(f"{type(x).__name__} now raises BufferError: update docs/conformance.md")
        except RuntimeError:
            pass
        else:
            pytest.skip("CUDA is reachable here: the export moved to the GPU")


def test_torch_from_dlpack_refuses_major_2_with_runtime_error():
    # 001 Semantics: "If the consumer doesn't support any version below the producer's maximum
    # version, a BufferError should be raised" (torch raises RuntimeError).
    producer = ReferenceProducer(version=(2, 0))
    with pytest.raises(RuntimeError, match="major version") as info:
        torch.from_dlpack(producer)
    assert not isinstance(info.value, BufferError)
    del info
    gc.collect()
    settle()
    assert producer.deleter_calls == [1]


def test_torch_allocator_crashes_on_a_null_set_error():
    # docs/design.md R3: "`SetError` may be NULL"; torch calls it.
    code = (
        "import ctypes, torch\n"
        "from dlpx.conform import abi\n"
        "table = abi.exchange_table(torch.Tensor)\n"
        "out = ctypes.c_void_p()\n"
        "abi.Allocator(table.managed_tensor_allocator)(ctypes.byref(abi.prototype((2, -3))), ctypes.byref(out), None, None)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300)
    assert done.returncode < 0  # killed by a signal (SIGSEGV)


def test_torch_allocator_is_not_256_byte_aligned():
    # 000 DLTensor.data: "This pointer is always aligned to 256 bytes" (recommended only).
    address, _ = abi.exchange_table_address(torch.Tensor)
    table = abi.DLPackExchangeAPI.from_address(address)
    from dlpx.conform.table import data_remainders

    # Eight tensors alive at once: torch aligns to 64 bytes, so any one address is a multiple of
    # 256 a quarter of the time; all eight would be once in 65 536 runs.
    remainders = data_remainders(table, 8)
    assert len(remainders) == 8
    assert any(remainders)


# ---- tvm_ffi -------------------------------------------------------------------------------


def tvm_tensor():
    return tvm_ffi.from_dlpack(np.arange(6.0))


def test_tvm_ffi_max_version_0_raises_attribute_error():
    # 002 recommended producer logic: a pre-1.0 max_version gets the "DLPack 0.X implementation".
    with pytest.raises(AttributeError):
        tvm_tensor().__dlpack__(max_version=(0, 8))


def test_tvm_ffi_copy_true_raises_buffer_error():
    # 002 __dlpack__ copy: "If True, the function must always copy".
    with pytest.raises(BufferError, match="copy"):
        tvm_tensor().__dlpack__(max_version=(1, 0), copy=True)


def test_tvm_ffi_accepts_a_stream_on_cpu():
    # 002 __dlpack__ stream: "On CPU and other device types without streams, only None is accepted".
    assert abi.read_capsule(tvm_tensor().__dlpack__(stream=1))["device"] == (1, 0)


def test_tvm_ffi_from_dlpack_imports_an_unknown_device_type():
    # 001 Semantics: "a device that the requesting library does not support, it is recommended to raise a TypeError".
    producer = ReferenceProducer(device=(99, 0))
    t = tvm_ffi.from_dlpack(producer)
    assert t.__dlpack_device__()[0] == 99
    del t
    gc.collect()
    settle()


# ---- jax -----------------------------------------------------------------------------------


def test_jax_max_version_1_gets_a_legacy_capsule():
    # 002 __dlpack__ max_version: "may return a capsule of version max_version (recommended ...)".
    assert abi.capsule_name(jnp.arange(3.0).__dlpack__(max_version=(1, 0))) == abi.LEGACY_NAME


@pytest.mark.parametrize("from_dlpack", [tvm_ffi.from_dlpack, jnp.from_dlpack], ids=["tvm_ffi", "jax"])
def test_from_dlpack_never_asks_for_a_versioned_capsule(from_dlpack):
    # 002 consumer logic: "try: x.__dlpack__(max_version=(1, 0), ...)" (recommended).
    producer = ReferenceProducer()
    from_dlpack(producer)
    gc.collect()
    settle()
    assert [c.get("max_version") for c in producer.calls] == [None]


# ---- zero-size data pointers (numpy, jax, tvm_ffi, array_api_strict) ------------------------


@pytest.mark.parametrize("make", [
    lambda: np.zeros((0, 3), np.float32),
    lambda: jnp.zeros((0, 3), jnp.float32),
    lambda: tvm_ffi.from_dlpack(np.zeros((0, 3), np.float32)),
    lambda: xp.zeros((0, 3), dtype=xp.float32),
], ids=["numpy", "jax", "tvm_ffi", "array_api_strict"])
def test_zero_size_export_has_a_non_null_data_pointer(make):
    # 001 Implementation: "If the array is of size zero, the data pointer ... should be set to either NULL or 0".
    assert abi.read_capsule(make().__dlpack__())["data"] != 0


# ---- unknown device types: not TypeError (numpy, torch, array_api_strict) -------------------


@pytest.mark.parametrize("from_dlpack, error", [
    (np.from_dlpack, RuntimeError),
    (torch.from_dlpack, BufferError),
    (xp.from_dlpack, RuntimeError),
], ids=["numpy", "torch", "array_api_strict"])
def test_unknown_device_type_is_not_refused_with_type_error(from_dlpack, error):
    # 001 Semantics: "a device that the requesting library does not support, it is recommended to raise a TypeError".
    with pytest.raises(error) as info:
        from_dlpack(ReferenceProducer(device=(99, 0)))
    assert not isinstance(info.value, TypeError)
    del info
    gc.collect()
    settle()
