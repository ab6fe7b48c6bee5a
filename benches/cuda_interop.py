"""The CUDA interop matrix: CUDA tensors of torch, CuPy, jax and dlpx handed to the `from_dlpack`
of torch, CuPy, jax, dlpx and tvm-ffi. For each pair it records

- ns per `from_dlpack` (median of timed batches; the result dropped each call, so its deleter is
  counted; producer and consumer on their default streams, the common case);
- whether the import is zero-copy (the consumer's data pointer is the producer's);
- whether a stream-ordered write before the export is seen after the import: the producer
  sleeps on a stream of its own (non-blocking, so the legacy stream does not order it
  implicitly), then writes a value, and exports while that stream is its current one; the
  consumer copies the imported tensor on its own current stream at once, then synchronises and
  reads the copy. Only the ordering that DLPack's `stream` argument makes can show the value.

A control row exports torch's tensor with `stream=-1` (no ordering asked): its copy must miss the
value, or the sleep was too short for the check to mean anything (the report then says so).

    python benches/cuda_interop.py [--quick] [--simulated]

`--simulated` runs against dlpx's simulated driver (c_tests/sim_cuda, on LD_LIBRARY_PATH): only
dlpx produces CUDA tensors there, written from the host (simulated device memory is host memory),
so the ordering column checks values, not streams: these are not CUDA numbers.
Prints Markdown; exits 1 when a pair that should work fails.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import statistics
import sys
import time

# jax takes 75 % of the GPU's memory at start unless told not to; torch and CuPy share it here.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np  # noqa: E402

import dlpx  # noqa: E402

N = 1 << 20  # float32 elements: large enough that a copy takes longer than a launch
VALUE = 42.0
SLEEP_CYCLES = 2 * 10**8  # about 0.1 s at 2 GHz: far longer than an import and a copy
KDL_CUDA = 2
# DLPackExchangeAPI: a 16-byte header, then allocator, from_py, to_py, dltensor_from_py, and
# current_work_stream.
CURRENT_WORK_STREAM_OFFSET = 16 + 4 * 8


def optional(name):
    """The module, or the reason it is not usable for CUDA here."""
    try:
        module = __import__(name, fromlist=["_"])
    except Exception as err:  # ImportError, or a library without a usable CUDA
        return None, f"{name} not importable ({type(err).__name__})"
    return module, None


class Peer:
    """One library: how it makes, reads and imports CUDA tensors. `why_not` says why it cannot."""

    name = ""
    why_not: str | None = None

    def from_dlpack(self, x):
        raise NotImplementedError

    def pointer(self, x) -> int:
        raise NotImplementedError

    def plain(self):
        """A CUDA tensor of N float32 made on the default stream, complete."""
        raise NotImplementedError

    @contextlib.contextmanager
    def written_late(self):
        """Yields a tensor whose value VALUE is written on a non-blocking stream after a long
        sleep there, while that stream is the library's current one (DLPack's producer stream)."""
        raise NotImplementedError
        yield

    def copy_now(self, x, exported):
        """A copy of `x` (imported from `exported`) enqueued on this library's current stream,
        without waiting."""
        raise NotImplementedError

    def values(self, copy) -> np.ndarray:
        """The copy's values on the host, after waiting for the device."""
        raise NotImplementedError


class Torch(Peer):
    name = "torch"

    def __init__(self):
        self.torch, self.why_not = optional("torch")
        if self.torch is not None and not self.torch.cuda.is_available():
            self.torch, self.why_not = None, "torch sees no CUDA GPU"

    def from_dlpack(self, x):
        return self.torch.from_dlpack(x)

    def pointer(self, x):
        return x.data_ptr()

    def plain(self):
        x = self.torch.full((N,), VALUE, device="cuda")
        self.torch.cuda.synchronize()
        return x

    @contextlib.contextmanager
    def written_late(self):
        torch = self.torch
        x = torch.zeros(N, device="cuda")
        torch.cuda.synchronize()
        side = torch.cuda.Stream()  # torch's pool streams are non-blocking
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.fill_(VALUE)
            yield x
        torch.cuda.synchronize()

    def copy_now(self, x, exported):
        return x.clone()

    def values(self, copy):
        self.torch.cuda.synchronize()
        return copy.cpu().numpy()


