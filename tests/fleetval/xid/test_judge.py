"""The Xid decision table and judge_xid: the table against NVIDIA's catalog (fixtures), every Xid ×
repeat count × window edge, storms, root causes, staleness, and a replay of every real log."""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

import pytest

from fleetval.errors import ParseError, PolicyError
from fleetval.records import Result
from fleetval.xid.judge import XidJudgement, judge_xid, judge_xid_to_json
from fleetval.xid.parser import XidEvent, parse_xid
from fleetval.xid.table import (
    REPEAT_RULES,
    XID_TABLE,
    XID_TABLE_VERSION,
    NodeAction,
    XidClass,
    load_rules,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "xid"
NODE = "r01-n05"
PCI = "0000:3b:00"
UUID = "GPU-5f3a0000-1111-2222-3333-444455556666"
T0 = 1_733_140_000.0
DAY = 24 * 3600.0

# The policy, restated independently of the table module: what these tests hold it to.
CORDON_BUCKETS = {
    "RESET_GPU", "RESTART_BM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR",
    "UNEXPECTED_ERR_REPORT_ISSUE", "CHECK_MECHANICALS", "UPDATE_SWFW", "RESTART_VM",
}  # fmt: skip
RESOLUTION = {
    "RESTART_APP": "restart_app", "RESET_GPU": "reset_gpu", "RESTART_BM": "reboot", "IGNORE": "ignore",
    "WORKFLOW_XID_45": "workflow_xid_45", "WORKFLOW_XID_48": "workflow_xid_48",
    "WORKFLOW_NVLINK_ERR": "workflow_nvlink", "WORKFLOW_NVLINK5_ERR": "workflow_nvlink5",
    "UNEXPECTED_ERR_REPORT_ISSUE": "contact_support", "CONTACT_SUPPORT": "contact_support",
    "CHECK_MECHANICALS": "check_mechanicals", "UPDATE_SWFW": "update_sw_fw", "RESTART_VM": "restart_vm",
    "CHECK_UVM": "check_uvm", "Follow guidance as it aapplies to another Xid": "follow_recovery_action",
    "XID_154": "follow_recovery_action",
}  # fmt: skip
REPEATING = {13: "xid.repeat.app_fault", 31: "xid.repeat.app_fault", 94: "xid.repeat.contained_memory"}
THRESHOLD = 3
WINDOW_S = DAY
BURST_GAP_S = 180.0
DEDUP_S = 3600.0
LOOKBACK_S = DAY


def catalog_rows() -> list[list[str]]:
    with (FIXTURES / "xid-catalog-mapping-nvsentinel.csv").open(encoding="utf-8", newline="") as f:
        return list(csv.reader(f))


def docs_immediate_actions() -> dict[int, str]:
    """Xid → 'Resolution Bucket (Immediate Action)' from the flattened docs table."""
    cells = [
        c.strip() for c in (FIXTURES / "xid-catalog-nvidia-docs-selected-rows.txt").read_text().split("|")
    ]
    out: dict[int, str] = {}
    for i, cell in enumerate(cells):
        # A row starts at a cell whose last line is "XID" (omission markers share its cell).
        if cell.split("\n")[-1].strip() == "XID" and i + 9 < len(cells) and cells[i + 1].isdigit():
            # XID | code | mnemonic | description | A100 | H100 | B100 | GB200 | immediate | ...
            assert all(c in ("YES", "NO") for c in cells[i + 4 : i + 8]), cells[i : i + 9]
            out[int(cells[i + 1])] = cells[i + 8]
    return out


def ev(
    xid: int | None,
    t: float | None = T0,
    *,
    line: int = 1,
    pci: str | None = PCI,
    uuid: str | None = UUID,
    caused_by: int | None = None,
    recovery: str | None = None,
    uptime: float | None = None,
) -> XidEvent:
    return XidEvent(
        xid=xid, pci=pci, gpu_uuid=uuid, pid=None, process=None, caused_by=caused_by,
        timestamp=None, epoch_s=t, uptime_s=uptime, message="", line_no=line, host=None,
        kind="xid" if xid is not None else "unreadable", recovery_action=recovery,
    )  # fmt: skip


def events_at(xid: int, times: list[float]) -> list[XidEvent]:
    return [ev(xid, t, line=n) for n, t in enumerate(times, 1)]


# ---------------------------------------------------------------------------------------------
# the table against NVIDIA's catalog


def test_table_version_names_the_document() -> None:
    assert "6f8b0fc" in XID_TABLE_VERSION and "xid-catalog" in XID_TABLE_VERSION
    assert XID_TABLE.version == XID_TABLE_VERSION


def test_table_matches_catalog_row_for_row() -> None:
    rows = catalog_rows()
    assert sorted(XID_TABLE.rules) == [int(r[0]) for r in rows] == list(range(1, 163))
    for xid, mnemonic, bucket, severity in rows:
        rule = XID_TABLE.rules[int(xid)]
        assert (rule.mnemonic, rule.nvidia_immediate_action, rule.nvidia_severity) == (
            mnemonic,
            bucket,
            severity,
        )
        assert rule.resolution == RESOLUTION[bucket]
        assert rule.node_action == (NodeAction.CORDON if severity == "FATAL" else NodeAction.NONE), xid
        assert (bucket in CORDON_BUCKETS) == (severity == "FATAL"), xid
        assert rule.rule_id.startswith(f"xid.{xid}.")


def test_docs_rows_agree_with_table() -> None:
    docs = docs_immediate_actions()
    assert sorted(docs) == [13, 31, 43, 45, 46, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154]
    for xid, bucket in docs.items():
        assert XID_TABLE.rules[xid].resolution == RESOLUTION[bucket], xid


@pytest.mark.parametrize(
    ("xid", "cls", "rule_id"),
    [
        (13, XidClass.APPLICATION, "xid.13.gr_exception"),
        (31, XidClass.APPLICATION, "xid.31.mmu_fault"),
        (45, XidClass.APPLICATION, "xid.45.preemptive_removal"),
        (48, XidClass.MEMORY, "xid.48.ecc_dbe"),
        (63, XidClass.MEMORY, "xid.63.row_remap_event"),
        (74, XidClass.LINK, "xid.74.nvlink_error"),
        (79, XidClass.DEVICE, "xid.79.fell_off_bus"),
        (94, XidClass.MEMORY, "xid.94.contained_error"),
        (95, XidClass.MEMORY, "xid.95.uncontained_error"),
        (119, XidClass.DRIVER, "xid.119.gsp_rpc_timeout"),
        (149, XidClass.LINK, "xid.149.nvlink_netir_error"),
    ],
)
def test_named_rows(xid: int, cls: XidClass, rule_id: str) -> None:
    rule = XID_TABLE.rules[xid]
    assert (rule.xid_class, rule.rule_id) == (cls, rule_id)


def test_repeat_rules_are_the_stated_policy() -> None:
    assert {x: r.rule_id for r in REPEAT_RULES for x in r.xids} == REPEATING
    for r in REPEAT_RULES:
        assert (r.min_bursts, r.window_s, r.burst_gap_s, r.node_action) == (
            THRESHOLD,
            WINDOW_S,
            BURST_GAP_S,
            NodeAction.CORDON,
        )
    assert 45 not in REPEATING  # a 45 storm never escalates by itself
    assert (XID_TABLE.dedup_window_s, XID_TABLE.lookback_s) == (DEDUP_S, LOOKBACK_S)


HEADER = "xid,mnemonic,nvidia_immediate_action,nvidia_severity,class,resolution,node_action,rule_id\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "1,A,B,FATAL,device,reset_gpu,cordon,xid.1.a\n1,A,B,FATAL,device,reset_gpu,cordon,xid.1.b\n",
            "twice",
        ),
        ("1,A,B,FATAL,gpu,reset_gpu,cordon,xid.1.a\n", "bad row"),
        ("1,A,B,FATAL,device,reset_gpu,drain,xid.1.a\n", "bad row"),
        ("1,A,B,FATAL,device,reset_gpu,cordon,xid.2.a\n", "not xid.1"),
        ("1,A,B,FATAL,device,,cordon,xid.1.a\n", "no resolution"),
        ("1,A,B,FATAL,device,x,cordon,xid.1.a\n2,A,B,FATAL,device,x,cordon,xid.1.a\n", "not xid.2"),
    ],
    ids=["duplicate-xid", "bad-class", "bad-action", "rule-id-xid", "no-resolution", "rule-id-reuse"],
)
def test_inconsistent_table_is_a_policy_error(body: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        load_rules("# comment\n" + HEADER + body)
    with pytest.raises(PolicyError, match="columns"):
        load_rules("xid,mnemonic\n1,A\n")


# ---------------------------------------------------------------------------------------------
# every Xid × repeat count × window edge

COUNTS = {"once": 1, "below": THRESHOLD - 1, "threshold": THRESHOLD}
EDGES = {"at-window": WINDOW_S, "outside": WINDOW_S + 1.0}
CASES = [(x, c, e) for x in [*range(1, 163), 999] for c in COUNTS for e in EDGES]


def expected_action(xid: int, count: int, span: float) -> NodeAction:
    rule = XID_TABLE.rules.get(xid)
    if rule is not None and rule.nvidia_severity == "FATAL":
        return NodeAction.CORDON
    if xid in REPEATING and count >= THRESHOLD and span <= WINDOW_S:
        return NodeAction.CORDON
    return NodeAction.NONE


@pytest.mark.parametrize(("xid", "count", "edge"), CASES, ids=[f"xid{x}-{c}-{e}" for x, c, e in CASES])
def test_every_xid_by_repeats_and_window(xid: int, count: str, edge: str) -> None:
    n, span = COUNTS[count], EDGES[edge]
    # Bursts spread evenly so that the last one lands exactly at (or just past) the window.
    times = [T0 + span * k / (n - 1) for k in range(n)] if n > 1 else [T0]
    j = judge_xid(events_at(xid, times), node=NODE)
    want = expected_action(xid, n, span if n > 1 else 0.0)
    assert j.node_action == want

    rule = XID_TABLE.rule_for(xid)
    table_decisions = [d for d in j.decisions if d.rule_id == rule.rule_id]
    assert len(table_decisions) == n  # every burst is more than the dedup window from the next
    escalations = [d for d in j.decisions if d.rule_id.startswith("xid.repeat.")]
    assert len(escalations) == (1 if want is NodeAction.CORDON and rule.node_action is NodeAction.NONE else 0)
    if escalations:
        assert escalations[0].rule_id == REPEATING[xid] == j.node_rule_id
        assert escalations[0].count == n
        assert all(e.escalated_by == REPEATING[xid] for e in j.events)

    verdicts = j.to_verdicts()
    assert {v.criterion for v in verdicts} == {"D-DEV-06"}
    assert {v.subject for v in verdicts} == {UUID}
    results = {v.result for v in verdicts if v.rule_id == rule.rule_id}
    if xid == 999:
        assert results == {Result.INCONCLUSIVE} and rule.rule_id == "xid.unknown"
    elif rule.node_action is NodeAction.CORDON:
        assert results == {Result.FAIL}
        assert {v.action for v in verdicts} == {"cordon"}
    else:
        assert results == {Result.WARN}
    assert all(v.judged_against == {"xid_table_version": XID_TABLE_VERSION} for v in verdicts)


@pytest.mark.parametrize(
    ("gap", "bursts"),
    [(BURST_GAP_S, 1), (BURST_GAP_S + 0.001, 3)],
    ids=["at-burst-gap", "past-burst-gap"],
)
def test_burst_gap_edge(gap: float, bursts: int) -> None:
    """Three Xid 13 lines `gap` apart: one app crash (one burst) or three faults."""
    j = judge_xid(events_at(13, [T0, T0 + gap, T0 + 2 * gap]), node=NODE)
    assert j.node_action == (NodeAction.CORDON if bursts >= THRESHOLD else NodeAction.NONE)


def test_one_crash_is_one_burst_on_the_real_log() -> None:
    events = parse_xid((FIXTURES / "xid31-mmu-fault-format-variants-issues.log").read_text())
    j = judge_xid(events, node=NODE)
    assert j.node_action is NodeAction.NONE  # 1×31 + 4×13 lines in one second on one GPU: one burst


@pytest.mark.parametrize(
    ("gap", "decisions"), [(DEDUP_S - 0.001, 1), (DEDUP_S, 2)], ids=["inside", "at-window"]
)
def test_dedup_window_edge(gap: float, decisions: int) -> None:
    j = judge_xid(events_at(79, [T0, T0 + gap]), node=NODE)
    assert len(j.decisions) == decisions
    assert len(j.to_verdicts()) == decisions


@pytest.mark.parametrize(
    ("spacing_h", "runs"), [(2, [6]), (10, [3, 3])], ids=["all-in-one-window", "two-windows"]
)
def test_escalations_do_not_overlap(spacing_h: int, runs: list[int]) -> None:
    # Six bursts: 2 h apart they all fall in one 24 h window (one escalation, not four); 10 h apart
    # the first three span 20 h and the fourth starts the next window.
    j = judge_xid(events_at(31, [T0 + spacing_h * 3600 * k for k in range(6)]), node=NODE)
    assert [d.count for d in j.decisions if d.rule_id == "xid.repeat.app_fault"] == runs


def test_repeats_are_counted_per_gpu() -> None:
    events = [
        dataclasses.replace(e, gpu_uuid=f"GPU-{k}")
        for k, e in enumerate(events_at(13, [T0, T0 + 600, T0 + 1200]))
    ]
    assert judge_xid(events, node=NODE).node_action is NodeAction.NONE


# ---------------------------------------------------------------------------------------------
# storms, root causes, Xid 154, time, subjects


@pytest.mark.parametrize("hours", [1, 3])
def test_xid45_storm_is_not_an_action_storm(hours: int) -> None:
    """Hundreds of Xid 45 on three GPUs: at most one decision per GPU per window, and no cordon."""
    per_gpu = 300
    events = [
        ev(45, T0 + k * (hours * 3600.0 - 1) / per_gpu, line=g * per_gpu + k, uuid=f"GPU-{g}")
        for g in range(3)
        for k in range(per_gpu)
    ]
    j = judge_xid(events, node=NODE)
    assert j.node_action is NodeAction.NONE
    assert len(j.decisions) == 3 * hours
    per_subject = {d.subject: 0 for d in j.decisions}
    for d in j.decisions:
        per_subject[d.subject] += 1
    assert per_subject == {f"GPU-{g}": hours for g in range(3)}
    verdicts = j.to_verdicts()
    assert len(verdicts) == 3 * hours and {v.result for v in verdicts} == {Result.WARN}
    assert all(e.node_action is NodeAction.NONE for e in j.events)


def test_real_45_burst_is_one_decision() -> None:
    events = parse_xid((FIXTURES / "xid45-burst-then-hung-task-state-D-gpud-pr117-excerpt.log").read_text())
    j = judge_xid(events, node=NODE)
    assert [(d.rule_id, d.count, d.result) for d in j.decisions] == [
        ("xid.45.preemptive_removal", 6, Result.WARN)
    ]
    assert j.node_action is NodeAction.NONE


@pytest.mark.parametrize(
    ("root", "rule_id", "action"),
    [
        (149, "xid.149.nvlink_netir_error", NodeAction.CORDON),
        (79, "xid.79.fell_off_bus", NodeAction.CORDON),
        (13, "xid.13.gr_exception", NodeAction.NONE),
        (500, "xid.unknown", NodeAction.NONE),
        (154, "xid.154.recovery_action_changed", NodeAction.NONE),
    ],
)
def test_caused_by_is_judged_by_root_cause(root: int, rule_id: str, action: NodeAction) -> None:
    j = judge_xid([ev(45, caused_by=root)], node=NODE)
    (e,) = j.events
    assert (e.judged_xid, e.rule_id, e.node_action) == (root, rule_id, action)
    assert j.node_action is action
    assert "caused by previous Xid" in j.decisions[0].reason


@pytest.mark.parametrize(
    ("xid", "root", "rule_id", "action"),
    [
        (79, 13, "xid.79.fell_off_bus", NodeAction.CORDON),
        (13, 79, "xid.13.gr_exception", NodeAction.NONE),
        (48, 14, "xid.48.ecc_dbe", NodeAction.CORDON),
    ],
)
def test_only_xid45_is_judged_by_its_root_cause(
    xid: int, root: int, rule_id: str, action: NodeAction
) -> None:
    """NVIDIA documents "follow the other Xid" for 45 only, and the driver prints the suffix on 45
    only: another Xid is judged by its own number (was: any caused-by re-rooted, 79 → warn)."""
    j = judge_xid([ev(xid, caused_by=root)], node=NODE)
    (e,) = j.events
    assert (e.judged_xid, e.rule_id, j.node_action) == (xid, rule_id, action)
    assert "caused by previous Xid" not in j.decisions[0].reason


def test_caused_by_merges_with_its_root_event() -> None:
    j = judge_xid([ev(149, T0, line=1), ev(45, T0 + 0.3, line=2, caused_by=149)], node=NODE)
    assert [(d.rule_id, d.count, d.logged_xids) for d in j.decisions] == [
        ("xid.149.nvlink_netir_error", 2, (45, 149))
    ]


@pytest.mark.parametrize(
    ("recovery", "rule_id", "action", "result"),
    [
        ("None", "xid.154.recovery.none", NodeAction.NONE, Result.WARN),
        ("Drain P2P", "xid.154.recovery.drain_p2p", NodeAction.CORDON, Result.FAIL),
        ("Drain and Reset", "xid.154.recovery.drain_and_reset", NodeAction.CORDON, Result.FAIL),
        ("GPU Reset Required", "xid.154.recovery.gpu_reset_required", NodeAction.CORDON, Result.FAIL),
        ("Node Reboot Required", "xid.154.recovery.node_reboot_required", NodeAction.CORDON, Result.FAIL),
        ("Reticulate Splines", "xid.154.recovery.unknown", NodeAction.NONE, Result.INCONCLUSIVE),
        (
            "from 0x0 (None) to 0x4 (Drain and Re",
            "xid.154.recovery.unknown",
            NodeAction.NONE,
            Result.INCONCLUSIVE,
        ),
        ("", "xid.154.recovery.unknown", NodeAction.NONE, Result.INCONCLUSIVE),
        (None, "xid.154.recovery_action_changed", NodeAction.NONE, Result.WARN),
    ],
)
def test_xid154_by_recovery_action(
    recovery: str | None, rule_id: str, action: NodeAction, result: Result
) -> None:
    j = judge_xid([ev(154, recovery=recovery)], node=NODE)
    assert (j.events[0].rule_id, j.node_action, j.to_verdicts()[0].result) == (rule_id, action, result)


def test_unreadable_line_is_inconclusive_never_pass() -> None:
    events = parse_xid("[ 12.0] NVRM: Xid (PCI:0000:3b:00): \n")
    j = judge_xid(events, node=NODE)
    (v,) = j.to_verdicts()
    assert (v.result, v.rule_id, v.subject, v.action) == (
        Result.INCONCLUSIVE,
        "xid.unreadable",
        f"{NODE}/PCI:{PCI}",
        "investigate",
    )
    assert j.node_action is NodeAction.NONE


@pytest.mark.parametrize(
    "text", ["", "\n", "\x00" * 16, "\ufffd" * 8, "\x8f\x03garbage\x7f", "[0] [0] [0]\n"]
)
def test_no_readable_log_is_inconclusive_never_pass(text: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_xid(text)
    j = judge_xid(caught.value, node=NODE)
    (v,) = j.to_verdicts()
    assert (v.subject, v.result, v.rule_id, v.action) == (
        NODE,
        Result.INCONCLUSIVE,
        "xid.log.unreadable",
        "investigate",
    )
    assert v.evidence["parse_error"] == caught.value.reason and "no readable" in v.reason
    assert (j.node_action, j.node_rule_id, j.events) == (NodeAction.NONE, "xid.log.unreadable", ())
    doc = judge_xid_to_json(j)
    assert doc["verdicts"][0]["result"] == "inconclusive" and doc["node_evidence"]["events"] == 0


def test_no_events_is_one_pass() -> None:
    j = judge_xid([], node=NODE)
    (v,) = j.to_verdicts()
    assert (v.subject, v.result, v.action, v.rule_id) == (NODE, Result.PASS, "none", "xid.node.no_events")
    assert v.judged_against == {"xid_table_version": XID_TABLE_VERSION}


@pytest.mark.parametrize(
    ("age", "stale"), [(LOOKBACK_S, False), (LOOKBACK_S + 0.001, True)], ids=["at-lookback", "older"]
)
def test_as_of_lookback_edge(age: float, stale: bool) -> None:
    as_of = T0 + age
    j = judge_xid([ev(79, T0)], node=NODE, as_of=as_of)
    assert j.events[0].stale is stale
    assert j.node_action == (NodeAction.NONE if stale else NodeAction.CORDON)
    if stale:
        (v,) = j.to_verdicts()
        assert (v.result, v.rule_id) == (Result.PASS, "xid.node.only_stale")


def test_uptime_only_events_are_never_stale() -> None:
    j = judge_xid([ev(79, None, uptime=5.0)], node=NODE, as_of=T0 + 10 * DAY)
    assert j.node_action is NodeAction.CORDON


def test_uptime_clock_drives_windows_when_no_wall_clock() -> None:
    events = [ev(13, None, line=k, uptime=1000.0 + k * 7200) for k in range(3)]
    assert judge_xid(events, node=NODE).node_action is NodeAction.CORDON


def test_mixed_clocks_are_ordered_per_clock_and_an_undecidable_repeat_is_inconclusive() -> None:
    """Epoch on one line, uptime on the others. Was: the whole group untimed (one window, one
    burst, no escalation). Now each clock is windowed on its own (the two uptime lines are 2.5 h
    apart: two windows), and since the wall-clock line could be the third burst, the repeat rule
    says it cannot tell rather than passing over it."""
    events = [ev(13, T0, line=1), ev(13, None, line=2, uptime=9000.0), ev(13, None, line=3, uptime=18000.0)]
    j = judge_xid(events, node=NODE)
    assert j.node_action is NodeAction.NONE
    assert [(d.rule_id, d.count, d.result) for d in j.decisions] == [
        ("xid.13.gr_exception", 1, Result.WARN),
        ("xid.repeat.app_fault.undecided", 3, Result.INCONCLUSIVE),
        ("xid.13.gr_exception", 1, Result.WARN),
        ("xid.13.gr_exception", 1, Result.WARN),
    ]
    undecided = j.decisions[1]
    assert (undecided.first_time, undecided.last_time) == (None, None)


def test_a_line_on_another_clock_does_not_stop_a_repeat_from_escalating() -> None:
    """Three Xid 13 bursts 4 h apart on the wall clock cordon; one more line on the uptime clock
    (a syslog line) or with no time at all used to make the whole group untimed (no cordon)."""
    wall = events_at(13, [T0, T0 + 4 * 3600, T0 + 8 * 3600])
    assert judge_xid(wall, node=NODE).node_action is NodeAction.CORDON
    for other in (ev(13, None, line=9, uptime=500.0), ev(13, None, line=9)):
        j = judge_xid([*wall, other], node=NODE)
        assert (j.node_action, j.node_rule_id) == (NodeAction.CORDON, "xid.repeat.app_fault")
        assert [d.count for d in j.decisions if d.rule_id == "xid.repeat.app_fault"] == [3]


def test_the_attackers_log_with_one_syslog_line_still_cordons() -> None:
    from fleetval.xid.simulated import render_xid_lines

    def xid_lines(style: str, count: int) -> str:
        text = render_xid_lines(
            code=13, gpu_pci=PCI, gpu_uuid=UUID, count=count, start_epoch_s=T0, style=style,
            interval_s=4 * 3600.0, host=NODE,
        )  # fmt: skip
        return text.split("\n", 1)[1]  # no UUID line: every line's subject is the PCI address

    text = xid_lines("dmesg-T", 3) + xid_lines("syslog", 1)
    j = judge_xid(parse_xid(text), node=NODE)
    assert (j.node_action, j.node_rule_id) == (NodeAction.CORDON, "xid.repeat.app_fault")


@pytest.mark.parametrize(
    ("times", "undecided"),
    [
        ([None, None, None], True),
        ([None, None], False),
        ([T0, T0 + 60, None], False),
        ([T0, T0 + DAY, None], True),
    ],
    ids=["three-untimed", "two-untimed", "one-burst-plus-untimed", "two-bursts-plus-untimed"],
)
def test_untimed_lines_that_could_make_the_repeat_count_are_inconclusive(
    times: list[float | None], undecided: bool
) -> None:
    j = judge_xid([ev(13, t, line=n) for n, t in enumerate(times, 1)], node=NODE)
    assert j.node_action is NodeAction.NONE
    assert any(d.rule_id == "xid.repeat.app_fault.undecided" for d in j.decisions) is undecided
    assert {v.result for v in j.to_verdicts()} == (
        {Result.WARN, Result.INCONCLUSIVE} if undecided else {Result.WARN}
    )


def test_subject_uses_uuid_from_any_line_of_the_gpu() -> None:
    events = [
        ev(79, T0, line=1, uuid=None),
        ev(79, T0 + 1, line=2),
        ev(79, T0 + 2, line=3, pci="0000:3c:00", uuid=None),
    ]
    j = judge_xid(events, node=NODE)
    assert [e.subject for e in j.events] == [UUID, UUID, f"{NODE}/PCI:0000:3c:00"]
    assert {d.subject: d.count for d in j.decisions} == {UUID: 2, f"{NODE}/PCI:0000:3c:00": 1}
    assert judge_xid([ev(79, pci=None, uuid=None)], node=NODE).decisions[0].subject == NODE


def test_judge_is_deterministic_and_json_shape() -> None:
    events = parse_xid(
        (FIXTURES / "xid13-xid109-sm-warp-exception-ctx-switch-timeout-gpud-pr46.log").read_text()
    )
    a, b = judge_xid(events, node=NODE), judge_xid(events, node=NODE)
    doc = judge_xid_to_json(a)
    assert doc == judge_xid_to_json(b)
    assert doc["node_action"] == "cordon" and doc["node_rule_id"] == "xid.109.ctxsw_timeout"
    for e in doc["events"]:
        assert {"xid", "pci", "gpu_uuid", "pid", "process", "caused_by", "timestamp", "message"} <= set(e)
        assert {"class", "action", "node_action"} <= set(e)
    assert [(e["xid"], e["class"], e["action"], e["node_action"]) for e in doc["events"]] == [
        (13, "application", "restart_app", "none"),
        (13, "application", "restart_app", "none"),
        (13, "application", "restart_app", "none"),
        (109, "device", "reset_gpu", "cordon"),
    ]
    assert [(v["subject"], v["result"], v["action"], v["rule_id"]) for v in doc["verdicts"]] == [
        (f"{NODE}/PCI:0000:cb:00", "warn", "restart_app", "xid.13.gr_exception"),
        (f"{NODE}/PCI:0000:cb:00", "fail", "cordon", "xid.109.ctxsw_timeout"),
    ]
    assert doc["verdicts"][0]["evidence"]["count"] == 3


# ---------------------------------------------------------------------------------------------
# replay of every real log: the node decision and the decisions behind it

U8A = "GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d"
REPLAY: dict[str, tuple[str, str, list[tuple[str, str, int, Result]]]] = {
    "device-plugin-xid69-critical-device-marked-unhealthy-k8s-device-plugin-issue189.log": (
        "none", "xid.node.no_cordon",
        [("GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8", "xid.69.gr_class_error", 1, Result.WARN)],
    ),
    "fallen-off-bus-without-xid-dmesg-570-nvsentinel-issue155.log": (
        "cordon", "xid.79.fell_off_bus", [(f"{NODE}/PCI:0000:b3:00", "xid.79.fell_off_bus", 1, Result.FAIL)],
    ),
    "xid13-xid109-sm-warp-exception-ctx-switch-timeout-gpud-pr46.log": (
        "cordon", "xid.109.ctxsw_timeout",
        [(f"{NODE}/PCI:0000:cb:00", "xid.13.gr_exception", 3, Result.WARN),
         (f"{NODE}/PCI:0000:cb:00", "xid.109.ctxsw_timeout", 1, Result.FAIL)],
    ),
    "xid145-149-nvlink5-kmsg-inputs-gpud-pr1174.log": (
        "cordon", "xid.149.nvlink_netir_error",
        [(f"{NODE}/PCI:0019:01:00", "xid.149.nvlink_netir_error", 1, Result.FAIL),
         (f"{NODE}/PCI:0000:00:00", "xid.149.nvlink_netir_error", 1, Result.FAIL),
         (f"{NODE}/PCI:0018:01:00", "xid.145.nvlink_rlw_error", 1, Result.FAIL)],
    ),
    "xid149-154-nvlink5-netir-recovery-action-gb200-gpud-testcases.log": (
        "cordon", "xid.149.nvlink_netir_error",
        [(f"{NODE}/PCI:0009:01:00", "xid.149.nvlink_netir_error", 3, Result.FAIL),
         (f"{NODE}/PCI:0009:01:00", "xid.154.recovery.drain_and_reset", 1, Result.FAIL),
         (f"{NODE}/PCI:0008:01:00", "xid.149.nvlink_netir_error", 2, Result.FAIL),
         (f"{NODE}/PCI:0019:01:00", "xid.154.recovery.gpu_reset_required", 1, Result.FAIL),
         (f"{NODE}/PCI:0018:01:00", "xid.154.recovery.gpu_reset_required", 1, Result.FAIL),
         (f"{NODE}/PCI:0008:01:00", "xid.154.recovery.gpu_reset_required", 1, Result.FAIL)],
    ),
    "xid31-mmu-fault-format-variants-issues.log": (
        "none", "xid.node.no_cordon",
        [("GPU-4e391288-897c-ba5d-6944-dfbea55ebcfa", "xid.31.mmu_fault", 1, Result.WARN),
         (f"{NODE}/PCI:0000:0c:00", "xid.31.mmu_fault", 1, Result.WARN),
         (U8A, "xid.31.mmu_fault", 1, Result.WARN),
         (U8A, "xid.13.gr_exception", 4, Result.WARN),
         (U8A, "xid.32.pbdma_error", 1, Result.WARN)],
    ),
    "xid32-xid31-legacy-2015-format-channel-id-engmask-bumblebee-issue677.log": (
        "none", "xid.node.no_cordon",
        [(f"{NODE}/PCI:0000:01:00", "xid.32.pbdma_error", 2, Result.WARN),
         (f"{NODE}/PCI:0000:01:00", "xid.31.mmu_fault", 1, Result.WARN)],
    ),
    "xid45-burst-then-hung-task-state-D-gpud-pr117-excerpt.log": (
        "none", "xid.node.no_cordon",
        [(f"{NODE}/PCI:0000:61:00", "xid.45.preemptive_removal", 6, Result.WARN)],
    ),
    "xid48-dbe-xid64-page-retirement-rminitadapter-failed-gpu-operator-issue1146.log": (
        "cordon", "xid.48.ecc_dbe",
        [(f"{NODE}/PCI:0000:07:00", "xid.48.ecc_dbe", 1, Result.FAIL),
         (f"{NODE}/PCI:0000:07:00", "xid.64.row_remap_failure", 1, Result.FAIL)],
    ),
    "xid63-row-remapper-a100-mlengineering.log": (
        "none", "xid.node.no_cordon", [(f"{NODE}/PCI:0000:10:1c", "xid.63.row_remap_event", 1, Result.WARN)],
    ),
    "xid74-nvlink-fatal-message-format-nvsentinel-design-doc.log": (
        "cordon", "xid.74.nvlink_error", [(f"{NODE}/PCI:0003:00:00", "xid.74.nvlink_error", 1, Result.FAIL)],
    ),
    "xid79-fallen-off-bus-variants-gpud-testcases.log": (
        "cordon", "xid.79.fell_off_bus",
        [(f"{NODE}/PCI:0000:05:00", "xid.79.fell_off_bus", 1, Result.FAIL),
         (f"{NODE}/PCI:0000:01:00", "xid.79.fell_off_bus", 1, Result.FAIL),
         (f"{NODE}/PCI:0000:18:00", "xid.79.fell_off_bus", 1, Result.FAIL),
         (f"{NODE}/PCI:0000:29:00", "xid.79.fell_off_bus", 1, Result.FAIL),
         (f"{NODE}/PCI:0000:03:00", "xid.14.fake_error", 1, Result.WARN)],
    ),
    "xid94-95-contained-uncontained-format-examples-nvidia-driver-source.txt": (
        "cordon", "xid.95.uncontained_error",
        [(f"{NODE}/PCI:0000:01:00", "xid.94.contained_error", 2, Result.WARN),
         (f"{NODE}/PCI:0000:01:00", "xid.95.uncontained_error", 1, Result.FAIL)],
    ),
}  # fmt: skip


def replay(name: str) -> XidJudgement:
    return judge_xid(parse_xid((FIXTURES / name).read_bytes().decode("utf-8")), node=NODE)


def test_replay_covers_every_log() -> None:
    names = {p.name for p in FIXTURES.iterdir() if p.suffix in {".log", ".txt"}}
    assert set(REPLAY) == names - {"xid-catalog-nvidia-docs-selected-rows.txt"}


@pytest.mark.parametrize("name", sorted(REPLAY))
def test_replay_real_log(name: str) -> None:
    node_action, node_rule, decisions = REPLAY[name]
    j = replay(name)
    assert (j.node_action.value, j.node_rule_id) == (node_action, node_rule)
    assert [(d.subject, d.rule_id, d.count, d.result) for d in j.decisions] == decisions
    verdicts = j.to_verdicts()
    assert [(v.subject, v.rule_id, v.result) for v in verdicts] == [(s, r, res) for s, r, _, res in decisions]
    for v in verdicts:
        assert re.fullmatch(r"GPU-[0-9a-f-]+|r01-n05/PCI:[0-9a-f:]+", v.subject)
