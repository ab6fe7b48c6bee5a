#!/usr/bin/env python3
"""Circles of Rust source files that import each other, between folders or inside one.

usage: python3 scripts/circles.py [SRC]   (default: src)

A file imports another when it names a path into it (`use crate::a::b`, `super::c::d`, or the
path written out in code). A file naming a module that contains it (its folder's `mod.rs`, the
crate root) does not count: a folder's interface is above the files in it. Each circle (a
strongly connected group of two or more files) is printed with the names that tie it; exit
status 1 when there is one. docs/design.md, "Layers".
"""

from __future__ import annotations

import os
import re
import sys


def modules(src: str) -> dict[tuple[str, ...], str]:
    """Module path -> file (`a/b.rs` and `a/b/mod.rs` are both `("a", "b")`)."""
    found = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                parts = tuple(os.path.relpath(path, src)[:-3].split(os.sep))
                found[parts[:-1] if parts[-1] in ("mod", "lib", "main") else parts] = path
    return found


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
        for named in paths_named(open(path, encoding="utf-8").read()):
            there = target(files, here, named)
            if there is not None and there != here and here[: len(there)] != there:
                edges[here].setdefault(there, set()).add(named.split("::")[-1].strip())
    # Tarjan's strongly connected components.
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
    for v in sorted(files):
        if v not in index:
            visit(v)
    return files, edges, found


def main() -> int:
    files, edges, found = circles(sys.argv[1] if len(sys.argv) > 1 else "src")
    for i, group in enumerate(found, 1):
        print(f"circle {i}: {', '.join(files[m] for m in group)}")
        for a in group:
            for b, names in sorted(edges[a].items()):
                if b in group:
                    print(f"  {files[a]} -> {files[b]}: {', '.join(sorted(names))}")
    print(f"circles: {len(found)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
