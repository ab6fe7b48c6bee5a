"""python -m dlpx.stubgen LIBRARY [-o OUT.pyi]: a kernel library's stub, from its signatures.

Loads the library (``dlpx.load_library``) and writes one ``def`` per kernel, typed from the
kernel's signature (docs/kernels.md, "Shipping a kernel library"): a tensor parameter takes any
object dlpx reads (``__dlpack__``, a buffer, the array interfaces), ``bool`` and ``str`` are
themselves, ``T | None`` stays so; ``*name``, keyword-only parameters and
defaults are as the kernel's ``__text_signature__`` has them; a tensor result is ``Any`` (the
caller's type: torch in, ``torch.Tensor`` out). The kernel's doc is the function's docstring.
Without ``-o`` the stub goes beside the library, named after its module (``libadd.so`` →
``add.pyi``); ``-o -`` writes it to standard output. An ``int`` parameter is ``SupportsIndex`` and a
``float`` one ``SupportsFloat | SupportsIndex``, as the loader converts them (a numpy scalar).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import math
import os
import sys
import types
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import dlpx

# What every stub starts with: the type a tensor parameter takes (what dlpx.from_dlpack reads;
# a DLPack capsule is read too, and has no type to name before Python 3.13). Its own names are
# private (`{p}`: `_`, or as many more underscores as keep them apart from every kernel's name),
# so that a kernel may be named anything (`float`, `Any`, `_Tensor`); then the names the
# annotations use, less those a kernel takes (the annotations spell those through `_builtins`
# and `_typing`).
_PREAMBLE = '''\
import builtins as {p}builtins
import typing as {p}typing

import typing_extensions as {p}typing_extensions

class {p}SupportsDLPack({p}typing.Protocol):
    def __dlpack__(self) -> {p}typing.Any: ...

class {p}ArrayInterface({p}typing.Protocol):
    @property
    def __array_interface__(self) -> {p}typing.Any: ...

class {p}CudaArrayInterface({p}typing.Protocol):
    @property
    def __cuda_array_interface__(self) -> {p}typing.Any: ...

# What a tensor parameter takes: torch, numpy, jax, cupy, tvm_ffi, dlpx tensors, buffers, ...
{p}Tensor: {p}typing_extensions.TypeAlias = {p}typing.Union[
    {p}SupportsDLPack, {p}typing_extensions.Buffer, {p}ArrayInterface, {p}CudaArrayInterface]
'''
# The preamble's own names, less their prefix.
_PRIVATE_NAMES = ("builtins", "typing", "typing_extensions", "SupportsDLPack", "ArrayInterface",
                  "CudaArrayInterface", "Tensor")
# The names the annotations take from typing (the others are builtins).
_TYPING_NAMES = ("Any", "SupportsFloat", "SupportsIndex")

# A signature's types as the stub spells them (names as `_Spelling` qualifies them): a tensor
# argument; an int takes anything with `__index__`, a float anything with `__float__` or
# `__index__`, as the loader does (a numpy scalar); a tensor result is Any (outputs come back as
# the type of the caller's first tensor argument).
_PARAMETER_TYPES = {"tensor": ["{p}Tensor"], "int": ["SupportsIndex"], "float": ["SupportsFloat", "SupportsIndex"],
                    "bool": ["bool"], "str": ["str"]}
_RESULT_NAMES = {"tensor": "Any", "int": "int", "float": "float", "bool": "bool", "str": "str"}


class _Spelling:
    """How a stub names a type: plainly, or through `_builtins` / `_typing` where a kernel of
    the library takes the name (`def float(...)` would be the `float` of every annotation); the
    preamble's own names with a prefix no kernel's name has."""

    def __init__(self, kernel_names):
        self.taken = set(kernel_names)
        self.prefix = "_"
        while any(self.prefix + name in self.taken for name in _PRIVATE_NAMES):
            self.prefix += "_"

    def __call__(self, name: str) -> str:
        if name.startswith("{p}"):  # the preamble's
            return self.prefix + name[len("{p}"):]
        if name not in self.taken:
            return name
        return f"{self.prefix}typing.{name}" if name in _TYPING_NAMES else f"{self.prefix}builtins.{name}"

    def preamble(self) -> str:
        return _PREAMBLE.replace("{p}", self.prefix)

    def imports(self) -> str:
        free = [name for name in _TYPING_NAMES if name not in self.taken]
        return f"from typing import {', '.join(free)}\n" if free else ""


class StubError(ValueError):
    """A kernel whose signature the stub cannot spell (names the kernel)."""


def _top_level(text: str, start: int = 0) -> Iterator[Tuple[int, str, int]]:
    """Each character of `text` from `start` outside string literals, with the bracket depth
    after it: (index, character, depth)."""
    depth, quote = 0, ""
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
            continue
        if c in "'\"":
            quote = c
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        yield i, c, depth


def _split_top_level(text: str) -> List[str]:
    """`text` split at the commas outside brackets and string literals."""
    parts, start = [], 0
    for i, c, depth in _top_level(text):
        if c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _typed_line(kernel: Callable[..., Any]) -> Tuple[List[str], Optional[str]]:
    """The typed signature the loader puts first in the kernel's doc, `name(a: tensor, ...) ->
    tensor`: its parameters (`a: tensor`, `*xs: tensor`, `*`, `n: int = 1`) and result, if any."""
    name = kernel.__name__
    line = (kernel.__doc__ or "").split("\n", 1)[0]
    if not line.startswith(name + "("):
        raise StubError(f"kernel '{name}': its doc does not start with its typed signature: {line!r}")
    end = next((i for i, c, depth in _top_level(line, len(name)) if c == ")" and depth == 0), -1)
    if end < 0:
        raise StubError(f"kernel '{name}': no ')' in its typed signature {line!r}")
    rest = line[end + 1:].strip()
    returns = rest[2:].strip() if rest.startswith("->") else None
    return _split_top_level(line[len(name) + 1:end]), returns


def _result_type(returns: Optional[str], spell: _Spelling) -> str:
    """The result annotation in the stub's terms; Any for none or one it cannot read."""
    try:
        spelled = _result_node(ast.parse(returns, mode="eval").body, spell) if returns else None
    except (SyntaxError, RecursionError, MemoryError):  # no type; or nested past what ast reads
        spelled = None
    return spelled or spell("Any")


def _result_node(node: ast.expr, spell: _Spelling) -> Optional[str]:
    """One node of a result annotation (`tensor`, `int | None`, `tuple[tensor, ...]`,
    `list[int]`), or None for what is no type a stub can say."""
    if isinstance(node, ast.Constant) and node.value is None:
        return "None"
    if isinstance(node, ast.Name) and node.id in _RESULT_NAMES:
        return spell(_RESULT_NAMES[node.id])
    if isinstance(node, ast.Name) and node.id in ("tuple", "list"):  # of anything, as --strict wants
        return f"{spell(node.id)}[{spell('Any')}{', ...' if node.id == 'tuple' else ''}]"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _result_node(node.left, spell), _result_node(node.right, spell)
        return f"{left} | {right}" if left and right else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in ("tuple", "list"):
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        variadic = (node.value.id == "tuple" and len(items) == 2 and isinstance(items[1], ast.Constant)
                    and items[1].value is Ellipsis)
        if variadic:
            items = items[:1]
        elif node.value.id == "list" and len(items) != 1:
            return None
        spelled = [_result_node(item, spell) for item in items]
        if not spelled or None in spelled:
            return None
        return f"{spell(node.value.id)}[{', '.join(str(s) for s in spelled)}{', ...' if variadic else ''}]"
    return None


def _parameter(kernel: str, typed: str, runtime: inspect.Parameter, spell: _Spelling) -> str:
    """One parameter of the stub: the typed spelling's type, the runtime's name, kind and default."""
    declared = typed.lstrip("*").split("=", 1)[0]
    name, _, annotation = declared.partition(":")
    if name.strip() != runtime.name:
        raise StubError(f"kernel '{kernel}': parameter '{runtime.name}' is '{name.strip()}' in its typed signature")
    words = [w.strip() for w in annotation.split("|")]
    optional = words[1:] == ["None"]
    if words[0] not in _PARAMETER_TYPES or len(words) > (2 if optional else 1):
        raise StubError(f"kernel '{kernel}': parameter '{runtime.name}' has a type the stub cannot spell: {annotation}")
    spelled = " | ".join([spell(name) for name in _PARAMETER_TYPES[words[0]]] + (["None"] if optional else []))
    star = "*" if runtime.kind is inspect.Parameter.VAR_POSITIONAL else ""
    if runtime.default is inspect.Parameter.empty:
        return f"{star}{runtime.name}: {spelled}"
    default = runtime.default
    # inf and nan have no literal (their repr names nothing a stub defines): `...`, as typeshed
    # writes a default it does not spell.
    shown = "..." if isinstance(default, float) and not math.isfinite(default) else repr(default)
    return f"{runtime.name}: {spelled} = {shown}"


# What `str.splitlines` and Python's tokenizer would take for a line break, other than "\n":
# written as escapes, so that the stub's docstring is the kernel's doc, character for character.
_BREAKS = {c: repr(c)[1:-1] for c in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def _docstring(doc: str, indent: str) -> str:
    escaped = "".join(_BREAKS.get(c, c) for c in doc.replace("\\", "\\\\"))
    lines = escaped.split("\n")
    # A quote that ends a one-line doc would run into the closing quotes (escaped before the runs
    # of three, which then cannot reach it).
    if len(lines) == 1 and lines[0].endswith('"'):
        lines[0] = lines[0][:-1] + '\\"'
    lines = [line.replace('"""', '\\"\\"\\"') for line in lines]
    body = "\n".join(indent + line if line else "" for line in lines[1:])
    return f'{indent}"""{lines[0]}' + (f"\n{body}\n{indent}" if len(lines) > 1 else "") + '"""'


def kernels(library: types.ModuleType) -> Dict[str, Callable[..., Any]]:
    """The kernels of a loaded library, by name, sorted."""
    found: Dict[str, Callable[..., Any]] = {}
    for name in sorted(dir(library)):
        value = getattr(library, name)
        # A kernel's name is no dunder (the module's own are: `__file__`); `_impl` is a kernel.
        dunder = name.startswith("__") and name.endswith("__")
        if not dunder and isinstance(value, types.BuiltinFunctionType):
            found[name] = value
    return found


def kernel_stub(kernel: Callable[..., Any], spell: Optional[_Spelling] = None) -> str:
    """`def name(...) -> result:` and the kernel's doc, for one kernel (`spell`: how its library's
    stub names types; plainly by default)."""
    spell = spell or _Spelling(())
    name = kernel.__name__
    typed, returns = _typed_line(kernel)
    runtime = list(inspect.signature(kernel).parameters.values())
    params: List[str] = []
    typed_params = [p for p in typed if p != "*"]
    if len(typed_params) != len(runtime):
        raise StubError(f"kernel '{name}': {len(typed_params)} typed parameters, {len(runtime)} in __text_signature__")
    for spelled, parameter in zip(typed_params, runtime):
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and not any(
            p.startswith("*") for p in params
        ):
            params.append("*")
        params.append(_parameter(name, spelled, parameter, spell))
    doc = (kernel.__doc__ or "").split("\n", 1)
    body = doc[1].strip("\n") if len(doc) > 1 else ""
    head = f"def {name}({', '.join(params)}) -> {_result_type(returns, spell)}:"
    return f"{head}\n{_docstring(body, '    ')}\n" if body else f"{head} ...\n"


def stub(library: Union[str, "os.PathLike[str]", types.ModuleType]) -> str:
    """The stub (.pyi text) of a kernel library: its path, or the module dlpx.load_library gave."""
    module = library if isinstance(library, types.ModuleType) else dlpx.load_library(library)
    found = kernels(module)
    if not found:
        raise StubError(f"{getattr(module, '__file__', module)}: no kernels")
    spell = _Spelling(found)
    # The module is named after the library's file, whatever that holds (`lib"""q.so`).
    title = f"Kernels of {module.__name__} (stub written by python -m dlpx.stubgen from their signatures)."
    header = _docstring(title, "") + "\n\n" + spell.preamble() + spell.imports()
    return header + "".join(f"\n{kernel_stub(k, spell)}" for k in found.values())


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlpx.stubgen", description="Write a kernel library's .pyi stub.")
    parser.add_argument("library", help="path of the kernel library (a shared library built with <dlpx/kernel.h>)")
    parser.add_argument("-o", "--output", help="the .pyi to write ('-': standard output); default: beside the "
                                               "library, named after its module")
    args = parser.parse_args(argv)
    try:
        module = dlpx.load_library(args.library)
        text = stub(module)
        # Beside the file loaded (a bare name is found on the library search path), named after
        # its module (`libmy_kernels.so`: `my_kernels.pyi`).
        beside = os.path.dirname(os.path.abspath(getattr(module, "__file__", None) or args.library))
        output = args.output or os.path.join(beside, module.__name__ + ".pyi")
        if output == "-":
            sys.stdout.write(text)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)  # a package's __init__.pyi
            with open(output, "w", encoding="utf-8") as f:
                f.write(text)
    except (OSError, ImportError, StubError) as err:
        raise SystemExit(f"dlpx.stubgen: {err}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
