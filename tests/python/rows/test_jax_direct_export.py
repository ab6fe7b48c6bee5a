"""jax arrays exported by jaxlib's C++ function (src/producers/rows/jax.rs) instead of the Python
of jax's `__dlpack__`: the same tensor as jax's own export, made by that function and not by
`__dlpack__`, for one-device arrays only; jax's own answer (and error) for everything else; the
first array checked against `__dlpack__`, a disagreement turning the path off."""

import ctypes
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")  # noqa: E402
from jax._src.lib import _jax  # noqa: E402

from dlpx.conform import abi  # noqa: E402
import dlpx  # noqa: E402
from direct_reads import serves  # noqa: E402
from test_consumer_fast_paths import TensorView, view_of, view_release  # noqa: E402

ARRAYS = {
    "float32": lambda: jnp.arange(12, dtype=jnp.float32).reshape(3, 4),
    "int8": lambda: jnp.arange(5, dtype=jnp.int8),
    "bool": lambda: jnp.arange(4) % 2 == 0,
    "bfloat16": lambda: jnp.arange(6, dtype=jnp.bfloat16).reshape(2, 3),
    "complex64": lambda: jnp.arange(4, dtype=jnp.complex64),
    "zero-d": lambda: jnp.float32(2.5),
    "zero-size": lambda: jnp.zeros((0, 3), dtype=jnp.float32),
    "transposed": lambda: jnp.arange(6.0).reshape(2, 3).T,
    "committed": lambda: jax.device_put(jnp.arange(4.0), jax.devices()[0]),
}
FIELDS = ("data", "device", "ndim", "dtype", "shape", "strides", "byte_offset")


def jaxs_own(x) -> dict:
    info = abi.read_capsule(x.__dlpack__())
    assert info["name"] == "dltensor"
    return {k: info[k] for k in FIELDS}


def imported(x) -> dict:
    t = dlpx.from_dlpack(x)
    info = abi.read_capsule(t.__dlpack__(max_version=(1, 3)))
    return {k: info[k] for k in FIELDS}


def viewed(x) -> dict:
    view = TensorView()
    assert view_of(x, ctypes.byref(view)) == 0
    try:
        return {k: v for k, v in abi.describe(view.tensor).items() if k in FIELDS}
    finally:
        view_release(ctypes.byref(view))


@pytest.mark.direct_read("jax")
@pytest.mark.parametrize("make", ARRAYS.values(), ids=ARRAYS.keys())
@pytest.mark.parametrize("read", [imported, viewed], ids=["from_dlpack", "view"])
def test_a_jax_array_is_the_tensor_jaxs_own_export_describes(make, read):
    x = make()
    with serves("jax", calls=1):
        got = read(x)
    assert got == jaxs_own(x)


class Counting:
    """Counts the calls of jaxlib's export function and of jax's `__dlpack__`, both replaced by
    wrappers that call the originals (jax's `__dlpack__` looks the function up in the module
    on every call, as dlpx does)."""

    def __init__(self, monkeypatch):
        self.exports = self.dlpacks = 0
        export, dlpack = _jax.buffer_to_dlpack_managed_tensor, _jax.ArrayImpl.__dlpack__

        def counted_export(*args, **kwargs):
            self.exports += 1
            return export(*args, **kwargs)

        def counted_dlpack(*args, **kwargs):
            self.dlpacks += 1
            return dlpack(*args, **kwargs)

        monkeypatch.setattr(_jax, "buffer_to_dlpack_managed_tensor", counted_export)
        monkeypatch.setattr(_jax.ArrayImpl, "__dlpack__", counted_dlpack)


@pytest.mark.direct_read("jax")
@pytest.mark.parametrize("read", [imported, viewed], ids=["from_dlpack", "view"])
def test_a_one_device_array_is_exported_by_jaxlibs_function_not_by_dlpack(monkeypatch, read):
    x = jnp.arange(8.0)
    dlpx.from_dlpack(x)  # the first array of the process is checked against __dlpack__
    counts = Counting(monkeypatch)
    for _ in range(3):
        read(x)
    assert (counts.exports, counts.dlpacks) == (3, 0)


def test_a_deleted_array_gets_jaxs_own_error():
    x = jnp.arange(3.0)
    x.delete()
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        dlpx.from_dlpack(x)
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        view_of(x, ctypes.byref(TensorView()))


@pytest.mark.parametrize("read", [dlpx.from_dlpack, viewed], ids=["from_dlpack", "view"])
def test_an_array_deleted_while_its_import_lives_leaves_the_import_valid(read):
    # The export is of the shard jax's own `__dlpack__` exports, not of the array: jaxlib
    # aborts the process when an array is deleted under an export of its own.
    dlpx.from_dlpack(jnp.arange(3.0))
    x = jnp.arange(8.0) * 2
    if read is viewed:
        view = TensorView()
        assert view_of(x, ctypes.byref(view)) == 0
        x.delete()
        assert abi.describe(view.tensor)["shape"] == (8,)
        view_release(ctypes.byref(view))
    else:
        t = read(x)
        x.delete()
        assert np.from_dlpack(t).tolist() == [2.0 * i for i in range(8)]


