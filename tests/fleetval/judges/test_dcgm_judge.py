"""The node health policy as a table: gate × outcome → result and action, on simulator output
(format-faithful DCGM 3.x/4.x) and on the parse error that stands in for garbage."""

from __future__ import annotations

import pytest

from fleetval.errors import ParseError
from fleetval.judges.dcgm import judge_dcgm
from fleetval.parsers.dcgm import parse_dcgm
from fleetval.policy.node_health import GATES, NODE_HEALTH_TABLE
from fleetval.sim.dcgm_output import DcgmFault, render_dcgm

UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(8)]
EXPECTED = {
    ("onboarding", None): ("pass", "admit"),
    ("onboarding", "thermal_warn"): ("warn", "hold_for_approval"),
    ("onboarding", "memory"): ("fail", "reject"),
    ("weekly", None): ("pass", "none"),
    ("weekly", "thermal_warn"): ("warn", "flag"),
    ("weekly", "pcie"): ("fail", "cordon_quarantine_schedule_r3"),
    ("weekly", "nvlink"): ("fail", "cordon_quarantine_schedule_r3"),
    ("post-xid", None): ("pass", "return_to_service"),
    ("post-xid", "memory"): ("fail", "quarantine"),
    ("post-xid", "thermal_warn"): ("warn", "hold_for_approval"),
}


@pytest.mark.parametrize("dcgm_major", [3, 4])
@pytest.mark.parametrize(("gate", "fault"), list(EXPECTED), ids=[f"{g}-{f}" for g, f in EXPECTED])
def test_gate_decisions(gate: str, fault: str | None, dcgm_major: int) -> None:
    level = 3 if gate == "post-xid" else 2
    faults = [DcgmFault(gpu=6, kind=fault)] if fault else []
    raw = render_dcgm(
        level=level,
        gpu_count=8,
        gpu_uuids=UUIDS,
        driver_version="570.133.20",
        faults=faults,
        dcgm_major=dcgm_major,
    )
    judgement = judge_dcgm(
        parse_dcgm(raw), gate=gate, node="n1", gpu_uuids={str(i): u for i, u in enumerate(UUIDS)}, level=level
    )
    assert (judgement.result.value, judgement.action) == EXPECTED[(gate, fault)]
    per_gpu = {v.subject: v.result.value for v in judgement.verdicts if v.criterion == "D-DEV-04"}
    assert len(per_gpu) == 8
    bad = {s for s, r in per_gpu.items() if r != "pass"}
    assert bad == ({UUIDS[6]} if fault else set())


def test_r2_report_cannot_satisfy_the_post_xid_r3_gate() -> None:
    raw = render_dcgm(level=2, gpu_count=8, gpu_uuids=UUIDS, driver_version="570.133.20")
    judgement = judge_dcgm(parse_dcgm(raw), gate="post-xid", node="n1")
    assert judgement.result.value == "inconclusive"
    assert judgement.rule.rule_id == "dev.postxid.level"


@pytest.mark.parametrize("gate", GATES)
def test_unparseable_evidence_is_inconclusive_never_pass(gate: str) -> None:
    judgement = judge_dcgm(ParseError("dcgm", "truncated"), gate=gate, node="n1")
    assert judgement.result.value == "inconclusive"
    assert judgement.verdicts[0].evidence["parse_error"] == "truncated"


def test_table_covers_every_gate_and_outcome_once() -> None:
    outcomes = {"pass", "warn", "fail", "internal_error", "level_too_low", "no_evidence"}
    keys = [(r.gate, r.outcome) for r in NODE_HEALTH_TABLE]
    assert sorted(keys) == sorted((g, o) for g in GATES for o in outcomes)
    assert len({r.rule_id for r in NODE_HEALTH_TABLE}) == len(NODE_HEALTH_TABLE)
