"""The node health policy as a table: gate × outcome → result and action, on simulator output
(format-faithful DCGM 3.x/4.x) and on the parse error that stands in for garbage."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleetval.dcgm import levels
from fleetval.dcgm.judge import judge_dcgm
from fleetval.dcgm.parser import parse_dcgm
from fleetval.dcgm.simulated import DcgmFault, render_dcgm
from fleetval.errors import ParseError
from fleetval.policy.node_health import GATES, NODE_HEALTH_TABLE

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
    outcomes = {"pass", "warn", "fail", "internal_error", "profiling_busy", "level_too_low", "no_evidence"}
    keys = [(r.gate, r.outcome) for r in NODE_HEALTH_TABLE]
    assert sorted(keys) == sorted((g, o) for g in GATES for o in outcomes)
    assert len({r.rule_id for r in NODE_HEALTH_TABLE}) == len(NODE_HEALTH_TABLE)


# ---------------------------------------------------------------------------------------------
# coverage: a report passes only what it covers (every test of the level, on every GPU)


def sim_doc(
    *, major: int = 4, level: int = 2, gpus: int = 8, faults: tuple[DcgmFault, ...] = ()
) -> dict[str, Any]:
    raw = render_dcgm(
        level=level,
        gpu_count=gpus,
        gpu_uuids=UUIDS[:gpus],
        driver_version="570.133.20",
        faults=faults,
        dcgm_major=major,
    )
    doc: dict[str, Any] = json.loads(raw)
    return doc


def plugin_tests(doc: dict[str, Any]) -> list[dict[str, Any]]:
    body = doc.get("DCGM Diagnostic") or doc["DCGM GPU Diagnostic"]
    return [t for c in body["test_categories"] for t in c["tests"]]


def judge(
    doc: dict[str, Any] | str, *, gate: str = "weekly", gpus: int | None = 8, level: int | None = 2
) -> Any:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return judge_dcgm(parse_dcgm(text), gate=gate, node="n1", level=level, expected_gpus=gpus)


def gaps(judgement: Any) -> set[tuple[str, str | None]]:
    return {(g["kind"], g["test_id"]) for g in judgement.verdicts[0].evidence["coverage_gaps"]}


def gpu_results(judgement: Any) -> dict[str, str]:
    return {v.evidence["gpu_index"]: v.result.value for v in judgement.verdicts if v.criterion == "D-DEV-04"}


def test_the_level_table_is_consistent() -> None:
    assert {t.may_skip for t in levels.DIAG_TESTS} - {None} <= levels.SKIP_REASON_IDS
    assert all(t.may_skip for t in levels.DIAG_TESTS if t.optional)
    assert len({t.test_id for t in levels.DIAG_TESTS}) == len(levels.DIAG_TESTS)
    plugins = {
        lv: {t.test_id for t in levels.required_tests(lv) if t.stands_for is None} for lv in (1, 2, 3, 4)
    }
    assert plugins[1] == {"dcgm.test.software"}
    assert plugins[2] - plugins[1] == {"dcgm.test.memory", "dcgm.test.pcie"}
    assert plugins[3] - plugins[2] == {
        "dcgm.test.diagnostic",
        "dcgm.test.targeted-stress",
        "dcgm.test.targeted-power",
        "dcgm.test.memory-bandwidth",
    }
    assert plugins[4] - plugins[3] == {"dcgm.test.memtest", "dcgm.test.pulse-test"}


@pytest.mark.parametrize("major", [3, 4])
def test_memory_and_pcie_all_skipped_at_r2_is_no_evidence(major: int) -> None:
    doc = sim_doc(major=major)
    for test in plugin_tests(doc):
        if test["name"] in ("memory", "pcie", "GPU Memory", "PCIe"):
            for result in test["results"]:
                result["status"] = "Skip"
            test.get("test_summary", {})["status"] = "Skip"
    judgement = judge(doc)
    assert (judgement.result.value, judgement.rule.rule_id) == ("inconclusive", "dev.weekly.none")
    assert gaps(judgement) == {("skipped_test", "dcgm.test.memory"), ("skipped_test", "dcgm.test.pcie")}


@pytest.mark.parametrize("gpus", [8, None], ids=["capacity-8", "no-capacity-report-lists-8"])
def test_results_for_gpu_0_only_do_not_pass_an_8_gpu_node(gpus: int | None) -> None:
    doc = sim_doc()
    for test in plugin_tests(doc):
        test["results"] = test["results"][:1]
    judgement = judge(doc, gpus=gpus)
    assert judgement.result.value == "inconclusive"
    assert ("missing_gpu", "dcgm.test.memory") in gaps(judgement)
    records = gpu_results(judgement)
    assert records == {"0": "pass", **{str(g): "inconclusive" for g in range(1, 8)}}


def test_entities_relabelled_cpu_are_no_gpu_evidence() -> None:
    doc = sim_doc()
    for test in plugin_tests(doc):
        for result in test["results"]:
            result["entity_group"] = "CPU"
    judgement = judge(doc)
    assert judgement.result.value == "inconclusive"
    assert "pass" not in gpu_results(judgement).values()


@pytest.mark.parametrize("major", [3, 4])
def test_a_deleted_failing_test_does_not_pass(major: int) -> None:
    doc = sim_doc(major=major, faults=(DcgmFault(5, "memory"),))
    assert judge(doc).result.value == "fail"
    body = doc.get("DCGM Diagnostic") or doc["DCGM GPU Diagnostic"]
    for category in body["test_categories"]:
        category["tests"] = [t for t in category["tests"] if t["name"] not in ("memory", "GPU Memory")]
    judgement = judge(doc)
    assert judgement.result.value == "inconclusive"
    assert ("missing_test", "dcgm.test.memory") in gaps(judgement)
    assert set(gpu_results(judgement).values()) == {"inconclusive"}  # no GPU had the memory test


def test_a_gpu_relabelled_past_the_node_is_no_pass() -> None:
    doc = sim_doc()
    pcie = next(t for t in plugin_tests(doc) if t["name"] == "pcie")
    pcie["results"][7]["entity_id"] = 9
    judgement = judge(doc)
    assert judgement.result.value == "inconclusive"
    assert gaps(judgement) == {("missing_gpu", "dcgm.test.pcie"), ("foreign_gpu", None)}
    assert gpu_results(judgement)["9"] == "inconclusive"
    assert gpu_results(judgement)["7"] == "inconclusive"


def test_a_gpu_without_a_result_in_one_test_gets_no_pass_record() -> None:
    doc = sim_doc()
    memory = next(t for t in plugin_tests(doc) if t["name"] == "memory")
    memory["results"] = [r for r in memory["results"] if r["entity_id"] != 3]
    judgement = judge(doc)
    assert judgement.result.value == "inconclusive"
    assert gpu_results(judgement) == {str(g): "inconclusive" if g == 3 else "pass" for g in range(8)}


def test_documented_skips_and_optional_tests_still_pass_r3() -> None:
    doc = sim_doc(major=3, level=3, gpus=1)
    deployment = plugin_tests(doc)
    next(t for t in deployment if t["name"] == "Persistence Mode")["results"][0]["status"] = "Skip"
    hardware = next(c for c in doc["DCGM GPU Diagnostic"]["test_categories"] if c["category"] == "Hardware")
    hardware["tests"].append({"name": "EUD Test", "results": [{"gpu_ids": "0", "status": "Skip"}]})
    assert judge(doc, gate="post-xid", gpus=1, level=3).result.value == "pass"
    for category in doc["DCGM GPU Diagnostic"]["test_categories"]:
        category["tests"] = [t for t in category["tests"] if t["name"] != "Inforom"]  # may skip, not vanish
    judgement = judge(doc, gate="post-xid", gpus=1, level=3)
    assert judgement.result.value == "inconclusive"
    assert gaps(judgement) == {("missing_test", "dcgm.test.inforom")}


def test_a_required_test_skipped_is_no_evidence_even_with_an_optional_one_passing() -> None:
    doc = sim_doc(major=4, level=3, gpus=2)
    diagnostic = next(t for t in plugin_tests(doc) if t["name"] == "diagnostic")
    for result in diagnostic["results"]:
        result["status"] = "Skip"
    diagnostic["test_summary"]["status"] = "Skip"
    judgement = judge(doc, gate="post-xid", gpus=2, level=3)
    assert (judgement.result.value, judgement.action) == ("inconclusive", "rerun_diagnostic")
    assert gaps(judgement) == {("skipped_test", "dcgm.test.diagnostic")}


def test_the_probe_level_sets_what_the_report_must_hold() -> None:
    # An r3 report judged for a probe that asked r4 lacks memtest and the pulse test.
    doc = sim_doc(major=4, level=3, gpus=2)
    judgement = judge(doc, gate="post-xid", gpus=2, level=4)
    assert judgement.result.value == "inconclusive"
    assert gaps(judgement) == {
        ("missing_test", "dcgm.test.memtest"),
        ("missing_test", "dcgm.test.pulse-test"),
    }


def test_a_cut_table_that_only_warns_is_no_evidence() -> None:
    raw = render_dcgm(
        level=2,
        gpu_count=8,
        gpu_uuids=UUIDS,
        driver_version="570.133.20",
        faults=(DcgmFault(3, "thermal_warn"),),
        fmt="text",
    )
    assert judge(raw).result.value == "warn"
    cut = raw[: raw.index("| pcie ")]  # the warning is visible, pcie and the border are not
    judgement = judge(cut)
    assert judgement.result.value == "inconclusive"
    assert gpu_results(judgement)["3"] == "warn"


# ---------------------------------------------------------------------------------------------
# a probe's host engine beside dcgm-exporter: DCGM's resources busy is no node fault

# DCGM's errorString() texts (NVIDIA/DCGM v4.5.3 dcgmlib/src/dcgm_errors.c); the "Error using DCGM
# API" wrapper is DCGM_FR_DCGM_API_MSG (dcgmlib/dcgm_errors.h), the API name illustrative.
MULTI_PASS = "The requested profiling metrics cannot be collected in a single pass"
IN_USE = "The requested operation could not be completed because the affected resource is in use"


def busy_doc(*messages: str, gate_level: int = 2) -> dict[str, Any]:
    doc = sim_doc(level=gate_level, faults=(DcgmFault(gpu=6, kind="memory"),))
    [failed] = [t for t in plugin_tests(doc) if t.get("test_summary", {}).get("status") == "Fail"]
    [result] = [r for r in failed["results"] if r.get("status") == "Fail"]
    result["warnings"] = [
        {"error_category": 10, "error_id": 67, "error_severity": 2, "warning": m} for m in messages
    ]
    return doc


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("message", [MULTI_PASS, IN_USE])
def test_a_failure_from_dcgms_busy_profiling_module_is_inconclusive_not_a_fault(
    gate: str, message: str
) -> None:
    level = 3 if gate == "post-xid" else 2
    doc = busy_doc(f"Error using DCGM API dcgmProfWatchFields: {message}", gate_level=level)
    judgement = judge(doc, gate=gate, level=level)
    assert judgement.result.value == "inconclusive" and judgement.action == "rerun_diagnostic"
    assert judgement.rule.outcome == "profiling_busy" and "dcgm-exporter" in judgement.rule.reason
    [finding] = judgement.verdicts[0].evidence["findings"]
    assert finding["busy"].startswith(("the profiling module", "a DCGM resource was in use"))
    # A real fault beside the busy message still fails.
    fault = "Found 12 faulty memory elements on GPU 6 Run a field diagnostic on the GPU."
    both = busy_doc(message, fault, gate_level=level)
    assert judge(both, gate=gate, level=level).result.value == "fail"


def test_a_run_dcgm_refused_as_busy_says_so() -> None:
    def refused(error: str) -> Any:
        with pytest.raises(ParseError) as caught:
            parse_dcgm(json.dumps({"DCGM Diagnostic": {"runtime_error": error}}))
        return judge_dcgm(caught.value, gate="weekly", node="n1")

    judgement = refused(f"Error: {MULTI_PASS}")
    assert judgement.result.value == "inconclusive" and judgement.rule.rule_id == "dev.weekly.busy"
    assert refused("Error: unable to connect to host engine").rule.rule_id == "dev.weekly.none"
