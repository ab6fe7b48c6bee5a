"""The layering check (scripts/check_layers.sh) fails on a circle of files, between folders and
inside one, in Rust and in Python, on a module in no layer of src/layers.txt, on an arrow up, and
on a layer table in docs/design.md that differs from the declaration; on the repository as it
stands it finds none of them (docs/design.md, "Layers")."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CIRCLES = os.path.join(ROOT, "scripts", "circles.py")
LAYERS = os.path.join(ROOT, "scripts", "layers.py")

pytestmark = pytest.mark.skipif(not os.path.exists(CIRCLES), reason="needs the source tree (scripts/circles.py)")


def run(src, tool=CIRCLES, *args):
    return subprocess.run([sys.executable, tool, *args, str(src)], capture_output=True, text=True)


def write(tree, files):
    for name, text in files.items():
        path = tree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_source_tree_has_no_circle():
    result = run(os.path.join(ROOT, "src"))
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip().endswith("circles: 0")


def test_the_python_package_has_no_circle():
    result = run(os.path.join(ROOT, "python"))
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip().endswith("circles: 0")


def test_python_modules_importing_each_other_are_a_circle_even_deferred(tmp_path):
    write(tmp_path, {
        "pkg/__init__.py": "from .a import run\n",
        "pkg/a.py": "from . import b\nfrom .c import helper\n",
        "pkg/b.py": "def f():\n    from .a import run  # deferred: still an arrow\n",
        "pkg/c.py": "import pkg\nimport numpy\n",  # its own package is above it: no arrow
    })
    result = run(tmp_path)
    assert result.returncode == 1, result.stdout
    assert re.search(r"pkg/a\.py -> \S*pkg/b\.py: b$", result.stdout, flags=re.M), result.stdout
    assert re.search(r"pkg/b\.py -> \S*pkg/a\.py: run$", result.stdout, flags=re.M), result.stdout
    assert "pkg/c.py" not in result.stdout


def test_the_layers_hold_and_design_md_lists_them():
    result = run(os.path.join(ROOT, "src"), LAYERS, "--doc", os.path.join(ROOT, "docs", "design.md"))
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip().endswith("layers: 0 violations")


LAYERED = {
    "layers.txt": "bottom: error dtype\ncore: tensor\n  names: bottom\npython: args | module\n  names: bottom core\n",
    "lib.rs": "pub mod dtype;\npub mod error;\npub mod tensor;\npub mod args;\npub mod module;\npub use error::Error;\n",
    "error/mod.rs": "pub struct Error;\n",
    "dtype.rs": "use crate::error::Error;\n",
    "tensor/mod.rs": "use crate::{dtype, Error};\n",
    "args.rs": "use crate::tensor;\n",
    "module/mod.rs": "use crate::args;\n",
}


def test_a_layered_tree_passes(tmp_path):
    write(tmp_path, LAYERED)
    result = run(tmp_path, LAYERS)
    assert result.returncode == 0, result.stdout


def test_a_module_in_no_layer_fails(tmp_path):
    write(tmp_path, {**LAYERED, "foo.rs": "", "lib.rs": LAYERED["lib.rs"] + "pub mod foo;\n"})
    result = run(tmp_path, LAYERS)
    assert result.returncode == 1
    assert "foo: in no layer" in result.stdout


@pytest.mark.parametrize("file, text, why", [
    ("dtype.rs", "use crate::tensor::Thing;\n", "bottom layer's dtype names crate::tensor::Thing"),
    ("error/mod.rs", "fn f() { $crate::module::g() }\n", "bottom layer's error names crate::module::g"),
    ("args.rs", "use crate::{error, module::{init}};\n", "python layer's args names crate::module::init"),
    ("tensor/mod.rs", "pub use crate::args::parse;\n", "core layer's tensor names crate::args::parse"),
])
def test_an_arrow_up_fails(tmp_path, file, text, why):
    write(tmp_path, {**LAYERED, file: text})
    result = run(tmp_path, LAYERS)
    assert result.returncode == 1
    assert why in result.stdout


def test_lib_rs_out_of_order_fails(tmp_path):
    write(tmp_path, {**LAYERED, "lib.rs": "pub mod args;\n" + LAYERED["lib.rs"].replace("pub mod args;\n", "")})
    assert "not in" in run(tmp_path, LAYERS).stdout


def test_a_layer_table_that_differs_fails(tmp_path):
    write(tmp_path, LAYERED)
    table = "## Layers\n\n| layer | files | the rule |\n|---|---|---|\n"
    rows = {"python": "`src/module/`, `src/args.rs`", "core": "`src/tensor/`", "bottom": "`src/error/`, `src/dtype.rs`"}
    doc = tmp_path / "design.md"
    doc.write_text(table + "".join(f"| {k} | {v} | rule |\n" for k, v in rows.items()) + "\n## Next\n")
    assert run(tmp_path, LAYERS, "--doc", str(doc)).returncode == 0
    doc.write_text(table + "".join(f"| {k} | {v} | rule |\n" for k, v in {**rows, "core": "`src/tensor/`, `src/copy.rs`"}.items()))
    result = run(tmp_path, LAYERS, "--doc", str(doc))
    assert result.returncode == 1
    assert "the core row differs" in result.stdout and "copy" in result.stdout


def test_two_files_of_one_folder_importing_each_other_are_a_circle(tmp_path):
    write(tmp_path, {
        "lib.rs": "mod python;\n",
        "python/mod.rs": "mod a;\nmod b;\n",
        "python/a.rs": "use super::b::thing;\n",
        "python/b.rs": "pub fn thing() { super::a::other() }\n",
    })
    result = run(tmp_path)
    assert result.returncode == 1
    assert "python/a.rs -> " in result.stdout and "python/b.rs -> " in result.stdout


def test_a_circle_between_folders_through_use_groups_is_found(tmp_path):
    write(tmp_path, {
        "lib.rs": "mod core;\nmod python;\n",
        "core/tensor.rs": "use crate::python::{tensor::{wrap}};\n",
        "python/tensor.rs": "use crate::core::tensor as t;\n",
    })
    assert run(tmp_path).returncode == 1


def test_naming_the_folder_a_file_is_in_is_no_circle(tmp_path):
    write(tmp_path, {
        "lib.rs": "mod producers;\n",
        "producers/mod.rs": "mod numpy;\npub use numpy::ROW;\npub trait Producer {}\n",
        "producers/numpy.rs": "use super::Producer;\npub static ROW: u8 = 0;\n",
    })
    assert run(tmp_path).returncode == 0