def fresh(code: str, *args: str, strict: bool = True) -> subprocess.Popen:
    """`code` in a new interpreter with two CPU devices: the path's state is per process, and
    starts on whatever rows the suite switched off. `strict=False`: a disagreement is the warning
    users get, not the suite's error."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    env.pop("DLPX_DIRECT_OFF", None)
    if not strict:
        env.pop("DLPX_DIRECT_STRICT", None)
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_fresh(code: str) -> str:
    process = fresh(code)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, out + err
    return out


def test_an_array_over_several_devices_gets_jaxs_own_buffer_error():
    out = run_fresh(
        """
        import jax, jax.numpy as jnp, numpy as np, dlpx
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        mesh = Mesh(np.array(jax.devices()), ("x",))
        dlpx.from_dlpack(jnp.arange(4.0))
        for spec in (P("x"), P()):
            y = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, spec))
            try:
                dlpx.from_dlpack(y)
            except BufferError as e:
                print("refused:", e)
        one = jax.device_put(jnp.arange(8.0), jax.devices()[1])
        print("second device:", np.from_dlpack(dlpx.from_dlpack(one)).tolist() == list(range(8)))
        """
    )
    assert out.count("refused: to_dlpack can only pack a dlpack tensor from an array on a singular device") == 2
    assert "second device: True" in out


def test_a_function_that_disagrees_with_dlpack_on_the_first_array_turns_the_path_off():
    # The replacement exports another array when called as dlpx calls it (positional arguments
    # only); jax's `__dlpack__` passes `stream=` and gets the truth.
    process = fresh(
        """
        import warnings, jax.numpy as jnp, numpy as np, dlpx
        from jax._src.lib import _jax
        export, other = _jax.buffer_to_dlpack_managed_tensor, jnp.full(4, 7.0)
        calls = []
        def lying(buffer, **kwargs):
            calls.append(1)
            return export(buffer if kwargs else other, **kwargs)
        _jax.buffer_to_dlpack_managed_tensor = lying
        warnings.simplefilter("always")
        x = jnp.arange(4.0)
        for _ in range(3):
            print(np.from_dlpack(dlpx.from_dlpack(x)).tolist())
        print("calls:", len(calls), "served:", dlpx._native._served("jax"))
        """,
        strict=False,
    )
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, out + err
    assert out.splitlines() == ["[0.0, 1.0, 2.0, 3.0]"] * 3 + ["calls: 4 served: 0"]
    # One call of ours to check, then `__dlpack__` for each of the three imports; one warning.
    warnings = [line for line in err.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1 and f"the jax direct read disagrees with jaxlib {jax.__version__}" in warnings[0], err
    assert "__dlpack__: data 0x" in warnings[0]


def test_a_deleted_first_array_decides_nothing():
    out = run_fresh(
        """
        import jax.numpy as jnp, dlpx
        from jax._src.lib import _jax
        d = jnp.arange(3.0)
        d.delete()
        try:
            dlpx.from_dlpack(d)
        except RuntimeError as e:
            print("first:", e)
        dlpack, calls = _jax.ArrayImpl.__dlpack__, []
        def counted(*args, **kwargs):
            calls.append(1)
            return dlpack(*args, **kwargs)
        _jax.ArrayImpl.__dlpack__ = counted
        for _ in range(5):
            dlpx.from_dlpack(jnp.arange(4.0))
        print("__dlpack__ calls:", len(calls))
        """
    )
    assert "first: Array has been deleted" in out
    # The second array is checked against __dlpack__ (one call); the other four are not.
    assert "__dlpack__ calls: 1" in out


def test_an_array_held_by_another_process_gets_jaxs_own_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = """
        import sys, jax
        jax.distributed.initialize(f"127.0.0.1:{sys.argv[1]}", num_processes=2, process_id=int(sys.argv[2]))
        import jax.numpy as jnp, dlpx
        from jax.sharding import SingleDeviceSharding
        dlpx.from_dlpack(jnp.arange(4.0))
        remote = next(d for d in jax.devices() if d.process_index != jax.process_index())
        x = jax.make_array_from_single_device_arrays((4,), SingleDeviceSharding(remote), [], dtype=jnp.float32)
        for read in (dlpx.from_dlpack, lambda x: x.__dlpack__()):
            try:
                read(x)
            except Exception as e:
                print(type(e).__name__, str(e).splitlines()[0])
        """
    processes = [fresh(code, str(port), str(i)) for i in range(2)]
    outs = [p.communicate(timeout=300) for p in processes]
    for process, (out, err) in zip(processes, outs):
        assert process.returncode == 0, out + err
        lines = out.splitlines()
        assert len(lines) == 2 and lines[0] == lines[1] and "no addressable shards" in lines[0], out + err
