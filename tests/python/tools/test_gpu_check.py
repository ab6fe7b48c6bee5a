"""scripts/gpu_check.sh's reading of compute-sanitizer logs (scripts/sanitizer_errors.py), on
logs a GPU run wrote (an H200, driver 580, compute-sanitizer 2025.3.1), with the rules the script
itself lists. The script as a whole runs in CI with --simulated (scripts/test.sh)."""

import gzip
import importlib.util
import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
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


def test_the_script_s_rules_name_each_expected_error():
    expected, unexpected = reader.sort_errors("memcheck", reader.read_log(memcheck_log())[0], script_rules())
    reasons = {" ".join(why.split(" ")[:2]): n for why, n in expected.items()}
    # dlpx's four blocks, each listed twice: tensors whose frames compute-sanitizer's Python
    # backtraces kept alive (the run without backtraces shows dlpx holding nothing at exit).
    assert reasons == {"the out-of-memory": 2, "torch's caching": 4, "torch's pinned-memory": 1, "CuPy's memory": 1,
                       "compute-sanitizer's Python": 8}
    assert unexpected == []


def leak_log(leaks: int) -> str:
    """A memcheck log in compute-sanitizer's format with `leaks` leaks and no backtraces."""
    blocks = "".join(f"========= Leaked {512 * (i + 1):,} bytes at 0x{4096 * (i + 1):x}\n=========\n" for i in range(leaks))
    return f"========= COMPUTE-SANITIZER\n{blocks}========= ERROR SUMMARY: {leaks} error{'s' if leaks != 1 else ''}\n"


@pytest.mark.parametrize("account, leaks, ok", [
    ({"allocated_bytes.all.current": 0, "reserved_bytes.all.current": 0, "num_device_alloc": 16, "num_device_free": 16}, 6, True),
    ({"allocated_bytes.all.current": 0, "reserved_bytes.all.current": 0, "num_device_alloc": 16, "num_device_free": 16}, 5, True),
    ({"allocated_bytes.all.current": 0, "reserved_bytes.all.current": 0, "num_device_alloc": 16, "num_device_free": 16}, 7, False),
    ({"allocated_bytes.all.current": 512, "reserved_bytes.all.current": 512, "num_device_alloc": 16, "num_device_free": 15}, 6, False),
    (None, 6, False),
])
def test_leaks_without_backtraces_are_other_libraries_only_when_dlpx_s_account_is_empty(tmp_path, capsys, account, leaks, ok):
    with_backtraces = tmp_path / "memcheck.log"
    with_backtraces.write_text(memcheck_log())  # 6 leaks on torch's and CuPy's caches, 8 with dlpx's frames
    without = tmp_path / "leaks.log"
    without.write_text(leak_log(leaks))
    accounting = tmp_path / "account.json"
    if account is not None:
        accounting.write_text(json.dumps(account))
    rules = [f"--expect={r.tool}|{r.message.pattern}|{r.backtrace.pattern}|{r.why}" for r in script_rules()]
    status = reader.main(rules + [f"--accounting=test_cuda.py={accounting}", f"memcheck:test_cuda.py:{with_backtraces}",
                                  f"memcheck-leaks:test_cuda.py:{without}"])
    out = capsys.readouterr().out
    assert (status == 0) == ok, out
    if ok:
        assert "other libraries' caches" in out


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


def test_the_h200_run_with_and_without_backtraces_passes_the_script_s_rules(tmp_path, capsys):
    # A GPU run at the block cache (H200, driver 580.159.04): memcheck with backtraces over
    # test_cuda.py, and memcheck-leaks without, with dlpx's account at exit.
    with_backtraces = tmp_path / "memcheck.log"
    with gzip.open(os.path.join(DATA, "memcheck_test_cuda_h200_cache.log.gz"), "rt") as f:
        with_backtraces.write_text(f.read())
    rules = [f"--expect={r.tool}|{r.message.pattern}|{r.backtrace.pattern}|{r.why}" for r in script_rules()]
    status = reader.main(rules + [f"--accounting=test_cuda.py={os.path.join(DATA, 'accounting_test_cuda_h200.json')}",
                                  f"memcheck:test_cuda.py:{with_backtraces}",
                                  f"memcheck-leaks:test_cuda.py:{os.path.join(DATA, 'memcheck_leaks_test_cuda_h200.log')}"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "| memcheck-leaks | test_cuda.py | 9 | 3: the out-of-memory tests" in out
