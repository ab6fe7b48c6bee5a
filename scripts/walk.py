#!/usr/bin/env python3
"""The walk of one value through the Rust sources: which files it passes through, in order.

usage: python3 scripts/walk.py FILE:FUNCTION:PARAM [--rev REV] [--stops N] [--verbose]
       e.g. python3 scripts/walk.py src/producers/one_path.rs:import:object
            python3 scripts/walk.py src/python/producers/dispatch.rs:import:object --rev 74b0c43

Starting at FUNCTION's parameter PARAM, it follows every call that hands the value on (as an
argument, or as the receiver of a method), in the order the code is written, every branch one
after the other; a value computed from it (`let x = f(value)`, `let Some(x) = value.y`) is followed
as well. It reads tokens, nothing runs. A call is followed into the function it names: a path
(`validate::check_view`, `Tensor::from_managed`), a name in scope (the file's own, or `use`d), or a
method that one function of the crate defines; a method that several types define (a trait's
implementations, the rows of a seam) is a choice made at run time: the walk does not go through it.
A function already walked is entered again (that counts) but not walked twice.

It prints the stays: each run of calls in one file is a stay; a stay in a file the walk had already
left is a return. The last line is `N stays in F files, R returns` (benches/README.md, "One import
path": how far the object handed to `from_dlpack` travels, before and after the producer seam
became one path). With --rev, the tree of that commit is read (git show), so the walk of any
commit can be told.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

KEYWORDS = {"if", "match", "while", "for", "loop", "return", "Some", "Ok", "Err", "None", "let", "as",
            "unsafe", "move", "in", "mut", "ref", "else", "fn", "where", "impl", "self", "Self", "crate",
            "super", "true", "false", "async", "await", "dyn", "struct", "enum", "type", "use", "pub"}


def sources(rev: str | None) -> dict[str, str]:
    """path -> text of every .rs file under src/ (of the work tree, or of commit `rev`)."""
    if rev is None:
        found = {}
        for root, _, names in os.walk("src"):
            for name in names:
                if name.endswith(".rs"):
                    path = os.path.join(root, name)
                    found[path] = open(path, encoding="utf-8").read()
        return found
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "src"], check=True,
                             capture_output=True, text=True).stdout.split()
    return {p: subprocess.run(["git", "show", f"{rev}:{p}"], check=True, capture_output=True, text=True).stdout
            for p in listing if p.endswith(".rs")}


def blank(text: str) -> str:
    """Comments, strings and char literals replaced by spaces (positions kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == '"' or (c in "bc" and text.startswith('"', i + 1)):
            start = i
            i += 1 if c == '"' else 2
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""'.ljust(i - start))
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not text[i - 1].isalnum()):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(" " * (j - i)); i = j
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            j = i + len(re.match(r"'(\\.|[^\\'])'", text[i:i + 4]).group(0))
            out.append(" " * (j - i)); i = j
        else:
            out.append(c); i += 1
    return "".join(out)


def matching(text: str, i: int, open_: str = "{", close: str = "}") -> int:
    """Index just past the bracket that closes the one at `i`."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def split_top(text: str) -> list[str]:
    """`a, f(b, c), d` -> ['a', 'f(b, c)', 'd'] (commas at depth 0)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "([{<") - (ch in ")]}>") if ch not in "<>" else 0
        if ch == "," and depth == 0:
            parts.append(cur); cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


class Function:
    def __init__(self, path, module, name, owner, params, body, is_method, trait):
        self.path, self.module, self.name, self.owner = path, module, name, owner
        self.params, self.body, self.is_method, self.trait = params, body, is_method, trait

    def label(self):
        return f"{self.owner}.{self.name}" if self.owner else self.name


def module_of(path: str) -> tuple[str, ...]:
    parts = os.path.relpath(path, "src")[:-3].split(os.sep)
    return tuple(parts[:-1] if parts[-1] in ("mod", "lib", "main") else parts)


