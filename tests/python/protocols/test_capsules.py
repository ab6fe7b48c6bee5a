"""DLPack capsules in and out of dlpx: consumed capsules are renamed, an unconsumed capsule frees
its tensor exactly once, a consumed one never; a capsule is consumed once; unknown majors are
deleted and refused (docs/design.md R7); tensors that fail validation stay with their capsule.

The tensors under test are hand-made (numpy_producers.Managed) so each deleter call is counted."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
torch = pytest.importorskip("torch")  # not on the free-threaded interpreters

from dlpx.conform import abi
from numpy_producers import Managed, CapsuleHolder
import dlpx


def counted_tensor(values=(1.0, 2.0, 3.0, 4.0)):
    """A dlpx tensor over a hand-made managed tensor, and that managed tensor."""
    managed = Managed(np.array(values, dtype=np.float64))
    return dlpx.from_dlpack(managed.capsule()), managed


def collect():
    """CPython frees these objects by reference counting; no cycle collection is needed."""


# ---- dlpx's own capsules: the destructor ---------------------------------------------------------


@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
def test_an_unconsumed_capsule_frees_its_tensor_once(max_version):
    t, managed = counted_tensor()
    capsule = t.__dlpack__(max_version=max_version)
    del t
    collect()
    assert managed.calls == 0  # the capsule still owns a reference
    del capsule
    collect()
    assert managed.calls == 1


@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
def test_a_consumed_capsule_frees_nothing_its_consumer_does(max_version):
    t, managed = counted_tensor()
    capsule = t.__dlpack__(max_version=max_version)
    array = np.from_dlpack(CapsuleHolder(capsule))
    assert abi.capsule_name(capsule).startswith(b"used_")
    del t, capsule
    collect()
    assert managed.calls == 0
    np.testing.assert_array_equal(array, [1.0, 2.0, 3.0, 4.0])
    del array
    collect()
    assert managed.calls == 1


def test_a_capsule_consumed_by_torch_is_freed_by_torch():
    t, managed = counted_tensor()
    capsule = t.__dlpack__()
    tt = torch.from_dlpack(capsule)
    assert abi.capsule_name(capsule) == b"used_dltensor"
    del t, capsule
    collect()
    assert managed.calls == 0
    assert tt.tolist() == [1.0, 2.0, 3.0, 4.0]
    del tt
    collect()
    assert managed.calls == 1


def test_many_exports_free_the_tensor_after_the_last():
    t, managed = counted_tensor()
    capsules = [t.__dlpack__(max_version=(1, 3)) for _ in range(4)] + [t.__dlpack__() for _ in range(4)]
    del t
    while capsules:
        collect()
        assert managed.calls == 0
        capsules.pop()
    collect()
    assert managed.calls == 1


# ---- consuming capsules --------------------------------------------------------------------------


@pytest.mark.parametrize("max_version, used", [(None, b"used_dltensor"), ((1, 3), b"used_dltensor_versioned")])
def test_dlpx_renames_the_capsule_it_consumes(max_version, used):
    t, managed = counted_tensor()
    capsule = t.__dlpack__(max_version=max_version)
    u = dlpx.from_dlpack(capsule)
    assert abi.capsule_name(capsule) == used
    assert u.data_ptr == t.data_ptr
    del t, capsule
    collect()
    assert managed.calls == 0
    del u
    collect()
    assert managed.calls == 1


@pytest.mark.parametrize(
    "make_capsule, used",
    [
        (lambda: np.arange(3.0).__dlpack__(), b"used_dltensor"),
        (lambda: np.arange(3.0).__dlpack__(max_version=(1, 0)), b"used_dltensor_versioned"),
        (lambda: torch.arange(3.0).__dlpack__(), b"used_dltensor"),
        (lambda: torch.arange(3.0).__dlpack__(max_version=(1, 0)), b"used_dltensor_versioned"),
    ],
    ids=["numpy-legacy", "numpy-versioned", "torch-legacy", "torch-versioned"],
)
def test_dlpx_consumes_peer_capsules(make_capsule, used):
    capsule = make_capsule()
    t = dlpx.from_dlpack(capsule)
    assert abi.capsule_name(capsule) == used
    assert t.shape == (3,)
    np.testing.assert_array_equal(np.from_dlpack(t), [0.0, 1.0, 2.0])


def test_a_capsule_is_consumed_only_once():
    capsule = dlpx.empty((2,)).__dlpack__(max_version=(1, 3))
    dlpx.from_dlpack(capsule)
    with pytest.raises(BufferError, match=r"^dlpx: from_dlpack: .*already consumed"):
        dlpx.from_dlpack(capsule)


def test_a_legacy_capsule_is_consumed_only_once():
    capsule = np.zeros(2).__dlpack__()
    dlpx.from_dlpack(capsule)
    with pytest.raises(BufferError, match=r"already consumed"):
        dlpx.from_dlpack(capsule)


def test_a_capsule_another_consumer_took_is_refused():
    capsule = dlpx.empty((2,)).__dlpack__(max_version=(1, 3))
    np.from_dlpack(CapsuleHolder(capsule))
    with pytest.raises(BufferError, match=r"already consumed"):
        dlpx.from_dlpack(capsule)


@pytest.mark.parametrize("name", [b"something_else", b"dltensor_versioned_", b"DLTENSOR"])
def test_a_capsule_with_a_foreign_name_is_a_type_error(name):
    managed = Managed(np.zeros(2))
    capsule = abi.new_capsule(managed.address, name)
    with pytest.raises(TypeError, match=r"^dlpx: from_dlpack: .*" + name.decode()):
        dlpx.from_dlpack(capsule)
    assert managed.calls == 0
    abi.call_deleter(managed.address, managed.struct.deleter)


def test_the_exchange_api_capsule_is_not_a_tensor():
    with pytest.raises(TypeError, match=r"dlpack_exchange_api"):
        dlpx.from_dlpack(dlpx.Tensor.__dlpack_c_exchange_api__)


# ---- versions (docs/design.md R7) -------------------------------------------------------------------------


@pytest.mark.parametrize("major", [0, 2, 3, 255])
def test_an_unknown_major_is_deleted_and_refused(major):
    managed = Managed(np.arange(4.0), version=(major, 0))
    capsule = managed.capsule()
    with pytest.raises(BufferError, match=rf"^dlpx: from_dlpack: .*major version {major}"):
        dlpx.from_dlpack(capsule)
    assert managed.calls == 1  # the deleter ran ...
    assert abi.capsule_name(capsule) == b"used_dltensor_versioned"  # ... and the capsule will not run it again
    managed.release(capsule)
    assert managed.calls == 1


def test_a_dlpx_capsule_patched_to_major_2_is_refused_and_released():
    t, managed = counted_tensor()
    capsule = t.__dlpack__(max_version=(1, 3))
    abi.managed_at(abi.capsule_pointer(capsule)).version.major = 2
    with pytest.raises(BufferError, match=r"major version 2"):
        dlpx.from_dlpack(capsule)
    assert abi.capsule_name(capsule) == b"used_dltensor_versioned"
    del t
    collect()
    assert managed.calls == 1  # the export's deleter ran: nothing holds the tensor any more
    del capsule
    collect()
    assert managed.calls == 1


@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
def test_an_export_whose_owner_rewrote_it_comes_home_as_it_says(max_version):
    # The capsule's owner made it a view of row 1 (one dimension, byte_offset 16): it was taken
    # back as the whole tensor. As exported, it still comes home as the tensor itself.
    import ctypes

    t = dlpx.from_dlpack(np.arange(12, dtype=np.int32).reshape(3, 4))
    assert dlpx.from_dlpack(t.__dlpack__(max_version=max_version)).data_ptr == t.data_ptr
    capsule = t.__dlpack__(max_version=max_version)
    m = abi.managed_at(abi.capsule_pointer(capsule), versioned=max_version is not None)
    shape, strides = (ctypes.c_int64 * 1)(4), (ctypes.c_int64 * 1)(1)
    m.dl_tensor.ndim, m.dl_tensor.byte_offset = 1, 16
    m.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    m.dl_tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    row = dlpx.from_dlpack(capsule)
    assert row.shape == (4,) and np.from_dlpack(row).tolist() == [4, 5, 6, 7]
    del t
    assert np.from_dlpack(row).tolist() == [4, 5, 6, 7]  # the export keeps the memory


@pytest.mark.parametrize("minor", [0, 2, 3, 4, 99])
def test_any_minor_of_major_1_is_accepted(minor):
    managed = Managed(np.arange(3.0), version=(1, minor))
    t = dlpx.from_dlpack(managed.capsule())
    np.testing.assert_array_equal(np.from_dlpack(t), [0.0, 1.0, 2.0])
    del t
    collect()
    assert managed.calls == 1


# ---- validation of what a producer sends ---------------------------------------------------------

BAD_TENSORS = {
    "unknown-device": dict(device=(99, 0)),
    "negative-ndim": dict(ndim=-1),
    "too-many-dims": dict(ndim=1000),
    "unknown-dtype-code": dict(dtype=(200, 8, 1)),
    "zero-bits": dict(dtype=(2, 0, 1)),
    "zero-lanes": dict(dtype=(2, 32, 0)),
    "bool-of-16-bits": dict(dtype=(6, 16, 1)),
    "null-data": dict(null_data=True),
}


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
@pytest.mark.parametrize("defect", sorted(BAD_TENSORS))
def test_a_malformed_tensor_is_refused_and_left_to_its_capsule(defect, versioned):
    managed = Managed(np.arange(4.0, dtype=np.float32), versioned=versioned, **BAD_TENSORS[defect])
    capsule = managed.capsule()
    with pytest.raises(BufferError, match=r"^dlpx: from_dlpack: "):
        dlpx.from_dlpack(capsule)
    assert managed.calls == 0
    assert abi.capsule_name(capsule) == managed.capsule_name  # still owned by the capsule
    managed.release(capsule)
    assert managed.calls == 1


def test_null_data_is_fine_for_a_zero_size_tensor():
    managed = Managed(np.empty((2, 0)), null_data=True)
    t = dlpx.from_dlpack(managed.capsule())
    assert t.shape == (2, 0)
    assert t.data_ptr == 0


def test_null_strides_from_a_legacy_producer_mean_row_major():
    managed = Managed(np.arange(24.0).reshape(2, 3, 4), versioned=False, null_strides=True)
    t = dlpx.from_dlpack(managed.capsule())
    assert t.strides == (12, 4, 1)
    assert t.is_contiguous
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(24.0).reshape(2, 3, 4))
    exported = abi.read_capsule(t.__dlpack__(max_version=(1, 3)))
    assert exported["strides"] == (12, 4, 1)  # R5: never NULL on the way out


def test_the_readonly_flag_of_a_capsule_is_kept():
    managed = Managed(np.arange(3.0), flags=abi.FLAG_READ_ONLY)
    t = dlpx.from_dlpack(managed.capsule())
    assert t.readonly
    assert abi.read_capsule(t.__dlpack__(max_version=(1, 3)))["flags"] & abi.FLAG_READ_ONLY


def test_the_is_copied_flag_of_a_capsule_is_not_passed_on():
    managed = Managed(np.arange(3.0), flags=abi.FLAG_IS_COPIED)
    t = dlpx.from_dlpack(managed.capsule())
    # The copy was made for dlpx's import; dlpx's own exports of it share memory.
    assert abi.read_capsule(t.__dlpack__(max_version=(1, 3)))["flags"] & abi.FLAG_IS_COPIED == 0


def test_flag_bits_dlpack_1_3_does_not_define_are_not_passed_on():
    # A newer producer's bit means what dlpx cannot know: a 1.3 export does not vouch for it.
    unknown = (1 << 5) | (1 << 63)
    t = dlpx.from_dlpack(Managed(np.arange(3.0), flags=unknown | abi.FLAG_READ_ONLY).capsule())
    assert abi.read_capsule(t.__dlpack__(max_version=(1, 3)))["flags"] == abi.FLAG_READ_ONLY
    TABLE = abi.exchange_table(dlpx.Tensor)
    address = ctypes.c_void_p()
    assert abi.FromPyObject(TABLE.managed_tensor_from_py_object_no_sync)(t, ctypes.byref(address)) == 0
    assert abi.managed_at(address.value).flags == abi.FLAG_READ_ONLY
    abi.call_deleter(address.value, abi.managed_at(address.value).deleter)


@pytest.mark.parametrize("device_id", [1, 7])
def test_cpu_memory_is_cpu_0_whatever_index_its_producer_wrote(device_id):
    # DLPack: "for vanilla CPU memory ... this is set to 0"; jax exports its second CPU device's
    # arrays as CPU 1. dlpx imported cpu:1, then refused to copy it ("device_id must be 0").
    managed = Managed(np.arange(4.0), device=(abi.KDL_CPU, device_id))
    t = dlpx.from_dlpack(managed.capsule())
    assert str(t.device) == "cpu:0" and t.__dlpack_device__() == (1, 0)
    assert np.from_dlpack(dlpx.from_dlpack(t, copy=True)).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert abi.read_capsule(t.__dlpack__(max_version=(1, 3)))["device"] == (1, 0)


def test_jax_s_second_cpu_device_is_read_copied_and_viewed_as_cpu_0():
    pytest.importorskip("jax")
    code = """if True:
        import copy, jax, jax.numpy as jnp, numpy as np, dlpx
        x = jax.device_put(jnp.arange(4.0), jax.devices("cpu")[1])
        t = dlpx.from_dlpack(x)
        assert str(t.device) == "cpu:0", t.device
        for made in (dlpx.from_dlpack(x, copy=True), copy.copy(t), dlpx.from_dlpack(x, device=x.device, copy=False)):
            assert np.from_dlpack(made).tolist() == [0.0, 1.0, 2.0, 3.0]
        print("ok")
    """
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


# ---- tensors on devices dlpx does not allocate on --------------------------------------------------


def test_a_cuda_host_tensor_is_copied_only_when_cpu_is_asked_for():
    source = np.arange(4.0)
    managed = Managed(source, device=(3, 0))  # host memory in fact, described as cuda_host
    t = dlpx.from_dlpack(managed.capsule())
    assert t.device == "cuda_host:0"
    assert t.data_ptr == source.ctypes.data
    info = abi.read_capsule(t.__dlpack__(dl_device=(1, 0), max_version=(1, 3)))
    assert info["device"] == (1, 0)
    assert info["flags"] & abi.FLAG_IS_COPIED
    assert info["data"] != source.ctypes.data
    with pytest.raises(BufferError, match=r"copy=False"):
        t.__dlpack__(dl_device=(1, 0), copy=False, max_version=(1, 3))
    on_cpu = dlpx.from_dlpack(t, device="cpu")
    assert on_cpu.device == "cpu"
    assert on_cpu.data_ptr != source.ctypes.data
    np.testing.assert_array_equal(np.from_dlpack(on_cpu), source)
    with pytest.raises(BufferError, match=r"copy=False"):
        dlpx.from_dlpack(t, device="cpu", copy=False)


def test_a_cuda_tensor_is_carried_but_never_read():
    managed = Managed(np.arange(4.0), device=(2, 0))
    t = dlpx.from_dlpack(managed.capsule())
    assert t.device == "cuda:0"
    assert t.__dlpack_device__() == (2, 0)
    info = abi.read_capsule(t.__dlpack__(max_version=(1, 3)))
    assert info["device"] == (2, 0)
    assert info["data"] == t.data_ptr
    with pytest.raises(ValueError, match=r"stream=0"):
        t.__dlpack__(stream=0)
    # A copy to the host needs the CUDA driver (and fails cleanly without one).
    error = RuntimeError if not dlpx.cuda.is_available() else Exception
    with pytest.raises(error, match=r"^dlpx: "):
        dlpx.from_dlpack(t, device="cpu")
    del t, info
    collect()
    assert managed.calls == 1


# ---- values DLPack added after 1.3 (kDLBcomplex = 18; kDLTPU = 19, kDLTPUHost = 20, kDLAscend = 21)


@pytest.mark.parametrize(
    "device, name", [((19, 0), "tpu:0"), ((20, 0), "tpu_host:0"), ((21, 2), "ascend:2")], ids=["tpu", "tpu_host", "ascend"]
)
def test_devices_added_after_1_3_are_named_imported_and_exported(device, name):
    managed = Managed(np.arange(4, dtype=np.complex64), dtype=(18, 32, 1), device=device)
    t = dlpx.from_dlpack(managed.capsule())
    assert (str(t.device), t.dtype, t.dtype_raw) == (name, "bcomplex32", (18, 32, 1))
    assert t.device == dlpx.Device.parse(name)
    # Exported again with its metadata as it came (a consumer of that device can take it).
    again = dlpx.from_dlpack(t.__dlpack__(max_version=(1, 3)))
    assert (again.device, again.dtype_raw, again.data_ptr) == (t.device, t.dtype_raw, t.data_ptr)
    del t, again
    assert managed.calls == 1


def test_dlpx_allocates_bcomplex_but_not_on_devices_added_after_1_3():
    assert dlpx.empty((2,), dtype="bcomplex32").nbytes == 8
    with pytest.raises(NotImplementedError, match=r"^dlpx: empty: allocation on device ascend:0 is not supported"):
        dlpx.empty((2,), device="ascend")
