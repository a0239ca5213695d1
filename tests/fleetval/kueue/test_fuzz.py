"""Kueue evidence under attack: a damaged Workload (object or `kubectl describe`) parses or raises
ParseError, its waiting reason never crashes, and nothing that lost its QuotaReserved condition
reads as Admitted (the judge's `state` and D-SCHED-07 read these)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given

from fleetval.errors import ParseError
from fleetval.kueue.parse import parse_workload
from fleetval.kueue.reasons import waiting_reason
from tests.fuzz import Mutant, fuzz_settings, mutants, record, timed
from tests.paths import FIXTURES

FAMILY = "kueue"
SEEDS = tuple(
    (path.name, path.read_text())
    for path in sorted((FIXTURES / "kueue").iterdir())
    if path.name != "SOURCES.md"
)
WORDS = ("True", "False", "QuotaReserved", "Admitted", "Pending", "Evicted", "Finished", "Inadmissible")
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def check(mutant: Mutant) -> None:
    with timed(FAMILY):
        try:
            workload = parse_workload(mutant.text)
        except ParseError:
            record(FAMILY, "parse_error")
            return
        reason = waiting_reason(workload, NOW)
    record(FAMILY, "parsed")
    if reason.state == "Admitted":
        admitted = [c for c in workload["status"]["conditions"] if c.get("type") == "Admitted"]
        assert admitted and admitted[-1].get("status") == "True", mutant


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(SEEDS, words=WORDS))
def test_a_damaged_workload_parses_or_is_a_parse_error_and_admits_nothing_it_does_not_say(
    mutant: Mutant,
) -> None:
    check(mutant)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000,
        "status:\n  requeueState: x\n",
        "status:\n  requeueState:\n    requeueAt: 2024-02-11T04:51:03\n",
        "spec: 3\nstatus: {}\n",
        "status:\n  conditions:\n" + "  - type: Admitted\n    status: 'True'\n" * 2000,
    ],
)
def test_hostile_shapes_are_read_or_refused_quickly(text: str) -> None:
    try:
        workload = parse_workload(text)
    except ParseError:
        return
    waiting_reason(workload, NOW)
