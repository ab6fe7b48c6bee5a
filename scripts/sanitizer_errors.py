"""Reads compute-sanitizer logs (`--log-file`) and sorts each error into expected — a rule of
scripts/gpu_check.sh says why — or unexpected. Prints one Markdown row per log and, after the
table, every unexpected error with its backtrace; exits 1 when any error is unexpected or a log
cannot be read.

    python scripts/sanitizer_errors.py --expect 'TOOL|MESSAGE_RE|BACKTRACE_RE|WHY' ... \
        TOOL:SUITE:LOGFILE ...

A rule matches an error of its tool whose first line matches MESSAGE_RE and whose backtrace
(every line after the first) matches BACKTRACE_RE (an empty regex matches anything).

A run of the tool `memcheck-leaks` is memcheck's leak check without backtraces (whose Python
frames keep objects alive), with `--accounting SUITE=FILE`: dlpx's own account of what it held at
exit (tests/python/helpers/dlpx_accounting.py). Its leaks are expected when dlpx held nothing then and
they are no more than the backtrace run of the same suite puts on other libraries; its other
errors go by memcheck's rules.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass

PREFIX = re.compile(r"^=+ ?")
# Lines of the sanitizer's own about a run, not errors.
NOT_ERRORS = re.compile(
    r"^(COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|Target application returned|"
    r"This application|No .*errors|Sanitizer|Internal Sanitizer|Process )"
)
# memcheck, synccheck and initcheck end with "ERROR SUMMARY: N errors"; racecheck with
# "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)".
SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?|RACECHECK SUMMARY: (\d+) hazards? displayed")
REFUSED = re.compile(r"Device not supported|Error: Target application terminated before first instrumented API call|"
                     r"unable to (find|load)|Unable to", re.IGNORECASE)


@dataclass
class Error:
    message: str
    backtrace: list[str]


@dataclass
class Rule:
    tool: str
    message: re.Pattern
    backtrace: re.Pattern
    why: str

    @staticmethod
    def parse(text: str) -> "Rule":
        tool, message, backtrace, why = text.split("|", 3)
        return Rule(tool, re.compile(message), re.compile(backtrace), why)

    def matches(self, tool: str, error: Error) -> bool:
        return (self.tool == tool and self.message.search(error.message) is not None
                and self.backtrace.search("\n".join(error.backtrace)) is not None)


def read_log(text: str) -> tuple[list[Error], int | None, str | None]:
    """The errors of one log, the count its ERROR SUMMARY gives (None: no summary), and why the
    sanitizer could not run, if it says so."""
    errors: list[Error] = []
    summary, refused, current = None, None, None
    for raw in text.splitlines():
        if not raw.startswith("="):
            continue
        line = PREFIX.sub("", raw, count=1)
        if not line.strip():
            current = None
            continue
        if found := SUMMARY.search(line):
            summary = int(found.group(1) or found.group(2))
        if line[0].isspace():
            if current is not None:
                current.backtrace.append(line.strip())
            continue
        if REFUSED.search(line):
            refused, current = line.strip(), None
            continue
        if NOT_ERRORS.search(line):
            current = None
            continue
        current = Error(line.strip(), [])
        errors.append(current)
    return errors, summary, refused


def sort_errors(tool: str, errors: list[Error], rules: list[Rule]) -> tuple[dict[str, int], list[Error]]:
    """How many errors each rule's reason covers, and the errors no rule covers."""
    expected: dict[str, int] = {}
    unexpected = []
    for error in errors:
        rule = next((r for r in rules if r.matches(tool, error)), None)
        if rule is None:
            unexpected.append(error)
        else:
            expected[rule.why] = expected.get(rule.why, 0) + 1
    return expected, unexpected


LEAKED = re.compile(r"^Leaked [0-9,]+ bytes")
DLPX_FRAMES = re.compile(r"dlpx::")


