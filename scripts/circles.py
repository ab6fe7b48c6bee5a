#!/usr/bin/env python3
"""Circles of source files that import each other, and of sibling folders: Rust and Python.

usage: python3 scripts/circles.py [SRC]   (default: src; scripts/check_layers.sh runs it on src
                                            and on python)

A Rust file imports another when it names a path into it (`use crate::a::b`, `super::c::d`, or
the path written out in code); a Python file, when it imports it (`import a.b`, `from .c import
d`, `from . import e`, at the top or inside a function: a deferred import is still an arrow), a
package's path being SRC's top. A file naming a module that contains it (its folder's `mod.rs` or
`__init__.py`, the crate root) does not count: a folder's interface is above the files in it.
Two kinds of circle are printed, each with the names that tie it:

- files: a strongly connected group of two or more files;
- siblings: an import between two files is an arrow between the two children of their deepest
  common folder that hold them (a file or a folder), and a strongly connected group of those
  that holds a folder is a circle, though no two files import each other (`a/x.rs` imports
  `b/y.rs` while `b/z.rs` imports `a/w.rs`: the folders `a/` and `b/` lean on each other).

The last line is `circles: N` (both kinds), and the exit status is 1 when N > 0. The same rule as
the shared `tools/circles.py` that CI keeps beside the clone (which reads Rust only).
docs/design.md, "Layers".
"""

from __future__ import annotations

import ast
import os
import re
import sys


def modules(src: str) -> dict[tuple[str, ...], str]:
    """Module path -> file (`a/b.rs` and `a/b/mod.rs` are both `("a", "b")`, as are `a/b.py` and
    `a/b/__init__.py`)."""
    found = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith((".rs", ".py")):
                path = os.path.join(root, name)
                parts = tuple(os.path.splitext(os.path.relpath(path, src))[0].split(os.sep))
                found[parts[:-1] if parts[-1] in ("mod", "lib", "main", "__init__") else parts] = path
    return found


def python_paths(text: str, here: tuple[str, ...], is_package: bool) -> list[str]:
    """Every module a Python file imports, written as a Rust path from the top (`crate::a::b`)
    so that `target` reads both: `from .m import n` is `m::n` (n may be a module or a name in m)."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out += ["::".join(("crate", *alias.name.split("."))) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ()
            if node.level:
                package = here if is_package else here[:-1]
                base = package[: len(package) - (node.level - 1)]
            base += tuple(node.module.split(".")) if node.module else ()
            out += ["::".join(("crate", *base, alias.name)) if alias.name != "*" else "::".join(("crate", *base))
                    for alias in node.names]
    return out


def paths_named(text: str) -> list[str]:
    """Every `crate::…`/`super::…`/`self::…` path in `text`, `use` groups spelled out."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    out = []
    for m in re.finditer(r"\buse\s+((?:crate|super|self)\b[^;]*);", text, flags=re.S):
        out += expand(m.group(1))
    out += re.findall(r"\b((?:crate|super)(?:::\w+)+)", text)
    return out


def expand(body: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> `a::b`, `a::c::d`, `a::c::e`."""
    m = re.match(r"^(.*?)\{(.*)\}$", body.strip(), flags=re.S)
    if not m:
        return [body.strip()]
    prefix, inner, depth, part, parts = m.group(1), m.group(2), 0, "", []
    for ch in inner:
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    parts.append(part)
    return [prefix + e for p in parts if p.strip() for e in expand(p)]


def target(files, here: tuple[str, ...], path: str):
    """The file a path leads into (the deepest module of it that is a file), or None."""
    segments = [re.sub(r"\s+as\s+\w+$", "", s.strip()) for s in path.split("::") if s.strip()]
    if segments[0] == "crate":
        base, segments = (), segments[1:]
    else:
        base = here
        while segments and segments[0] in ("super", "self"):
            base = base[:-1] if segments.pop(0) == "super" else base
    best, current = (base if base in files else None), base
    for s in segments:
        current += (s,)
        if current in files:
            best = current
    return best


def circles(src: str):
    files = modules(src)
    edges = {m: {} for m in files}
    for here, path in files.items():
        text = open(path, encoding="utf-8").read()
        if path.endswith(".py"):
            named_paths = python_paths(text, here, os.path.basename(path) == "__init__.py")
        else:
            named_paths = paths_named(text)
        for named in named_paths:
            there = target(files, here, named)
            if there is not None and there != here and here[: len(there)] != there:
                edges[here].setdefault(there, set()).add(named.split("::")[-1].strip())
    found = strongly_connected(files, edges)
    return files, edges, found


def strongly_connected(nodes, edges):
    """Tarjan's strongly connected groups of two or more nodes, each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def sibling_circles(src: str, files, edges):
    """Circles of siblings that hold a folder: each file-to-file import lifted to the children of
    the two files' deepest common folder (an import of a file's own ancestor is none)."""
    arrows = {}
    for a, targets in edges.items():
        for b, names in targets.items():
            k = 0
            while k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            if k >= len(a) or k >= len(b):
                continue
            why = f"{files[a]} -> {files[b]} ({', '.join(sorted(names))})"
            arrows.setdefault(a[: k + 1], {}).setdefault(b[: k + 1], set()).add(why)
    units = set(arrows) | {u for targets in arrows.values() for u in targets}
    is_folder = lambda unit: os.path.isdir(os.path.join(src, *unit))
    groups = [g for g in strongly_connected(units, arrows) if any(is_folder(u) for u in g)]
    shown = lambda unit: "/".join(unit) + ("/" if is_folder(unit) else os.path.splitext(files[unit])[1])
    return groups, arrows, shown


def main() -> int:
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    files, edges, found = circles(src)
    for i, group in enumerate(found, 1):
        print(f"circle {i}: {', '.join(files[m] for m in group)}")
        for a in group:
            for b, names in sorted(edges[a].items()):
                if b in group:
                    print(f"  {files[a]} -> {files[b]}: {', '.join(sorted(names))}")
    groups, arrows, shown = sibling_circles(src, files, edges)
    for i, group in enumerate(groups, len(found) + 1):
        print(f"circle {i} (siblings): {', '.join(shown(u) for u in group)}")
        for a in group:
            for b, why in sorted(arrows.get(a, {}).items()):
                if b in group:
                    for line in sorted(why)[:4]:
                        print(f"  {shown(a)} -> {shown(b)}: {line}")
    total = len(found) + len(groups)
    print(f"circles: {total}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
