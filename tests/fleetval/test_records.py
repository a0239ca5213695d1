"""The shared run summary: counts per criterion and result, a line per verdict not accepted."""

from __future__ import annotations

from fleetval.records import Result, summarize, worst

ROWS = [
    {"criterion": "D-OP-01", "subject": "n1", "result": "pass", "reason": "every operand ready"},
    {"criterion": "D-OP-01", "subject": "n2", "result": "warn", "reason": "validator restarted"},
    {"criterion": "D-GPU-MIG-03", "subject": "n1", "result": "fail", "reason": "B slowed 40 %"},
    {"criterion": "D-OP-02", "subject": "n2", "result": "error", "reason": "API timeout"},
]


def test_counts_every_result_and_lists_what_did_not_pass() -> None:
    summary = summarize(ROWS)
    assert summary["counts"] == {
        "D-GPU-MIG-03 fail": 1,
        "D-OP-01 pass": 1,
        "D-OP-01 warn": 1,
        "D-OP-02 error": 1,
    }
    assert [line.split()[0] for line in summary["not_passed"]] == ["warn", "fail", "error"]
    assert "n1: B slowed 40 %" in summary["not_passed"][1]


def test_a_suite_may_accept_warnings() -> None:
    summary = summarize(ROWS, accepted=(Result.PASS, Result.WARN))
    assert [line.split()[0] for line in summary["not_passed"]] == ["fail", "error"]


def test_nothing_stored_is_nothing_passed() -> None:
    assert summarize([]) == {"counts": {}, "not_passed": []}
    assert worst([]) is Result.INCONCLUSIVE