def parse(path: str, text: str):
    """The functions of a file (with their impl's type and trait) and its `use` names."""
    code = blank(text)
    module = module_of(path)
    impls = []  # (start, end, owner, trait)
    for m in re.finditer(r"\bimpl\b(?:\s*<[^{]*?>)?\s+([^{;]+?)\s*\{", code):
        head = m.group(1)
        trait, owner = None, head
        if " for " in f" {head} ":
            trait, owner = [s.strip() for s in re.split(r"\bfor\b", head, maxsplit=1)]
        owner = re.sub(r"<.*", "", owner).split("::")[-1].strip()
        trait = re.sub(r"<.*", "", trait).split("::")[-1].strip() if trait else None
        start = m.end() - 1
        impls.append((start, matching(code, start), owner, trait))
    functions = []
    for m in re.finditer(r"\bfn\s+([A-Za-z_]\w*)\s*(<[^(]*?>)?\s*\(", code):
        open_paren = m.end() - 1
        close_paren = matching(code, open_paren, "(", ")")
        params_text = code[open_paren + 1:close_paren - 1]
        brace = code.find("{", close_paren)
        semi = code.find(";", close_paren)
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration without a body (a trait's required method)
        end = matching(code, brace)
        params, is_method = [], False
        for p in split_top(params_text):
            p = p.strip()
            if re.match(r"^&?\s*('\w+\s+)?(mut\s+)?self\b", p):
                is_method = True
                params.append("self")
            elif ":" in p:
                params.append(p.split(":", 1)[0].strip().replace("mut ", "").strip())
        owner = trait = None
        for s, e, o, t in impls:
            if s < m.start() < e:
                owner, trait = o, t
        functions.append(Function(path, module, m.group(1), owner, params, (brace, end, code), is_method, trait))
    uses = {}
    for m in re.finditer(r"\buse\s+((?:crate|super|self)\b[^;]*);", code, flags=re.S):
        for full in expand(m.group(1)):
            full = full.strip()
            alias = re.search(r"\s+as\s+(\w+)$", full)
            full = re.sub(r"\s+as\s+\w+$", "", full)
            name = alias.group(1) if alias else full.split("::")[-1]
            if name == "self":
                full = full.rsplit("::", 1)[0]
                name = alias.group(1) if alias else full.split("::")[-1]
            uses[name] = absolute(module, full)
    return functions, uses


def expand(body: str) -> list[str]:
    m = re.match(r"^(.*?)\{(.*)\}$", body.strip(), flags=re.S)
    if not m:
        return [body.strip()]
    return [m.group(1) + e for part in split_top(m.group(2)) if part.strip() for e in expand(part)]


def absolute(module: tuple[str, ...], path: str) -> tuple[str, ...]:
    segments = [s for s in path.split("::") if s]
    if segments and segments[0] == "crate":
        return tuple(segments[1:])
    base = module
    while segments and segments[0] in ("super", "self"):
        base = base[:-1] if segments.pop(0) == "super" else base
    return base + tuple(segments)


class Tree:
    def __init__(self, files: dict[str, str]):
        self.functions, self.uses, self.modules = [], {}, {}
        for path, text in files.items():
            functions, uses = parse(path, text)
            self.functions += functions
            self.uses[path] = uses
            self.modules[module_of(path)] = path
        self.by_name = {}
        for f in self.functions:
            self.by_name.setdefault(f.name, []).append(f)

    def file_of(self, module: tuple[str, ...]):
        """The file that holds module path `module` or the deepest module above it."""
        for k in range(len(module), -1, -1):
            if module[:k] in self.modules:
                return self.modules[module[:k]], module[k:]
        return None, module

    def resolve(self, here: Function, path: list[str], name: str, method: bool):
        """The functions a call names (one: follow; several: a choice made at run time)."""
        candidates = self.by_name.get(name, [])
        if method:
            methods = [f for f in candidates if f.is_method]
            return methods
        if path:
            first = path[0]
            if first in ("crate", "super", "self"):
                target = absolute(here.module, "::".join(path))
            elif first in self.uses[here.path]:
                target = self.uses[here.path][first] + tuple(path[1:])
            elif first == "Self":
                return [f for f in candidates if f.owner == here.owner and f.path == here.path]
            else:
                target = None
            owner = path[-1] if path[-1][:1].isupper() else None
            if target is not None:
                if owner:
                    return [f for f in candidates if f.owner == owner]
                path_file, _ = self.file_of(target)
                return [f for f in candidates if f.path == path_file and not f.is_method and f.owner is None] or \
                       [f for f in candidates if f.path == path_file]
            if owner:
                return [f for f in candidates if f.owner == owner]
            return []
        local = [f for f in candidates if f.path == here.path and f.owner is None]
        if local:
            return local
        if name in self.uses[here.path]:
            path_file, _ = self.file_of(self.uses[here.path][name][:-1])
            return [f for f in candidates if f.path == path_file and f.owner is None]
        return []


CALL = re.compile(r"(?:\b((?:[A-Za-z_]\w*::)+))?\b([A-Za-z_]\w*)\s*(?:::\s*<[^()]*?>\s*)?\(")


def outside_macros(text: str) -> str:
    """`text` without the arguments of macro invocations (`format!(...)`: a message, not a step)."""
    out, i = [], 0
    for m in re.finditer(r"\b\w+!\s*[(\[{]", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        bracket = text[m.end() - 1]
        i = matching(text, m.end() - 1, bracket, {"(": ")", "[": "]", "{": "}"}[bracket])
    out.append(text[i:])
    return "".join(out)


def mentions(text: str, names: set[str]) -> bool:
    text = outside_macros(text)
    return any(re.search(rf"(?<![\w.]){re.escape(n)}\b", text) for n in names)


# The value itself in another form: referenced, dereferenced, cast, a field of it, its pointer.
FORM = re.compile(r"^[&*\s]*(?:mut\s+)?\(?\s*([a-z_]\w*)((?:\s*\.\s*(?:[a-z_]\w*|\d+)(?:\s*::\s*<[^()]*>)?(?:\s*\(\s*\))?)*)"
                  r"\s*\)?(?:\s*as\s+[\w:<>*\s]+)?\s*\??\s*$")


def is_form(text: str, names: set[str]) -> bool:
    """Whether `text` is one of `names` itself, in some form (not a value computed from it)."""
    m = FORM.match(text.strip())
    return bool(m) and m.group(1) in names


def walk(tree: Tree, start: Function, param: str, stops: int, verbose: bool):
    events, walked = [], set()

    def visit(function: Function, tracked: set[str], depth: int):
        events.append((function.path, function.label(), depth))
        if id(function) in walked or len(events) >= stops:
            return
        walked.add(id(function))
        brace, end, code = function.body
        body = code[brace:end]
        tracked = set(tracked)
        # The value under another name: bound to it in another form (`let this = object.cast()`).
        for m in re.finditer(r"\blet\s+(?:mut\s+)?([a-z_]\w*)\s*(?::[^=;]+)?=([^;]+);", body, flags=re.S):
            if is_form(m.group(2), tracked):
                tracked.add(m.group(1))
        for m in CALL.finditer(body):
            if len(events) >= stops:
                return
            path = [s for s in (m.group(1) or "").split("::") if s]
            name = m.group(2)
            if name in KEYWORDS or name[:1].isupper():
                continue
            open_paren = m.end() - 1
            args = split_top(body[open_paren + 1:matching(body, open_paren, "(", ")") - 1])
            receiver = ""
            method = not path and m.start() > 0 and body[m.start() - 1] == "."
            if method:
                k = m.start() - 1
                depth_ = 0
                while k > 0:
                    ch = body[k - 1]
                    if ch in ")]}":
                        depth_ += 1
                    elif ch in "([{":
                        if depth_ == 0:
                            break
                        depth_ -= 1
                    elif depth_ == 0 and (ch in ";,=" or ch.isspace() and body[k - 2:k - 1] not in ".:"):
                        break
                    k -= 1
                receiver = body[k:m.start() - 1]
            handed = [i for i, a in enumerate(args) if is_form(a, tracked)]
            if not handed and not (method and is_form(receiver, tracked)):
                continue
            targets = tree.resolve(function, path, name, method)
            if len(targets) != 1:
                if len(targets) > 1 and verbose:
                    print(f"{'  ' * depth}  (a choice made at run time: {len(targets)} `{name}`s)")
                continue
            target = targets[0]
            params = target.params[1:] if target.is_method and target.params[:1] == ["self"] else target.params
            passed = {params[i] for i in handed if i < len(params)}
            if method and is_form(receiver, tracked) and target.is_method:
                passed.add("self")
            visit(target, passed, depth + 1)

    visit(start, {param}, 0)
    return events


def main() -> int:
    args = sys.argv[1:]
    rev = args[args.index("--rev") + 1] if "--rev" in args else None
    stops = int(args[args.index("--stops") + 1]) if "--stops" in args else 400
    verbose = "--verbose" in args
    start = next(a for a in args if a.count(":") == 2 and not a.startswith("--"))
    path, function, param = start.split(":")
    os.chdir(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                            check=True).stdout.strip())
    tree = Tree(sources(rev))
    found = [f for f in tree.functions if f.path == path and f.label() in (function, function.split(".")[-1])]
    if not found:
        print(f"walk: no function {function} in {path}" + (f" at {rev}" if rev else ""), file=sys.stderr)
        return 2
    events = walk(tree, found[0], param, stops, verbose)
    stays, seen, returns = [], [], 0
    for file, label, depth in events:
        if stays and stays[-1][0] == file:
            stays[-1][1].append(label)
            continue
        again = file in seen
        returns += again
        seen.append(file)
        stays.append((file, [label], again))
    for i, (file, labels, again) in enumerate(stays, 1):
        names = ", ".join(dict.fromkeys(labels))
        print(f"{i:3}. {file:38} {'return' if again else '      '}  {names}")
    print(f"{len(stays)} stays in {len(set(seen))} files, {returns} returns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