def read_accounting(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def held_nothing(account: dict | None) -> bool:
    return (account is not None and account.get("allocated_bytes.all.current") == 0
            and account.get("reserved_bytes.all.current") == 0
            and account.get("num_device_alloc") == account.get("num_device_free"))


def sort_leak_run(errors, rules, account, others) -> tuple[dict[str, int], list[Error], str | None]:
    """A memcheck-leaks run: leaks against dlpx's account and the backtrace run's count of other
    libraries' leaks (`others`, None without that run); other errors by memcheck's rules."""
    leaks = [e for e in errors if LEAKED.search(e.message)]
    expected, unexpected = sort_errors("memcheck", [e for e in errors if not LEAKED.search(e.message)], rules)
    problem = None
    if not held_nothing(account):
        problem = f"dlpx's account at exit is not empty: {account}"
    elif others is not None and len(leaks) > others:
        # Backtraces keep objects of every library alive, so a run without them may list fewer
        # of the other libraries' leaks, never more.
        problem = f"{len(leaks)} leaks without backtraces, only {others} put on other libraries with them"
    if problem:
        return expected, unexpected + leaks, problem
    if leaks:
        why = (f"other libraries' caches (dlpx's account at exit: {account['num_device_alloc']} driver allocations, "
               f"as many frees, 0 bytes held)")
        expected[why] = len(leaks)
    return expected, unexpected, None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expect", action="append", default=[], help="TOOL|MESSAGE_RE|BACKTRACE_RE|WHY")
    parser.add_argument("--accounting", action="append", default=[], help="SUITE=FILE (for memcheck-leaks runs)")
    parser.add_argument("runs", nargs="+", help="TOOL:SUITE:LOGFILE")
    args = parser.parse_args(argv)
    rules = [Rule.parse(text) for text in args.expect]
    accounts = dict(text.split("=", 1) for text in args.accounting)
    # Leaks the backtrace run of each suite puts on other libraries (not on dlpx's frames).
    others: dict[str, int] = {}
    for run in args.runs:
        tool, suite, path = run.split(":", 2)
        if tool == "memcheck":
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    errors = read_log(f.read())[0]
            except OSError:
                continue
            others[suite] = sum(1 for e in errors if LEAKED.search(e.message)
                                and not DLPX_FRAMES.search("\n".join(e.backtrace)))

    print("| tool | on | errors | expected | unexpected |")
    print("|---|---|---|---|---|")
    details, failed = [], False
    for run in args.runs:
        tool, suite, path = run.split(":", 2)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                errors, summary, refused = read_log(f.read())
        except OSError as err:
            print(f"| {tool} | {suite} | no log ({err.strerror}) | | |")
            failed = True
            continue
        if refused and not errors:
            print(f"| {tool} | {suite} | not run: {refused} | | |")
            failed = True
            continue
        if summary is None:
            print(f"| {tool} | {suite} | no ERROR SUMMARY: the run did not finish | | |")
            failed = True
        elif summary != len(errors):
            details.append(f"{tool} on {suite}: the summary counts {summary} errors, the log holds {len(errors)}")
            failed = True
        if tool == "memcheck-leaks":
            account = read_accounting(accounts[suite]) if suite in accounts else None
            expected, unexpected, problem = sort_leak_run(errors, rules, account, others.get(suite))
            if problem:
                details.append(f"{tool} on {suite}: {problem}")
        else:
            expected, unexpected = sort_errors(tool, errors, rules)
        reasons = "; ".join(f"{n}: {why}" for why, n in expected.items()) or "0"
        if summary is not None:
            print(f"| {tool} | {suite} | {len(errors)} | {reasons} | {len(unexpected)} |")
        for error in unexpected:
            details.append(f"{tool} on {suite}: {error.message}\n" + "".join(f"    {b}\n" for b in error.backtrace[:16]))
        failed |= bool(unexpected)
    if details:
        print("\nUnexpected:\n")
        print("```")
        print("\n".join(details))
        print("```")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
