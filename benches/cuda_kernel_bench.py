"""Host-side cost of one call into a CUDA kernel with torch CUDA tensors (1, 3 and 8 of them):
examples/cuda_kernel's kernel library (`launch_empty`: a view of each argument, the caller's
stream, an empty kernel launched there, through dlpx.load_library), beside the same launch written
by hand as a CPython extension (benches/cuda_kernel_overhead), the floor (that extension's launch
with no tensors: what is left above it is the cost of taking tensors), torch.add on the same
tensors, the library's launch_empty_c (the same kernel on the C ABI alone: what the C++ layer's
wrapper costs) and tvm-ffi's testing.nop taking them (skipped when apache-tvm-ffi is not
installed). A second table times a call that makes an output: the library's `axpby(a, x, y, b)` (its
output from torch's allocator, through torch's C shim where dlpx found it) beside `torch.add(x, y,
alpha=b)` (one allocation and one launch each), and counts the outputs the shim made; run it again
under DLPX_DIRECT_OFF=torch (`--outputs`, as scripts/gpu_check.sh does) for the same call through
torch's exchange table.
Needs a CUDA GPU.

    NVCC=nvcc bash scripts/check_cuda_example.sh     # builds both into build/cuda_kernel/
    python benches/cuda_kernel_bench.py [--library L.so] [--extension E.so] [--quick] [--outputs]

Each timing is of a batch of calls small enough that the launch queue never fills (a full queue
would make the host wait for the GPU and time the GPU instead), started after an untimed
torch.cuda.synchronize(); the candidates take turns batch by batch (interleaved: the machine is
shared), and the table gives the median and the best batch, in ns per call.
"""

import argparse
import glob
import importlib.util
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(os.path.dirname(HERE), "build", "cuda_kernel")


def found(path, pattern, what):
    if path is not None:
        return path
    paths = sorted(glob.glob(os.path.join(BUILD, pattern)))
    if not paths:
        sys.exit(f"cuda_kernel_bench: no {what} at {BUILD}/{pattern}; build it first with "
                 "NVCC=nvcc bash scripts/check_cuda_example.sh, or name it")
    return paths[-1]


def load_extension(path):
    spec = importlib.util.spec_from_file_location("dlpx_cuda_overhead", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def interleaved(calls, batch, batches, synchronize):
    """Median and best ns per call of each of `calls`, taking turns over `batches` batches."""
    for call in calls:  # warm-up: kernel loading, torch's caches
        for _ in range(batch):
            call()
    synchronize()
    samples = [[] for _ in calls]
    for _ in range(batches):
        for call, mine in zip(calls, samples):
            synchronize()
            start = time.perf_counter_ns()
            for _ in range(batch):
                call()
            mine.append((time.perf_counter_ns() - start) / batch)
    synchronize()
    return [(statistics.median(s), min(s)) for s in samples]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", help="the built libdlpx_cuda_kernel.so (default: build/cuda_kernel/)")
    parser.add_argument("--extension", help="the built dlpx_cuda_overhead extension (default: build/cuda_kernel/)")
    parser.add_argument("--quick", action="store_true", help="fewer batches")
    parser.add_argument("--outputs", action="store_true", help="the outputs table alone")
    parser.add_argument("--batch", type=int, default=200, help="calls per timed batch (keep below the launch queue depth)")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        sys.exit("cuda_kernel_bench: needs a CUDA GPU (torch.cuda.is_available() is False); nothing was measured")
    import dlpx

    library = dlpx.load_library(found(args.library, "libdlpx_cuda_kernel.so", "kernel library"))
    batches = 50 if args.quick else 400
    if args.outputs:
        return outputs(torch, dlpx, library, args.batch, batches)
    extension = load_extension(found(args.extension, "dlpx_cuda_overhead*.so", "hand-written extension"))
    try:
        import tvm_ffi

        nop = tvm_ffi.get_global_func("testing.nop")
    except ImportError:
        tvm_ffi, nop = None, None
    versions = f"torch {torch.__version__}, dlpx {dlpx.__version__}"
    versions += f", apache-tvm-ffi {tvm_ffi.__version__}" if tvm_ffi else ", apache-tvm-ffi not installed"
    print(f"GPU: {torch.cuda.get_device_name(0)}; {versions}; Python {sys.version.split()[0]}")
    print(f"ns per call, median (best) of {batches} interleaved batches of {args.batch} calls; "
          "16-element float32 CUDA tensors; targets: library <= 1.0x the extension, <= 0.6x torch.add\n")
    print("| torch CUDA args | kernel library launch_empty | CPython extension launch_empty | floor: launch, no tensors "
          "| torch.add(first, last) | library launch_empty_c (C ABI) | tvm_ffi testing.nop(*args) | library / extension "
          "| library / torch.add | library - floor | C ABI / extension |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    stream = torch.cuda.current_stream().cuda_stream
    for n in (1, 3, 8):
        tensors = [torch.zeros(16, device="cuda") for _ in range(n)]
        first, last = tensors[0], tensors[-1]
        calls = [
            lambda: library.launch_empty(*tensors),
            lambda: extension.launch_empty(*tensors),
            lambda: extension.launch_floor(stream),
            lambda: torch.add(first, last),
            lambda: library.launch_empty_c(*tensors),
        ]
        if nop is not None:
            calls.append(lambda: nop(*tensors))
        rows = interleaved(calls, args.batch, batches, torch.cuda.synchronize)
        cells = [f"{median:.0f} ({best:.0f})" for median, best in rows] + ([] if nop else ["not installed"])
        lib, ext, floor, add, c_abi = (median for median, _ in rows[:5])
        cells += [f"{lib / ext:.2f}x", f"{lib / add:.2f}x", f"{lib - floor:.0f}", f"{c_abi / ext:.2f}x"]
        print(f"| {n} | " + " | ".join(cells) + " |")
    print()
    outputs(torch, dlpx, library, args.batch, batches)


def outputs(torch, dlpx, library, batch, batches):
    """The outputs table: a call that allocates in torch and launches once, each way."""
    x, y = torch.arange(16.0, device="cuda"), torch.ones(16, device="cuda")
    made = dlpx._native._served("torch_outputs")
    expected = torch.add(2.0 * x, y, alpha=3.0)
    if not torch.equal(library.axpby(2.0, x, y, 3.0), expected):
        sys.exit("cuda_kernel_bench: axpby(2, x, y, 3) is not 2 * x + 3 * y; nothing was measured")
    by_shim = dlpx._native._served("torch_outputs") - made
    calls = [lambda: library.axpby(2.0, x, y, 3.0), lambda: torch.add(x, y, alpha=3.0)]
    (lib, lib_best), (add, add_best) = interleaved(calls, batch, batches, torch.cuda.synchronize)
    way = "torch's C shim" if by_shim else "torch's exchange table"
    print(f"A call that makes an output (16 float32 on the GPU), ns per call, median (best); the output made "
          f"through {way} (DLPX_DIRECT_OFF={os.environ.get('DLPX_DIRECT_OFF', '')!r}; outputs the shim made for "
          f"one call: {by_shim})\n")
    print("| library axpby(2, x, y, 3) | torch.add(x, y, alpha=3) | library / torch.add |")
    print("|---|---|---|")
    print(f"| {lib:.0f} ({lib_best:.0f}) | {add:.0f} ({add_best:.0f}) | {lib / add:.2f}x |")


if __name__ == "__main__":
    main()
