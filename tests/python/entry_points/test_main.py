"""`python -m dlpx`: where the C/C++ build files are, for the installed package and for a
source checkout run in place (PYTHONPATH=python), which has headers but no CMake package."""

import os
import subprocess
import sys

import pytest

import dlpx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
IN_PLACE = os.path.abspath(dlpx.__file__).startswith(os.path.join(ROOT, "python") + os.sep)
# DLPX_REQUIRE_ALL_TESTS runs it anyway, so a CI that forgot `pip install .` fails here.
needs_install = pytest.mark.skipif(IN_PLACE and not os.environ.get("DLPX_REQUIRE_ALL_TESTS"),
                                   reason="the tests import dlpx from the source tree, not an installed package")


def where(option, **env):
    return subprocess.run([sys.executable, "-m", "dlpx", option], capture_output=True, text=True,
                          env={**os.environ, **env})


@needs_install
@pytest.mark.parametrize("option, marker", [
    ("--includedir", os.path.join("dlpx", "dlpx.h")),
    ("--cmakedir", "dlpxConfig.cmake"),
    ("--libdir", None),
])
def test_the_installed_package_names_directories_that_hold_its_files(option, marker):
    done = where(option)
    assert done.returncode == 0, done.stderr
    path = done.stdout.strip()
    assert os.path.isdir(path)
    if marker:
        assert os.path.isfile(os.path.join(path, marker))


def test_library_and_version_answer_what_the_package_loads():
    assert where("--library").stdout.strip() == dlpx.library_path()
    assert where("--version").stdout.strip() == dlpx.__version__


in_place = dict(PYTHONPATH=os.path.join(ROOT, "python"), DLPX_LIBRARY=dlpx.library_path())


def test_a_source_checkout_gives_the_repository_headers():
    done = where("--includedir", **in_place)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == os.path.join(ROOT, "include")


def test_a_source_checkout_has_no_cmake_package_and_says_so():
    done = where("--cmakedir", **in_place)
    assert done.returncode != 0 and done.stdout == ""
    assert "dlpx: no CMake package at" in done.stderr and "not an installed package" in done.stderr
