"""Running the checks for named libraries, and printing the results as tables or JSON."""

from __future__ import annotations

import json

from . import clauses as C
from .consumer import check_consumer
from .libraries import Library
from .producer import check_library
from .results import FAIL, PASS, SKIP, Checks


def run_library(library: Library) -> dict:
    """Producer and consumer checks of one loaded library (`libraries.load`: a library that
    cannot be loaded is no run at all): {'library', 'producer', 'consumer'}."""
    producer, consumer = Checks(), Checks()
    check_library(library, producer)
    if library.from_dlpack is None:
        consumer.skip("consumer.available", "no from_dlpack for this library", C.ZERO_COPY)
    else:
        check_consumer(library.from_dlpack, checks=consumer)
    return {"library": library.spec, "producer": producer, "consumer": consumer}


def summary(checks) -> dict:
    counts = {PASS: 0, FAIL: 0, SKIP: 0}
    for c in checks:
        counts[c.status] += 1
    counts["failed_required"] = sum(c.failed_required for c in checks)
    return counts


def all_ok(runs) -> bool:
    return all(run[role].ok for run in runs for role in ("producer", "consumer"))


def as_json(runs) -> str:
    out = []
    for run in runs:
        checks = list(run["producer"]) + list(run["consumer"])
        out.append({
            "library": run["library"],
            "ok": run["producer"].ok and run["consumer"].ok,
            "summary": summary(checks),
            "producer": [c.as_dict() for c in run["producer"]],
            "consumer": [c.as_dict() for c in run["consumer"]],
        })
    return json.dumps({"ok": all_ok(runs), "libraries": out}, indent=2)


_MARK = {PASS: "pass", FAIL: "FAIL", SKIP: "skip"}


def as_text(runs) -> str:
    lines = []
    for run in runs:
        checks = list(run["producer"]) + list(run["consumer"])
        s = summary(checks)
        verdict = "conforms" if run["producer"].ok and run["consumer"].ok else "DOES NOT CONFORM"
        lines.append(f"== {run['library']}: {verdict} ({s[PASS]} passed, {s[FAIL]} failed of which {s['failed_required']} required, {s[SKIP]} skipped)")
        width = max((len(c.name) for c in checks), default=10)
        for role in ("producer", "consumer"):
            for c in run[role]:
                mark = _MARK[c.status] + ("" if c.required else "?")
                lines.append(f"  {mark:5} {c.name:{width}}  {c.detail[:100]}  [{c.clause}]")
                if c.status == FAIL:
                    lines.append(f"  {'':5} {'':{width}}  clause: \"{c.clause.quote}\"")
        lines.append("")
    lines.append("(? = recommended, not required; exit status 0 iff every required check passes)")
    return "\n".join(lines)
