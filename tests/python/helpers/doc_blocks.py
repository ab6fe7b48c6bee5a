"""The fenced code blocks of the README and docs/*.md, and how test_docs.py tests each one.

What a block gets is decided by its language and by an HTML comment on the line just above its
opening fence (the rendered page hides it; whoever edits the Markdown sees it):

  no comment                                python: run as a script. c, cpp: a complete program,
                                            compiled, linked against libdlpx and run
  <!-- doc-test: needs a GPU -->            python: run where torch sees a CUDA GPU; elsewhere
                                            only parsed and its names checked (undefined_names)
  <!-- doc-test: body of SIGNATURE -->      c, cpp: a fragment, compiled (not linked) as the body
                                            of the function SIGNATURE
  <!-- doc-test: not run: REASON -->        not python: a shell line, CMake, Rust, an outline with
                                            elided code; REASON says what checks it instead

A fragment's translation unit is <Python.h>, the block's own leading #include lines (dlpx's header
for the language when it has none), then SIGNATURE { block }: the declarations the fragment
assumes are its parameters, nothing else, and warnings are errors. #line directives make the
compiler's messages point at the doc's own lines.
"""

import ast
import builtins
import dataclasses
import importlib.util
import os
import re
import symtable
import sysconfig

import c_build

MARKER = re.compile(r"<!-- doc-test: (.*?) -->")
FENCE = re.compile(r"```(\S*)\s*$")
NEEDS_GPU = "needs a GPU"
BODY_OF = "body of "
NOT_RUN = "not run: "
# A fence's language -> c_build's language, and the header a fragment without #include lines gets.
COMPILED = {"c": ("c", "#include <dlpx/dlpx.h>\n"), "cpp": ("c++", "#include <dlpx/dlpx.hpp>\n")}
# Peers tests/requirements.txt installs that some interpreters have no wheel for (free-threaded
# CPython has no torch): a block importing a missing one skips. Any other missing module (a typo)
# fails the block.
OPTIONAL_PEERS = {"numpy", "torch", "jax", "tvm_ffi", "array_api_strict", "PIL", "pyarrow", "cupy"}


@dataclasses.dataclass
class Block:
    doc: str  # relative to the repository, as messages name it
    line: int  # of the opening fence; the code starts on the next line
    language: str
    code: str
    marker: str  # the doc-test comment's text, "" when none

    def __str__(self):
        return f"{self.doc}:{self.line}"


def read_blocks(doc, text):
    """Every fenced block of `text` (the file `doc`), in order."""
    lines = text.splitlines(keepends=True)
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            assert end is not None, f"{doc}:{i + 1}: a code fence that never closes"
            marker = MARKER.fullmatch(lines[i - 1].strip()) if i else None
            blocks.append(Block(doc, i + 1, opening.group(1), "".join(lines[i + 1 : end]), marker.group(1) if marker else ""))
            i = end
        i += 1
    return blocks


def problem(block):
    """Why `block` is neither tested nor marked as left out with a reason; None when it is fine."""
    m = block.marker
    if block.language == "python":
        return None if m in ("", NEEDS_GPU) else f"a Python block runs, or is marked '{NEEDS_GPU}'; it is marked '{m}'"
    if block.language in COMPILED and (m == "" or m.startswith(BODY_OF)):
        return None
    if m.startswith(NOT_RUN) and m[len(NOT_RUN) :].strip():
        return None
    marked = f"marked '{m}'" if m else "with no doc-test comment"
    return f"a {block.language or 'plain'} block {marked}: test it (python, c, cpp) or say <!-- doc-test: {NOT_RUN}why -->"


def missing_peer(block):
    """The first optional peer the block imports that this interpreter lacks, else None."""
    try:
        tree = ast.parse(block.code)
    except SyntaxError:
        return None  # running it shows the error at the doc's line
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            continue
        for top in (module.split(".")[0] for module in modules):
            if top in OPTIONAL_PEERS and importlib.util.find_spec(top) is None:
                return top
    return None


def undefined_names(block):
    """Names the block reads that it never defines and that are no builtins (symtable's view,
    nothing run): where a block cannot run (no GPU) a misspelt or forgotten name still fails."""
    top = symtable.symtable(python_script(block), block.doc, "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()} | set(dir(builtins))
    undefined, tables = set(), [top]
    while tables:
        table = tables.pop()
        tables += table.get_children()
        undefined |= {s.get_name() for s in table.get_symbols() if s.is_referenced() and (table is top or s.is_global())} - defined
    return sorted(undefined)


def python_script(block):
    """The block as a script whose line numbers are the doc's (tracebacks point at the doc)."""
    return "\n" * block.line + block.code


def _line(number, block):
    return f'#line {number} "{block.doc}"\n'


def translation_unit(block):
    """The C or C++ source `block` compiles as: itself (a program), or a fragment wrapped."""
    if not block.marker.startswith(BODY_OF):
        return _line(block.line + 1, block) + block.code
    signature = block.marker[len(BODY_OF) :]
    lines = block.code.splitlines(keepends=True)
    leading = 0
    while leading < len(lines) and lines[leading].startswith("#include"):
        leading += 1
    includes = _line(block.line + 1, block) + "".join(lines[:leading]) if leading else COMPILED[block.language][1]
    body = "".join(lines[leading:])
    # The signature is written in the marker, on the line above the fence: errors in it point there.
    opening = _line(block.line - 1, block) + f"{signature} {{\n"
    return f"#include <Python.h>\n{includes}{opening}{_line(block.line + 1 + leading, block)}{body}}}\n"


class Missing(Exception):
    """Headers a block includes that this machine does not have."""


def build(block, directory):
    """Compiles `block` in `directory`: (the finished compiler, the program to run or None).
    c_build.NoCompiler, or Missing for headers the block needs that this machine lacks."""
    language = COMPILED[block.language][0]
    source = os.path.join(directory, "block.c" if language == "c" else "block.cpp")
    with open(source, "w", encoding="utf-8") as f:
        f.write(translation_unit(block))
    flags = ["-O1"]  # the uninitialised-use warnings need the optimiser's data flow
    if "<cuda/" in block.code:
        flags += cccl_flags()
    if block.marker.startswith(BODY_OF):
        # Python's headers as system headers: their warnings are the interpreter's, not the doc's.
        python = ["-isystem", sysconfig.get_paths()["include"]]
        done = c_build.build(language, [source], os.path.join(directory, "block.o"), [*flags, "-c", *python])
        return done, None
    program = os.path.join(directory, "block")
    done = c_build.build(language, [source], program, flags, libraries=c_build.link_dlpx(directory))
    return done, program


def cccl_flags():
    """-isystem flags for CUDA's CCCL headers (<cuda/mdspan>) from the nvidia-cuda-cccl wheel,
    found as c_tests/CMakeLists.txt finds them (DLPX_CUDA_INCLUDE_DIR)."""
    try:
        import nvidia
    except ImportError:
        raise Missing("CUDA's CCCL headers: the nvidia-cuda-cccl wheel is not installed") from None
    for root in nvidia.__path__:
        include = os.path.join(root, "cu13", "include")
        if os.path.isfile(os.path.join(include, "cccl", "cuda", "mdspan")):
            return ["-isystem", os.path.join(include, "cccl"), "-isystem", include]
    raise Missing(f"CUDA's CCCL headers: no cu13/include/cccl/cuda/mdspan under {list(nvidia.__path__)}")