class Cupy(Peer):
    name = "cupy"

    def __init__(self):
        self.cupy, self.why_not = optional("cupy")
        if self.cupy is not None:
            try:
                self.cupy.cuda.runtime.getDeviceCount()
                self.spin = self.cupy.RawKernel(
                    r"""extern "C" __global__ void spin(long long cycles) {
                        long long start = clock64();
                        while (clock64() - start < cycles) {}
                    }""",
                    "spin",
                )
            except Exception as err:
                self.cupy, self.why_not = None, f"cupy has no usable CUDA ({type(err).__name__})"

    def from_dlpack(self, x):
        return self.cupy.from_dlpack(x)

    def pointer(self, x):
        return x.data.ptr

    def plain(self):
        x = self.cupy.full((N,), VALUE, dtype=self.cupy.float32)
        self.cupy.cuda.runtime.deviceSynchronize()
        return x

    @contextlib.contextmanager
    def written_late(self):
        cupy = self.cupy
        x = cupy.zeros(N, dtype=cupy.float32)
        cupy.cuda.runtime.deviceSynchronize()
        side = cupy.cuda.Stream(non_blocking=True)
        with side:
            self.spin((1,), (1,), (np.int64(SLEEP_CYCLES),))
            x.fill(VALUE)
            yield x
        cupy.cuda.runtime.deviceSynchronize()

    def copy_now(self, x, exported):
        return x.copy()

    def values(self, copy):
        self.cupy.cuda.runtime.deviceSynchronize()
        return self.cupy.asnumpy(copy)


class Jax(Peer):
    name = "jax"

    def __init__(self):
        self.jax, self.why_not = optional("jax")
        if self.jax is None:
            return
        try:
            self.device = self.jax.devices("cuda")[0]
        except Exception as err:
            self.jax, self.why_not = None, f"jax has no CUDA backend ({type(err).__name__})"
            return
        import jax.dlpack
        import jax.numpy as jnp

        self.jnp = jnp

        @self.jax.jit
        def late(a):
            # A chain of products (a few ms each) that the written values depend on: jax has no
            # user streams, so the write is late on its own compute stream.
            for _ in range(8):
                a = (a @ a) * 1e-4
            return jnp.zeros(N, jnp.float32) + VALUE + 0.0 * a[0, 0]

        self.late = late
        self.seed = self.jax.device_put(np.ones((4096, 4096), np.float32), self.device)
        self.late(self.seed).block_until_ready()  # compile once, outside the checks

    def from_dlpack(self, x):
        return self.jax.dlpack.from_dlpack(x)

    def pointer(self, x):
        return x.unsafe_buffer_pointer()

    def plain(self):
        x = self.jax.device_put(np.full(N, VALUE, np.float32), self.device)
        return x.block_until_ready()

    @contextlib.contextmanager
    def written_late(self):
        yield self.late(self.seed)

    def copy_now(self, x, exported):
        return self.jnp.copy(x)

    def values(self, copy):
        return np.asarray(copy)


class Dlpx(Peer):
    """dlpx's tensors: written by torch on the stream dlpx allocated them on (a GPU), or from the
    host into simulated device memory (the simulator keeps it in host memory)."""

    name = "dlpx"

    def __init__(self, torch: Torch, simulated: bool):
        self.torch, self.simulated = torch, simulated
        if not dlpx.cuda.is_available():
            self.why_not = "no CUDA driver"
        elif not simulated and torch.why_not:
            self.why_not = f"dlpx's tensors are written through torch here, and {torch.why_not}"

    def from_dlpack(self, x):
        return dlpx.from_dlpack(x)

    def pointer(self, x):
        return x.data_ptr

    def plain(self):
        x = dlpx.empty((N,), "float32", "cuda:0")
        if self.simulated:
            host_fill(x.data_ptr, VALUE)
        else:
            self.torch.from_dlpack(x).fill_(VALUE)
            self.torch.torch.cuda.synchronize()
        return x

    @contextlib.contextmanager
    def written_late(self):
        if self.simulated:
            x = dlpx.empty((N,), "float32", "cuda:0")
            host_fill(x.data_ptr, VALUE)
            yield x
            return
        torch = self.torch.torch
        side = torch.cuda.Stream()
        with dlpx.cuda.stream(side):
            x = dlpx.empty((N,), "float32", "cuda:0")  # allocated on `side`
            with torch.cuda.stream(side):  # torch writes on dlpx's stream: nothing to order
                written = torch.from_dlpack(x)
                torch.cuda._sleep(SLEEP_CYCLES)
                written.fill_(VALUE)
            yield x  # dlpx's current stream is `side`, torch's its default again
        torch.cuda.synchronize()

    def copy_now(self, x, exported):
        return dlpx.from_dlpack(x, device="cpu")  # on dlpx's current stream, complete on return

    def values(self, copy):
        return np.from_dlpack(copy)


class TvmFfi(Peer):
    """A consumer only (tvm-ffi makes no CUDA tensors of its own). tvm-ffi imports without
    ordering (the table's `managed_tensor_from_py_object_no_sync`, or `__dlpack__()` with no
    stream) and runs kernels on the producer's `current_work_stream`, as its functions do: the
    copy is read there (dlpx's copy to the host on that stream)."""

    name = "tvm_ffi"

    def __init__(self):
        self.tvm_ffi, self.why_not = optional("tvm_ffi")

    def from_dlpack(self, x):
        return self.tvm_ffi.from_dlpack(x)

    def pointer(self, x):
        return x.data_ptr() if callable(x.data_ptr) else x.data_ptr

    def copy_now(self, x, exported):
        with dlpx.cuda.stream(current_work_stream(exported)):
            return dlpx.from_dlpack(x, device="cpu")

    def values(self, copy):
        return np.from_dlpack(copy)


