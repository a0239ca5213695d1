"""Records shared by every layer: results, verdicts, probe specs.

One record style for the whole package: frozen dataclasses with `to_json()`; JSON (XCom, JSONB,
CLI) is their only wire format.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class Result(enum.StrEnum):
    """A verdict's result. Ordered by severity for worst-of (`severity`)."""

    PASS = "pass"
    WARN = "warn"
    INCONCLUSIVE = "inconclusive"
    FAIL = "fail"
    ERROR = "error"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {
    Result.PASS: 0,
    Result.WARN: 1,
    Result.INCONCLUSIVE: 2,
    Result.FAIL: 3,
    Result.ERROR: 4,
}


def worst(results: list[Result] | tuple[Result, ...]) -> Result:
    """The most severe result; an empty list cannot pass."""
    if not results:
        return Result.INCONCLUSIVE
    return max(results, key=lambda r: r.severity)


def summarize(
    verdicts: Iterable[Mapping[str, Any]], *, accepted: tuple[Result, ...] = (Result.PASS,)
) -> dict[str, Any]:
    """A suite's run summary: counts per criterion and result, and one line per stored verdict whose
    result is not `accepted`."""
    rows = list(verdicts)
    counts = Counter((str(v["criterion"]), str(v["result"])) for v in rows)
    width = max((len(str(v["criterion"])) for v in rows), default=0)
    return {
        "counts": {f"{c} {r}": n for (c, r), n in sorted(counts.items())},
        "not_passed": [
            f"{v['result']:>12}  {v['criterion']:<{width}} {v['subject']}: {v['reason']}"
            for v in rows
            if v["result"] not in accepted
        ],
    }


@dataclass(frozen=True, slots=True)
class Verdict:
    """One judgement of one criterion on one subject.

    `judged_against` names what the evidence was compared with: the policy table version, and
    for baseline-relative criteria the baseline id and version.
    """

    criterion: str
    subject: str
    result: Result
    action: str
    rule_id: str
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    judged_against: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "criterion": self.criterion,
            "subject": self.subject,
            "result": self.result.value,
            "action": self.action,
            "rule_id": self.rule_id,
            "reason": self.reason,
            "evidence": self.evidence,
            "judged_against": self.judged_against,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verdict:
        return cls(
            criterion=str(data["criterion"]),
            subject=str(data["subject"]),
            result=Result(data["result"]),
            action=str(data["action"]),
            rule_id=str(data["rule_id"]),
            reason=str(data.get("reason", "")),
            evidence=dict(data.get("evidence") or {}),
            judged_against=dict(data.get("judged_against") or {}),
        )
