"""Shared setup for the dlpx pytest suite.

The suite imports `dlpx` as installed (CI pip-installs it; in-tree runs set DLPX_LIBRARY and
PYTHONPATH). The tests read the DLPack ABI through `dlpx.conform.abi`, as the conformance kit does;
`helpers/numpy_producers.py` builds counted producers over numpy arrays on it.

The tests, by what they test: rows/ (each producer row: numpy, torch, jax, tvm_ffi,
array_api_strict, their direct reads and the seam), protocols/ (DLPack capsules and
`__dlpack__`, the exchange table, the older array protocols), entry_points/ (from_dlpack,
dlpx.Tensor, arguments, errors, `python -m dlpx`, the stubs), guarantees/ (what holds on every
path: faithful import, read-only, lifetimes, hostile inputs), kernels/ (the kernel API's examples
and libraries), cuda/ (CUDA on a GPU and on the simulated driver), tools/ (the conformance kit,
the docs, the CI and repository scripts); helpers/ holds the modules they import.
"""

import importlib.metadata
import os
import sys

# jax probes for accelerators at import; the tests need its CPU backend only.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Every direct read takes its first-use check, tested producer version or not, so the tests of
# that check (a lying producer turns a read off) run whatever versions are installed
# (docs/design.md, "A guard per direct read"; test_producer_seam.py covers the tested-version way).
os.environ.setdefault("DLPX_DIRECT_VERIFY", "all")
# ... and a check that finds a difference is an error, not a warning and a quiet fallback: a direct
# read that disagrees with its producer fails the suite (subprocesses inherit it).
os.environ.setdefault("DLPX_DIRECT_STRICT", "1")

# Make the helper modules (helpers/) importable whatever pytest's import mode is.
_HERE = os.path.dirname(os.path.abspath(__file__))
HELPERS = os.path.join(_HERE, "helpers")
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)

import pytest  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402  (pytest's own dependency)
from packaging.utils import canonicalize_name  # noqa: E402

from dlpx.conform.reference import STRAY_DELETES  # noqa: E402

import direct_reads  # noqa: E402
import report_tables  # noqa: E402

# DLPX_REQUIRE_ALL_TESTS=1 (scripts/test.sh): every peer tests/requirements.txt lists is installed,
# and pytest.importorskip of a module one of them provides fails instead of skipping. Other skips
# stay skips: what CI cannot have (a GPU, numba), and the runs that leave the variable unset (the
# free-threaded and aarch64 interpreters, which lack some peers' wheels).
REQUIRE_ALL = bool(os.environ.get("DLPX_REQUIRE_ALL_TESTS"))
REQUIREMENTS = os.path.join(_HERE, "..", "requirements.txt")


def required_distributions():
    """tests/requirements.txt's distribution names, normalized."""
    with open(REQUIREMENTS) as f:
        lines = (line.split("#", 1)[0].strip() for line in f)
        return {canonicalize_name(Requirement(line).name) for line in lines if line}


def requirement_providing(modname):
    """The tests/requirements.txt distribution that installs `modname`, or None."""
    top = modname.split(".")[0]
    # Python 3.10+ maps modules to distributions (PIL to pillow); on 3.9, the module's own name.
    providers = getattr(importlib.metadata, "packages_distributions", dict)().get(top, [top])
    required = required_distributions()
    return next((d for d in providers if canonicalize_name(d) in required), None)


_importorskip = pytest.importorskip


def importorskip_unless_required(modname, *args, **kwargs):
    """pytest.importorskip, except that a module of a required peer must import."""
    __tracebackhide__ = True  # a skip names the test's line, not this one
    try:
        return _importorskip(modname, *args, **kwargs)
    except pytest.skip.Exception as skipped:
        peer = requirement_providing(modname)
        if peer is None:
            raise
        why = skipped.msg
    pytest.fail(f"DLPX_REQUIRE_ALL_TESTS=1: {modname} ({peer}, in tests/requirements.txt) does not import here, "
                f"and a skip would hide that: {why}", pytrace=False)


def pytest_configure(config):
    if not REQUIRE_ALL:
        return
    missing = [name for name in sorted(required_distributions()) if not installed(name)]
    if missing:
        raise pytest.UsageError(f"DLPX_REQUIRE_ALL_TESTS=1 but {sys.executable} lacks tests/requirements.txt's "
                                f"{', '.join(missing)}: pip install -r tests/requirements.txt")
    pytest.importorskip = importorskip_unless_required


def installed(distribution):
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "direct_read(row): the test proves that the row's direct read served its calls "
        "(direct_reads.py); expected to fail where DLPX_DIRECT_OFF switches the row off")


def pytest_collection_modifyitems(config, items):
    """A test that proves a direct read serves is expected to fail with that read switched off."""
    for item in items:
        for mark in item.iter_markers("direct_read"):
            row = mark.args[0]
            if direct_reads.off(row):
                reason = f"DLPX_DIRECT_OFF switches the {row} direct read off; this test proves it serves"
                item.add_marker(pytest.mark.xfail(strict=True, reason=reason))


def pytest_terminal_summary(terminalreporter):
    """The tables tests filled (test_faithful_import.py's), after the run."""
    for title, lines in report_tables.TABLES:
        terminalreporter.write_sep("-", title)
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def no_double_delete():
    """Every test: no deleter of a hand-made or kit-made tensor runs twice (or for a tensor it never made)."""
    before = len(STRAY_DELETES)
    yield
    assert STRAY_DELETES[before:] == [], "a DLPack deleter ran twice"
