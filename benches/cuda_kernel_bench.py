"""Host-side cost of one call into a CUDA kernel through dlpx's kernel API (examples/cuda_kernel's
launch_empty: a view of each argument, the caller's stream, an empty kernel launched there) with
1, 3 and 8 torch CUDA tensors, beside torch.add on the same tensors and beside tvm-ffi's
testing.nop taking them (tvm-ffi's own argument conversion; skipped when apache-tvm-ffi is not
installed). Needs a CUDA GPU.

    NVCC=nvcc bash scripts/check_cuda_example.sh     # builds build/cuda_kernel/dlpx_cuda_kernel*.so
    python benches/cuda_kernel_bench.py [--module path/to/dlpx_cuda_kernel.so] [--quick]

Each timing is of a batch of calls small enough that the launch queue never fills (a full queue
would make the host wait for the GPU and time the GPU instead), started after an untimed
torch.cuda.synchronize(); the table gives the median and the best batch, in ns per call.
"""

import argparse
import glob
import importlib.util
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODULE_GLOB = os.path.join(os.path.dirname(HERE), "build", "cuda_kernel", "dlpx_cuda_kernel*.so")


def load_kernel(path):
    if path is None:
        found = sorted(glob.glob(DEFAULT_MODULE_GLOB))
        if not found:
            sys.exit(f"cuda_kernel_bench: no module at {DEFAULT_MODULE_GLOB}; build it first with "
                     "NVCC=nvcc bash scripts/check_cuda_example.sh, or pass --module")
        path = found[-1]
    spec = importlib.util.spec_from_file_location("dlpx_cuda_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_call_ns(call, batch, batches, synchronize):
    """Median and best ns per call over `batches` timed batches of `batch` calls."""
    for _ in range(batch):  # warm-up: kernel loading, torch's caches
        call()
    synchronize()
    samples = []
    for _ in range(batches):
        synchronize()
        start = time.perf_counter_ns()
        for _ in range(batch):
            call()
        samples.append((time.perf_counter_ns() - start) / batch)
    synchronize()
    return statistics.median(samples), min(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", help="the built dlpx_cuda_kernel extension (default: build/cuda_kernel/)")
    parser.add_argument("--quick", action="store_true", help="fewer batches")
    parser.add_argument("--batch", type=int, default=200, help="calls per timed batch (keep below the launch queue depth)")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        sys.exit("cuda_kernel_bench: needs a CUDA GPU (torch.cuda.is_available() is False); nothing was measured")
    import dlpx

    kernel = load_kernel(args.module)
    try:
        import tvm_ffi

        nop = tvm_ffi.get_global_func("testing.nop")
    except ImportError:
        tvm_ffi, nop = None, None
    batches = 50 if args.quick else 500
    versions = f"torch {torch.__version__}, dlpx {dlpx.__version__}"
    versions += f", apache-tvm-ffi {tvm_ffi.__version__}" if tvm_ffi else ", apache-tvm-ffi not installed"
    print(f"GPU: {torch.cuda.get_device_name(0)}; {versions}; Python {sys.version.split()[0]}")
    print(f"ns per call, median (best) of {batches} batches of {args.batch} calls; 16-element float32 CUDA tensors\n")
    # The target: the dlpx path costs the host less than torch's dispatch of one elementwise op.
    print("| torch CUDA args | dlpx kernel API + empty kernel | torch.add(first, last) | tvm_ffi testing.nop(*args) "
          "| dlpx < torch.add |")
    print("|---|---|---|---|---|")
    for n in (1, 3, 8):
        tensors = [torch.zeros(16, device="cuda") for _ in range(n)]
        first, last = tensors[0], tensors[-1]
        rows = [
            per_call_ns(lambda: kernel.launch_empty(*tensors), args.batch, batches, torch.cuda.synchronize),
            per_call_ns(lambda: torch.add(first, last), args.batch, batches, torch.cuda.synchronize),
        ]
        if nop is not None:
            rows.append(per_call_ns(lambda: nop(*tensors), args.batch, batches, torch.cuda.synchronize))
        cells = [f"{median:.0f} ({best:.0f})" for median, best in rows] + ([] if nop else ["not installed"])
        cells.append("ok" if rows[0][0] < rows[1][0] else "MISSED")
        print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
