"""scripts/gpu_check.sh's reading of compute-sanitizer logs (scripts/sanitizer_errors.py), on
logs a GPU run wrote (an H200, driver 580, compute-sanitizer 2025.3.1), with the rules the script
itself lists. The script as a whole runs in CI with --simulated (scripts/test.sh)."""

import gzip
import importlib.util
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def load_reader():
    spec = importlib.util.spec_from_file_location("sanitizer_errors", os.path.join(ROOT, "scripts", "sanitizer_errors.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


reader = load_reader()


def script_rules():
    """The `expected=(...)` rules of scripts/gpu_check.sh, as the script passes them."""
    with open(os.path.join(ROOT, "scripts", "gpu_check.sh")) as f:
        text = f.read()
    block = re.search(r"^expected=\(\n(.*?)^\)", text, re.S | re.M).group(1)
    return [reader.Rule.parse(line) for line in re.findall(r'^\s*"(.*)"\s*$', block, re.M)]


def memcheck_log():
    with gzip.open(os.path.join(DATA, "memcheck_test_cuda_h200.log.gz"), "rt") as f:
        return f.read()


def test_every_error_of_a_memcheck_log_is_read_with_its_backtrace():
    errors, summary, refused = reader.read_log(memcheck_log())
    assert summary == 16 and len(errors) == 16 and refused is None
    assert sum(e.message.startswith("Leaked") for e in errors) == 14
    assert all(any("Host Frame" in line for line in e.backtrace) for e in errors)


def test_the_script_s_rules_name_each_expected_error_and_leave_the_rest():
    expected, unexpected = reader.sort_errors("memcheck", reader.read_log(memcheck_log())[0], script_rules())
    reasons = {why.split(" ")[0] + " " + why.split(" ")[1]: n for why, n in expected.items()}
    assert reasons == {"the out-of-memory": 2, "torch's caching": 4, "torch's pinned-memory": 1, "CuPy's memory": 1}
    # What that run left unexplained: dlpx's pool blocks alive at exit, each reported twice.
    assert len(unexpected) == 8
    assert all(any("dlpx::memory::cuda::pool::alloc_device" in line for line in e.backtrace) for e in unexpected)


def test_a_rule_is_of_one_tool():
    errors = reader.read_log(memcheck_log())[0]
    expected, unexpected = reader.sort_errors("initcheck", errors, script_rules())
    assert expected == {} and len(unexpected) == len(errors)


def test_racecheck_s_summary_counts_hazards():
    with open(os.path.join(DATA, "racecheck_test_cuda_h200.log")) as f:
        errors, summary, refused = reader.read_log(f.read())
    assert (errors, summary, refused) == ([], 0, None)


@pytest.mark.parametrize("log, verdict", [
    ("", "no ERROR SUMMARY"),
    ("========= COMPUTE-SANITIZER\n========= Error: Device not supported\n", "not run: Error: Device not supported"),
])
def test_a_run_that_did_not_finish_or_was_refused_fails(tmp_path, capsys, log, verdict):
    path = tmp_path / "run.sanitizer"
    path.write_text(log)
    assert reader.main([f"memcheck:suite:{path}"]) == 1
    assert verdict in capsys.readouterr().out


def test_an_unexpected_error_fails_and_is_shown_with_its_backtrace(tmp_path, capsys):
    path = tmp_path / "run.sanitizer"
    path.write_text(memcheck_log())
    rules = [f"--expect={line}" for line in ("memcheck|CUDA_ERROR_OUT_OF_MEMORY|.|on purpose",)]
    assert reader.main(rules + [f"memcheck:test_cuda.py:{path}"]) == 1
    out = capsys.readouterr().out
    assert "| memcheck | test_cuda.py | 16 | 2: on purpose | 14 |" in out
    assert "CUDACachingAllocator" in out and "dlpx::memory::cuda::pool::alloc_device" in out
