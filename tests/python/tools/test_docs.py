"""The README and the guides in docs/ stay true as the tree moves: every file or folder of the
repository they name exists, and every code block in them is tested (doc_blocks.py says how):
Python blocks run, C and C++ blocks compile (complete programs also link against libdlpx and
run), and a block that is not run says why in a comment beside it. (docs/design.md is left out
of the paths check: it names folders that were, with the commit that moved them.)"""

import glob
import os
import re
import subprocess
import sys

import pytest

import c_build
import doc_blocks
from cuda_peers import GPU

ROOT = c_build.REPO
README = os.path.join(ROOT, "README.md")
DOCS = ["README.md", "benches/README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
GUIDES = [doc for doc in DOCS if doc != "docs/design.md"]
# A path in backquotes that starts at one of the repository's own top folders.
NAMED = re.compile(r"`((?:src|docs|scripts|examples|benches|tests|c_tests|include|fuzz|python)/[^`\s]*)`")


def _blocks():
    # Read at collection, for the test ids; without the source tree pytestmark skips them all.
    if not os.path.exists(README):
        return []
    found = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            found += doc_blocks.read_blocks(doc, f.read())
    return found


BLOCKS = _blocks()
PYTHON_BLOCKS = [b for b in BLOCKS if b.language == "python"]
C_BLOCKS = [b for b in BLOCKS if b.language in doc_blocks.COMPILED and not b.marker.startswith(doc_blocks.NOT_RUN)]

pytestmark = pytest.mark.skipif(not os.path.exists(README), reason="needs the source tree (README.md)")


def named_paths(text):
    return [m.group(1).rstrip(".,:;)") for m in NAMED.finditer(text)]


def test_the_path_pattern_finds_what_a_guide_names():
    text = "see `docs/cuda.md`, `src/producers/` and `tests/python/test_*.py`; not `dlpx/lib` nor `x`"
    assert named_paths(text) == ["docs/cuda.md", "src/producers/", "tests/python/test_*.py"]


@pytest.mark.parametrize("guide", GUIDES)
def test_every_path_a_guide_names_exists(guide):
    with open(os.path.join(ROOT, guide), encoding="utf-8") as f:
        paths = named_paths(f.read())
    assert paths, f"{guide} names no file of the repository: is the pattern still right?"
    missing = [p for p in paths if not glob.glob(os.path.join(ROOT, p))]
    assert not missing, f"{guide} names files that are not in the repository: {missing}"


def test_the_block_reader_finds_blocks_and_their_markers():
    text = "intro\n\n```python\nprint(1)\n```\n<!-- doc-test: not run: a shell line -->\n```sh\nls\n```\n"
    first, second = doc_blocks.read_blocks("x.md", text)
    assert (first.line, first.language, first.code, first.marker) == (3, "python", "print(1)\n", "")
    assert (second.line, second.language, second.marker) == (7, "sh", "not run: a shell line")
    assert doc_blocks.problem(second) is None
    assert "not run" in doc_blocks.problem(doc_blocks.Block("x.md", 1, "sh", "ls\n", ""))


def test_every_block_is_tested_or_says_why_not():
    assert len(PYTHON_BLOCKS) >= 4 and len(C_BLOCKS) >= 4, "the docs lost their examples: is the block reader still right?"
    unmarked = [f"{block}: {doc_blocks.problem(block)}" for block in BLOCKS if doc_blocks.problem(block)]
    assert not unmarked, "\n".join(unmarked)


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=str)
def test_python_block_runs(block, tmp_path):
    # Checked on every machine, also where the block cannot run: it parses and defines what it reads.
    assert doc_blocks.undefined_names(block) == [], f"the Python example at {block} reads names it never defines"
    if block.marker == doc_blocks.NEEDS_GPU and not GPU:
        pytest.skip(f"{block} is marked '{doc_blocks.NEEDS_GPU}' and torch sees no CUDA GPU here (it parses, its names are defined)")
    peer = doc_blocks.missing_peer(block)
    if peer:
        pytest.skip(f"{block} imports {peer}, which this interpreter lacks")
    script = tmp_path / (os.path.basename(block.doc) + ".py")  # tracebacks: "python.md.py", line = the doc's
    script.write_text(doc_blocks.python_script(block), encoding="utf-8")
    # dlpx.cpp's builds go to the test's own cache (not the user's).
    env = dict(os.environ, DLPX_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)
    assert done.returncode == 0, f"the Python example at {block} fails:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("block", C_BLOCKS, ids=str)
def test_c_block_compiles_and_a_program_runs(block, tmp_path):
    try:
        done, program = doc_blocks.build(block, str(tmp_path))
    except (c_build.NoCompiler, doc_blocks.Missing) as e:
        c_build.skip_or_fail(f"{block}: {e}")
    assert done.returncode == 0, f"the {block.language} example at {block} does not build:\n{c_build.failure(done)}"
    if program:
        ran = subprocess.run([program], capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, f"the program at {block} exits {ran.returncode}:\n{ran.stdout}{ran.stderr}"


@pytest.mark.parametrize("body, error", [
    pytest.param("int unused;\nreturn x;\n", "unused variable", id="warnings_are_errors"),
    pytest.param("return dlpx_no_such_function(x);\n", "implicit declaration", id="no_function_it_does_not_declare"),
    pytest.param("return y;\n", "undeclared", id="no_name_but_the_parameters"),
])  # fmt: skip
def test_a_broken_fragment_fails_to_build_at_its_doc_line(body, error, tmp_path):
    def fragment(code):
        return doc_blocks.Block("guide.md", 10, "c", code, "body of PyObject *kernel(PyObject *x)")

    try:
        good, _ = doc_blocks.build(fragment("Py_INCREF(x);\nreturn x;\n"), str(tmp_path))
    except c_build.NoCompiler as e:
        c_build.skip_or_fail(str(e))
    assert good.returncode == 0, c_build.failure(good)  # the control: the wrapper itself builds
    bad, _ = doc_blocks.build(fragment(body), str(tmp_path))
    assert bad.returncode != 0 and error in bad.stderr and "guide.md:11" in bad.stderr, bad.stderr
