"""The README and the guides in docs/ stay true as the tree moves: every file or folder of the
repository they name exists, and the README's Python example runs as printed. (docs/design.md
is left out of the first: it names folders that were, with the commit that moved them.)"""

import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
GUIDES = ["README.md", "benches/README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")) if not p.endswith("design.md")
)
# A path in backquotes that starts at one of the repository's own top folders.
NAMED = re.compile(r"`((?:src|docs|scripts|examples|benches|tests|c_tests|include|fuzz|python)/[^`\s]*)`")

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


def test_the_readme_python_example_runs_as_printed():
    pytest.importorskip("torch")
    with open(README, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert blocks, "the README has no Python example"
    example = blocks[0]  # the first: the host example (the CUDA one needs a GPU)
    assert "cuda" not in example
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'version': (1, 3)" in done.stdout  # the last line prints torch's table
