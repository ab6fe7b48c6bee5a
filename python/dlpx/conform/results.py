"""One check's outcome, and the list a run of checks fills."""

from __future__ import annotations

from dataclasses import dataclass

from .clauses import Clause

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass
class Check:
    """name, status (pass/fail/skip), detail, the clause it comes from, and whether a failure
    makes the library non-conforming (``required``) or is a recommendation it misses."""

    name: str
    status: str
    detail: str
    clause: Clause
    required: bool = True

    @property
    def failed_required(self) -> bool:
        return self.status == FAIL and self.required

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "required": self.required,
            "detail": self.detail,
            "clause": {"file": self.clause.file, "section": self.clause.section, "quote": self.clause.quote},
        }


class Checks(list):
    """The checks of one run, in order; `record` appends one."""

    def record(self, name, ok, detail, clause, *, required=True) -> bool:
        """Record a pass (ok true), a fail (ok false) or a skip (ok None); returns ok."""
        status = SKIP if ok is None else (PASS if ok else FAIL)
        self.append(Check(name, status, detail, clause, required))
        return bool(ok)

    def skip(self, name, detail, clause, *, required=True) -> None:
        self.record(name, None, detail, clause, required=required)

    @property
    def ok(self) -> bool:
        return not any(c.failed_required for c in self)
