"""Loads that straddle stores just made, in libdlpx's machine code: a stall callgrind cannot see.

A 16-byte load whose bytes come from two narrower stores still in the store buffer (or from one
store and memory beside it) cannot be forwarded from them: it waits until they reach the cache,
a dozen cycles or more. The usual source is a large value built on the stack and then moved,
the move's wide loads reading what the build's narrow stores just wrote. Instruction counts do
not move (the loads are there either way); only time does. Each tensor argument of a kernel call
paid two such stalls until its `Value` was written in place (docs/design.md, "Kernel
libraries"): `lib.nop` of 8 dlpx tensors 185 -> 133 ns with callgrind's count moving 9%.

The scan is straight-line: for each 16-byte load from `disp(%reg)`, the stores to the same
register base among the 25 instructions before it, ignoring branches. So it over-reports across
paths and misses what crosses a call; read what it prints against the code.

    python benches/straddled_loads.py [LIBRARY] [--all]

Without --all, only the kernel call's hot functions (the loader's call, its binding, the
producer seam's view, the call's own functions) are scanned. It reports; it does not judge: the
one load it finds there today is on an error path (a boxed error's fields, read as it is made),
which no call that succeeds runs. Before arguments were written in place it found ten, two of
them on every tensor argument's path.
"""

from __future__ import annotations

import re
import subprocess
import sys

# The kernel loader's per-call path: a straddled load here costs every kernel call.
HOT = ("call_shell", "Arguments4bind", "one_path4view", "kernels4call4Call")
WINDOW = 25
WIDE = {"movups", "movupd", "movaps", "movapd", "movdqu", "movdqa"}
NARROW = {"movq": 8, "movl": 4, "movw": 2, "movb": 1, "movsd": 8, "movss": 4}
MEMORY = re.compile(r"(-?0x[0-9a-f]+|)\((%r[a-z0-9]+)\)$")


def store_width(op: str, source: str) -> int | None:
    if op in WIDE:
        return 16
    if op == "movq" and source.startswith("%xmm"):
        return 8
    if op in NARROW:
        return NARROW[op]
    if op != "mov" or source.startswith("$"):
        return 8 if op == "mov" else None
    if re.fullmatch(r"%r([a-z]{2}|\d+)", source):
        return 8
    if re.fullmatch(r"%e[a-z]{2}|%r\d+d", source):
        return 4
    if re.fullmatch(r"%[a-d]x|%r\d+w|%[sd]i", source):
        return 2
    return 1


def straddled(body: str):
    """(load, the stores it straddles) for each straddling 16-byte load in one function."""
    recent: list = []
    for line in body.splitlines():
        parts = line.split("\t")
        fields = parts[1].strip().split(None, 1) if len(parts) > 1 else []
        store = None
        if len(fields) == 2:
            op, operands = fields
            args = [a.strip() for a in re.split(r",(?![^(]*\))", operands)]
            if len(args) == 2:
                source, target = (MEMORY.match(a) for a in args)
                if target and not source and (width := store_width(op, args[0])):
                    store = (target.group(2), int(target.group(1) or "0", 16), width, line.strip())
                elif source and not target and op in WIDE:
                    base, at = source.group(2), int(source.group(1) or "0", 16)
                    over = [s for s in recent[-WINDOW:] if s and s[0] == base and s[1] < at + 16 and at < s[1] + s[2]]
                    if over and not any(s[1] <= at and at + 16 <= s[1] + s[2] for s in over):
                        yield line.strip(), [s[3] for s in over]
        recent.append(store)


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if args:
        library = args[0]
    else:
        import dlpx

        library = dlpx.library_path()
    every = "--all" in sys.argv
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", library],
                             capture_output=True, text=True, check=True).stdout
    found = 0
    for function in re.finditer(r"^[0-9a-f]+ <([^>]*)>:\n(.*?)\n\n", listing, re.S | re.M):
        name = function.group(1)
        if not every and not any(h in name for h in HOT):
            continue
        for load, stores in straddled(function.group(2)):
            found += 1
            print(f"{name[:100]}\n  {load}\n" + "".join(f"    after {s}\n" for s in stores[-3:]))
    scope = "every function" if every else "the kernel call's hot functions"
    print(f"{found} straddling 16-byte load(s) in {scope} of {library}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
