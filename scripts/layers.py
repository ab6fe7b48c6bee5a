#!/usr/bin/env python3
"""The layers of src/, read from their one declaration (src/layers.txt), and the arrows held to them.

usage: python3 scripts/layers.py [--doc DESIGN_MD] [SRC]   (default: src)

Fails (exit 1), naming what and where, when
- a top-level module of SRC (`foo.rs` or `foo/`) is in no layer, in two, or declared but absent;
- lib.rs's `mod` lines are not in the declaration's order (bottom up, layer by layer);
- a file names (`crate::…`, `super::…`, `$crate::…`, a `use` group spelled out) a module that its
  layer may not name: its own layer's earlier parts and itself, and the layers of its `names:` line;
- with --doc, the rows of the markdown table under "## Layers" name other modules than the
  declaration (a row is the layer its first word names; a module is written `src/foo.rs` or `src/foo/`).
The last line is `layers: N violations`. docs/design.md, "Layers".
"""

from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from circles import modules, paths_named, target  # noqa: E402  (the same reading of a path)


def declaration(path: str):
    """(layers in order, {module: (layer, part)}, {layer: names allowed}, problems)."""
    order, where, names, problems, last = [], {}, {}, [], None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            key, _, value = line.strip().partition(":")
            if line.startswith((" ", "\t")) and key == "names" and last:
                names[last] = value.split()
            elif not line.startswith((" ", "\t")) and value.strip():
                last = key
                order.append(key)
                names.setdefault(key, [])
                for part, mods in enumerate(value.split("|")):
                    for mod in mods.split():
                        if mod in where:
                            problems.append(f"{path}:{number}: {mod} is in {where[mod][0]} and in {key}")
                        where[mod] = (key, part)
            else:
                problems.append(f"{path}:{number}: cannot read: {line.strip()}")
    for layer, allowed in names.items():
        for name in allowed:
            if name not in order and name not in where:
                problems.append(f"{path}: {layer} names {name}, which is no layer and no module")
    return order, where, names, problems


def may_name(where, names, here: str, there: str) -> bool:
    layer, part = where[here]
    other, other_part = where[there]
    if other == layer:
        return other_part <= part
    return other in names[layer] or there in names[layer]


def top_level(src: str) -> set[str]:
    """The crate's top-level modules: `foo.rs` and `foo/` beside lib.rs."""
    found = set()
    for entry in os.listdir(src):
        full = os.path.join(src, entry)
        if entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
            found.add(entry[:-3])
        elif os.path.isdir(full) and any(n.endswith(".rs") for _, _, ns in os.walk(full) for n in ns):
            found.add(entry)
    return found


def lib_rs(src: str):
    """lib.rs's `mod` lines in order, and its re-exports: {name: module} (`pub use a::{B, C}`)."""
    text = open(os.path.join(src, "lib.rs"), encoding="utf-8").read()
    text = re.sub(r"//[^\n]*", "", text)
    mods = re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text, flags=re.M)
    reexports = {}
    for m in re.finditer(r"\bpub\s+use\s+(\w+)(?:::\w+)*::(?:\{([^}]*)\}|(\w+))\s*;", text):
        for item in (m[2] or m[3]).split(","):
            if item.strip():
                reexports[item.split(" as ")[-1].strip()] = m[1]
    return mods, reexports


def doc_rows(doc: str):
    """{layer's first word, lowercased: {modules}} from the table under "## Layers"."""
    rows, inside = {}, False
    for line in open(doc, encoding="utf-8"):
        if line.startswith("#"):
            inside = line.strip() == "## Layers"
        elif inside and line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line.strip()):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 2 or cells[0] == "layer":
                continue
            layer = re.split(r"[\s:]", cells[0], maxsplit=1)[0].lower()
            rows[layer] = set(re.findall(r"`src/(\w+)(?:\.rs|/)`", cells[1]))
    return rows


def check(src: str, doc: str | None = None) -> list[str]:
    decl = os.path.join(src, "layers.txt")
    if not os.path.exists(decl):
        return [f"{decl}: missing (every module of {src} is declared in a layer there)"]
    order, where, names, problems = declaration(decl)
    present = top_level(src)
    for mod in sorted(present - set(where)):
        problems.append(f"{src}/{mod}: in no layer: add it to {decl}")
    for mod in sorted(set(where) - present):
        problems.append(f"{decl}: {mod} is declared but {src} has no {mod}.rs or {mod}/")
    mods, reexports = lib_rs(src)
    ranks = [(order.index(where[m][0]), where[m][1]) for m in mods if m in where]
    if ranks != sorted(ranks):
        problems.append(f"{src}/lib.rs: its mod lines are not in {decl}'s order (bottom up): {' '.join(mods)}")
    for mod in sorted(set(where) - set(mods)):
        if mod in present:
            problems.append(f"{src}/lib.rs: declares no mod {mod}")

    files = modules(src)
    for here, path in sorted(files.items()):
        if not here or here[0] not in where:
            continue
        text = open(path, encoding="utf-8").read()
        # Only a crate:: path leaves its top-level module (super:: climbs out of inline modules too).
        for named in sorted({n for n in paths_named(text.replace("$crate", "crate")) if n.startswith("crate::")}):
            there = target(files, here, named)
            if there is None:
                continue
            if there == ():  # the crate root: one of lib.rs's re-exports
                item = re.sub(r"\s+as\s+\w+$", "", named.split("::")[1].strip())
                if item not in reexports:
                    problems.append(f"{path}: names {named}, which lib.rs does not re-export from a module")
                    continue
                module = reexports[item]
            else:
                module = there[0]
            if module in where and module != here[0] and not may_name(where, names, here[0], module):
                line = next((i for i, l in enumerate(text.splitlines(), 1) if named.split("::")[-1] in l), 0)
                problems.append(f"{path}:{line}: the {where[here[0]][0]} layer's {here[0]} names {named} "
                                f"({where[module][0]} layer's {module})")

    if doc is not None:
        rows = doc_rows(doc)
        for layer in order:
            declared = {m for m, (l, _) in where.items() if l == layer}
            listed = rows.pop(layer, None)
            if listed is None:
                problems.append(f"{doc}: the table under \"## Layers\" has no row for the {layer} layer")
            elif listed != declared:
                missing = ", ".join(sorted(declared - listed)) or "none"
                extra = ", ".join(sorted(listed - declared)) or "none"
                problems.append(f"{doc}: the {layer} row differs from {decl}: lacks {missing}; lists {extra} besides")
        for layer in sorted(rows):
            problems.append(f"{doc}: the table under \"## Layers\" has a row {layer}, which {decl} does not declare")
    return problems


def main(argv: list[str]) -> int:
    doc = None
    if argv[:1] == ["--doc"]:
        doc, argv = argv[1], argv[2:]
    src = argv[0] if argv else "src"
    problems = check(src, doc)
    for p in problems:
        print(p)
    print(f"layers: {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
