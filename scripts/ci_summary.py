"""The closing table of scripts/test.sh, read from the run's log.

    python3 scripts/ci_summary.py LOG STATUS TSV

scripts/test.sh runs under tee into LOG and opens each stage with a line "==> NAME". Each stage
becomes one row: what it ran, counted from the tools' own closing lines in its part of the log
(cargo test's "test result:", ctest's "N% tests passed", pytest's "N passed, N skipped in Ts",
a "LABEL: N passed, N failed[, N skipped]" line), and what it skipped and why (pytest -rs's
"SKIPPED [n] file:line: why", ctest's "(Skipped)" list, "WHAT: skipped: why", "WARNING: ...").
STATUS is the run's exit status: when it is not 0 the last stage that started is marked FAILED.
The rows go to TSV (stage, result, ran, skipped) and, as a table, to stdout, which ends with one
plain line "ci: N passed, N failed, N skipped" over every count (a failed stage that no tool
counted a failure in counts as one).
"""

import collections
import re
import sys

STAGE = re.compile(r"^==> (.+)$")
CARGO = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored;")
CTEST = re.compile(r"^\d+% tests passed(?:, (\d+) tests? failed)? out of (\d+)")  # CMake 4 omits ", 0 tests failed"
CTEST_SKIP = re.compile(r"^\s*\d+ - (\S+) \(Skipped\)$")
PYTEST = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+|no tests ran) in [\d.]+s\b")
PYTEST_SKIP = re.compile(r"^SKIPPED \[(\d+)\] [^ ]+:\d+: (.*)$")
PLAIN = re.compile(r"^(.+?): (\d+) passed, (\d+) failed(?:, (\d+) skipped)?$")
SKIP = re.compile(r"^(?:== )?(.+?): skipped: (.+)$")
WARNING = re.compile(r"^WARNING: (.+)$")


class Stage:
    def __init__(self, name):
        self.name = name
        self.result = "ok"
        # kind -> Counter of passed/failed/skipped (and the tool's other words: xfailed, ignored ...)
        self.counts = collections.defaultdict(collections.Counter)
        self.skips = collections.Counter()  # why -> how many
        self.last = ""

    def read(self, line):
        if line.strip():
            self.last = line.strip()
        if m := CARGO.match(line):
            self.add("cargo test", passed=int(m[1]), failed=int(m[2]), ignored=int(m[3]))
        elif m := CTEST.match(line):
            failed = int(m[1] or 0)
            self.add("ctest", passed=int(m[2]) - failed, failed=failed)
        elif m := CTEST_SKIP.match(line):
            # ctest counts a skipped test as passed
            self.add("ctest", passed=-1, skipped=1)
            self.skips[f"ctest: {m[1]}"] += 1
        elif m := PYTEST.match(line):
            words = {{"error": "errors", "warning": "warnings"}.get(w, w): int(n)
                     for n, w in re.findall(r"(\d+) ([a-z]+)", m[1])}
            words.pop("warnings", None)
            self.add("pytest", **{"passed": 0, "failed": 0, **words})
        elif m := PYTEST_SKIP.match(line):
            self.skips[f"pytest: {m[2]}"] += int(m[1])
        elif m := PLAIN.match(line):
            kind = m[1] if " " not in m[1] else "tests"
            self.add(kind, passed=int(m[2]), failed=int(m[3]), skipped=int(m[4] or 0))
        elif m := SKIP.match(line):
            self.skips[f"{m[1]}: {m[2]}"] += 1
        elif m := WARNING.match(line):
            self.skips[m[1]] += 1

    def add(self, kind, **counts):
        self.counts[kind].update(counts)

    def short_name(self):
        """The table's name: the stage's words up to its first " (" or ": "."""
        return re.split(r" \(|: ", self.name, maxsplit=1)[0]

    def ran(self):
        if not self.counts:
            return f"no counts; last line: {self.last[:80]}" if self.last else "no counts, no output"
        parts = []
        for kind, c in self.counts.items():
            order = ["passed", "failed", "skipped"] + sorted(set(c) - {"passed", "failed", "skipped"})
            parts.append(f"{kind}: " + ", ".join(f"{c[w]} {w}" for w in order if w in c))
        return "; ".join(parts)

    def total(self, word):
        return sum(c[word] + (c["errors"] if word == "failed" else 0) for c in self.counts.values())


def stages_of(lines):
    stages = [Stage("(before the first stage)")]
    for line in lines:
        line = line.rstrip("\n")
        if m := STAGE.match(line):
            stages.append(Stage(m[1]))
        else:
            stages[-1].read(line)
    if len(stages) > 1 and not stages[0].counts and not stages[0].skips:
        stages.pop(0)
    return stages


def main(log, status, tsv):
    with open(log, errors="replace") as f:
        stages = stages_of(f)
    status = int(status)
    if status != 0:
        stages[-1].result = f"FAILED (exit {status})"
    with open(tsv, "w") as out:
        out.write("stage\tresult\tran\tskipped\n")
        for s in stages:
            skipped = " | ".join(f"{n} x {why}" if n > 1 else why for why, n in s.skips.most_common())
            out.write(f"{s.name}\t{s.result}\t{s.ran()}\t{skipped}\n")

    name_width = max(len("stage"), *(len(s.short_name()) for s in stages))
    result_width = max(len("result"), *(len(s.result) for s in stages))
    indent = " " * (name_width + result_width + 4)
    print(f"\n== summary of scripts/test.sh ({tsv}; the whole log: {log})")
    print(f"{'stage':<{name_width}}  {'result':<{result_width}}  ran, and what it skipped")
    for s in stages:
        print(f"{s.short_name():<{name_width}}  {s.result:<{result_width}}  {s.ran()}")
        for why, n in s.skips.most_common():
            why = why if len(why) <= 110 else why[:107] + "..."
            print(f"{indent}skipped {n}: {why}" if n > 1 else f"{indent}skipped: {why}")
    passed, failed = (sum(s.total(w) for s in stages) for w in ("passed", "failed"))
    skipped = sum(s.total("skipped") + s.total("ignored") for s in stages)
    if status != 0 and failed == 0:
        failed = 1
    print(f"ci: {passed} passed, {failed} failed, {skipped} skipped")


if __name__ == "__main__":
    main(*sys.argv[1:])
