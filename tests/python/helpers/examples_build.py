"""Builds an example extension from examples/ out of tree, as a user would: CMake with
find_package(dlpx) located through `python -m dlpx --cmakedir` of the installed package."""

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def build_example(directory, module_name, tmp_path_factory, cmake_args=()):
    build = configure_and_build(directory, tmp_path_factory, [f"-DPython3_EXECUTABLE={sys.executable}", *cmake_args])
    [path] = [os.path.join(build, f) for f in os.listdir(build) if f.startswith(module_name) and f.endswith(".so")]
    return load_module(module_name, path)


def configure_and_build(directory, tmp_path_factory, cmake_args=()):
    """examples/<directory> (or an absolute path) configured and built out of tree; the build directory."""
    # A source checkout run in place has no CMake package: `--cmakedir` says so and exits 1.
    out = subprocess.run([sys.executable, "-m", "dlpx", "--cmakedir"], capture_output=True, text=True)
    cmake_dir = out.stdout.strip()
    if shutil.which("cmake") is None or out.returncode != 0:
        reason = f"needs cmake and an installed dlpx (pip install .): {out.stderr.strip() or 'no cmake'}"
        if os.environ.get("DLPX_REQUIRE_ALL_TESTS"):
            pytest.fail(reason)
        pytest.skip(reason)
    build = tmp_path_factory.mktemp(os.path.basename(directory))
    configure = [
        "cmake", "-S", os.path.join(REPO, "examples", directory), "-B", str(build), f"-Ddlpx_DIR={cmake_dir}",
        "-DCMAKE_BUILD_TYPE=Release", "-DDLPX_WERROR=ON", *cmake_args,
    ]
    for command in (configure, ["cmake", "--build", str(build)]):
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return str(build)


def load_module(module_name, path):
    """Imports the extension module at `path` (built here or by a script) under `module_name`."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
