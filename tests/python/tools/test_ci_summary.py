"""The closing table of scripts/test.sh (scripts/ci_summary.py): each stage's row counts what the
tools' own closing lines say, lists what was skipped and why, and the stage a failed run stopped
in is marked (docs/reliability.md, "CI")."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SUMMARY = os.path.join(ROOT, "scripts", "ci_summary.py")

pytestmark = pytest.mark.skipif(not os.path.exists(SUMMARY), reason="needs the source tree (scripts/ci_summary.py)")

LOG = """\
==> what the tests need
disk: 60 GiB free
==> layering and formatting
WARNING: rustfmt is not installed and could not be added: formatting not checked
==> cargo test
test result: ok. 700 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 3.10s
test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.50s
==> cmake build + ctest (C11, C++17)
100% tests passed, 0 tests failed out of 150
The following tests did not run:
\t 31 - test_cuda_no_driver_c11 (Skipped)
\t 32 - test_cuda_no_driver_c11_valgrind (Skipped)
==> pip install . and pytest
SKIPPED [12] python/test_cuda.py:20: needs a CUDA GPU
SKIPPED [1] python/test_cuda_array_interface.py:75: could not import 'numba.cuda': No module named 'numba'
2000 passed, 13 skipped, 3 xfailed, 4 warnings in 300.12s (0:05:00)
test result: ok. 9 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s
==> the wheel on every CPython 3.9-3.15
== CPython 3.14 and 3.15 (Debian forky chroot): skipped: debootstrap and chroot need root
pythons: 5 passed, 0 failed, 1 skipped
"""


def summarize(tmp_path, log, status):
    (tmp_path / "ci.log").write_text(log)
    done = subprocess.run([sys.executable, SUMMARY, str(tmp_path / "ci.log"), str(status), str(tmp_path / "ci.tsv")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in (tmp_path / "ci.tsv").read_text().splitlines()[1:]]
    return {row[0]: row[1:] for row in rows}, done.stdout.splitlines()


def test_each_stage_counts_what_its_tools_closing_lines_say(tmp_path):
    rows, out = summarize(tmp_path, LOG, 0)
    assert rows["cargo test"][:2] == ["ok", "cargo test: 712 passed, 0 failed, 3 ignored"]
    assert rows["cmake build + ctest (C11, C++17)"][1] == "ctest: 148 passed, 0 failed, 2 skipped"
    assert rows["pip install . and pytest"][1] == ("pytest: 2000 passed, 0 failed, 13 skipped, 3 xfailed; "
                                                   "cargo test: 9 passed, 0 failed, 0 ignored")
    assert rows["the wheel on every CPython 3.9-3.15"][1] == "pythons: 5 passed, 0 failed, 1 skipped"
    assert rows["what the tests need"][1] == "no counts; last line: disk: 60 GiB free"
    assert out[-1] == "ci: 2874 passed, 0 failed, 19 skipped"


def test_each_stage_says_what_it_skipped_and_why(tmp_path):
    rows, out = summarize(tmp_path, LOG, 0)
    assert rows["layering and formatting"][2] == "rustfmt is not installed and could not be added: formatting not checked"
    assert rows["cmake build + ctest (C11, C++17)"][2] == "ctest: test_cuda_no_driver_c11 | ctest: test_cuda_no_driver_c11_valgrind"
    assert rows["pip install . and pytest"][2] == ("12 x pytest: needs a CUDA GPU | "
                                                   "pytest: could not import 'numba.cuda': No module named 'numba'")
    assert rows["the wheel on every CPython 3.9-3.15"][2] == "CPython 3.14 and 3.15 (Debian forky chroot): debootstrap and chroot need root"
    assert any(line.endswith("skipped 12: pytest: needs a CUDA GPU") for line in out)


def test_the_stage_a_failed_run_stopped_in_is_marked(tmp_path):
    log = LOG + "==> free-threaded CPython 3.14t\nerror: something broke\n"
    rows, out = summarize(tmp_path, log, 2)
    assert rows["free-threaded CPython 3.14t"][0] == "FAILED (exit 2)"
    assert [r[0] for name, r in rows.items() if name != "free-threaded CPython 3.14t"] == ["ok"] * 6
    assert out[-1] == "ci: 2874 passed, 1 failed, 19 skipped"  # a failure no tool counted is one


def test_failures_and_errors_are_counted_from_ctest_and_pytest(tmp_path):
    log = ("==> ctest\n83% tests passed, 2 tests failed out of 12\n"
           "==> pytest\n1 failed, 3 passed, 2 errors in 1.00s\n")
    rows, out = summarize(tmp_path, log, 1)
    assert rows["ctest"][1] == "ctest: 10 passed, 2 failed"
    assert rows["pytest"][1] == "pytest: 3 passed, 1 failed, 2 errors"
    assert out[-1] == "ci: 13 passed, 5 failed, 0 skipped"


def test_ctest_of_cmake_4_omits_no_failures(tmp_path):
    rows, _ = summarize(tmp_path, "==> ctest\n100% tests passed out of 12\n", 0)
    assert rows["ctest"][1] == "ctest: 12 passed, 0 failed"