def current_work_stream(obj) -> int:
    """What the exchange table of `obj`'s type (its own, or dlpx's synthetic one for a producer
    without a table) says is the current stream on cuda:0, as tvm-ffi asks it."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = get(dlpx.exchange_api_of(type(obj)), b"dlpack_exchange_api")
    entry = ctypes.c_void_p.from_address(table + CURRENT_WORK_STREAM_OFFSET).value
    signature = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
    stream = ctypes.c_void_p()
    if signature(entry)(KDL_CUDA, 0, ctypes.byref(stream)) != 0:
        raise RuntimeError(f"current_work_stream of {type(obj).__name__}'s table failed")
    return stream.value or 0


def host_fill(address: int, value: float):
    array = (ctypes.c_float * N).from_address(address)
    np.frombuffer(array, np.float32)[:] = value


def ns_per_call(fn, x, batch: int, batches: int) -> float:
    for _ in range(batch):
        fn(x)
    samples = []
    for _ in range(batches):
        start = time.perf_counter_ns()
        for _ in range(batch):
            fn(x)
        samples.append((time.perf_counter_ns() - start) / batch)
    return statistics.median(samples)


def ordered(producer: Peer, consumer: Peer) -> str:
    with producer.written_late() as x:
        copy = consumer.copy_now(consumer.from_dlpack(x), x)
    seen = consumer.values(copy)
    return "yes" if np.all(seen == VALUE) else f"NO ({int(np.sum(seen == VALUE))} of {N} written)"


def control(torch: Torch) -> str:
    """torch's export with no ordering asked: the copy must miss the late write."""
    if torch.why_not:
        return f"not run: {torch.why_not}"
    with torch.written_late() as x:
        capsule = x.__dlpack__(stream=-1)
        with torch.torch.cuda.stream(torch.torch.cuda.default_stream()):
            copy = torch.torch.from_dlpack(capsule).clone()
    seen = torch.values(copy)
    return "missed, as it must" if not np.all(seen == VALUE) else "SEEN: the sleep is too short to test ordering"


def pair(producer: Peer, consumer: Peer, batch: int, batches: int) -> tuple[list[str], bool]:
    """The row's cells and whether the pair failed."""
    try:
        x = producer.plain()
        y = consumer.from_dlpack(x)
        zero_copy = consumer.pointer(y) == producer.pointer(x)
        del y
        ns = ns_per_call(consumer.from_dlpack, x, batch, batches)
        seen = ordered(producer, consumer)
    except Exception as err:  # noqa: BLE001 - the report shows every failure as it came
        message = " ".join(f"{type(err).__name__}: {err}".split())[:160]
        return [f"error: {message}", "", ""], True
    return [f"{ns:,.0f}", "yes" if zero_copy else "NO (a copy)", seen], not zero_copy or seen != "yes"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--simulated", action="store_true", help="dlpx's simulated driver: not CUDA numbers")
    args = parser.parse_args(argv)
    batch, batches = (50, 5) if args.quick else (200, 25)

    torch = Torch()
    peers = {p.name: p for p in (torch, Cupy(), Jax(), Dlpx(torch, args.simulated), TvmFfi())}
    producers = [peers[n] for n in ("torch", "cupy", "jax", "dlpx")]
    consumers = [peers[n] for n in ("torch", "cupy", "jax", "dlpx", "tvm_ffi")]

    if args.simulated:
        print("Simulated driver (c_tests/sim_cuda): not CUDA numbers.\n")
    print(f"`from_dlpack` of {N} float32 CUDA elements: ns per call (median of {batches} batches of {batch}), "
          "zero-copy, and whether a stream-ordered write before the export is seen after the import.\n")
    print("| producer | consumer | ns per from_dlpack | zero-copy | write before export seen |")
    print("|---|---|---|---|---|")
    failures = []
    for producer in (p for p in producers if not p.why_not):
        for consumer in consumers:
            if consumer.why_not:
                print(f"| {producer.name} | {consumer.name} | n/a: {consumer.why_not} | | |")
                continue
            cells, failed = pair(producer, consumer, batch, batches)
            print(f"| {producer.name} | {consumer.name} | " + " | ".join(cells) + " |")
            if failed:
                failures.append(f"{producer.name} -> {consumer.name}: {'; '.join(c for c in cells if c)}")
    absent = [f"{p.name} ({p.why_not})" for p in producers if p.why_not]
    if absent:
        print(f"\nNot measured as producers: {', '.join(absent)}.")
    verdict = control(torch)
    print(f"\nControl, torch's export with stream=-1 (no ordering): {verdict}")
    if verdict.startswith("SEEN"):
        failures.append(f"control: {verdict}")
    print(f"\ninterop pairs failed: {len(failures)}")
    for failure in failures:
        print(f"- {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
