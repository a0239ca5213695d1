"""The judge: an expectation holds only on the evidence it names; a run gives one verdict per
criterion, never pass without a step that checked it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fleetval.kueue.judge import History, JobView, Observation, PodView, StepResult, check, scenario_verdicts
from fleetval.kueue.reasons import GRANULAR, LEGACY
from fleetval.kueue.scenario import Expectation, parse_scenario
from fleetval.kueue.suite import shipped_files
from fleetval.records import Result

NOW = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
NAMES = {"default-flavor": "fvk-000000-default-flavor"}
MESSAGE = (
    "couldn't assign flavors to pod set 1a2b3c4d: insufficient unused quota for nvidia.com/gpu in flavor "
    "fvk-000000-default-flavor, 2 more needed"
)


def workload(*conditions: tuple[str, str, str, str], **status: Any) -> dict[str, Any]:
    return {
        "status": {
            "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions],
            **status,
        }
    }


PENDING = workload(
    ("QuotaReserved", "False", "Pending", MESSAGE), ("PodsReady", "False", "WaitForStart", "x")
)
ADMITTED = workload(
    ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue fvk-000000-team-a-cq"),
    ("Admitted", "True", "Admitted", "The workload is admitted"),
)


def expect(**checks: Any) -> Expectation:
    return Expectation("D-SCHED-01", ("job",), checks)


def judge(view: JobView, mode: str | None = LEGACY, history: History | None = None, **checks: Any) -> str:
    obs = Observation(1.0, NOW, {"job": view})
    history = history or History()
    history.record(obs, {"job": 2})
    result = check(expect(**checks), obs, history, NAMES, mode)
    return "ok" if result.ok else result.detail


def test_a_held_job_is_checked_on_state_reason_message_and_pods() -> None:
    gated = (PodView("p-0", "Pending", gated=True),)
    view = JobView(PENDING, gated)
    message = (
        "couldn't assign flavors to pod set <podset>: insufficient unused quota for nvidia.com/gpu in flavor "
        "default-flavor, 2 more needed"
    )
    assert judge(view, state="pending", reason="waiting_for_quota", message=message, pods_running=0) == "ok"
    assert "2 more needed" in judge(view, message=message.replace("2 more", "4 more"))
    assert judge(view, state="admitted") == "job: state pending, expected admitted"
    assert "expected the class waiting_for_quota (granular)" in judge(
        view, GRANULAR, reason="waiting_for_quota"
    )
    assert judge(JobView(PENDING, (PodView("p-0", "Running", gated=False),)), pods_running=0).startswith(
        "job: 1 pods"
    )


def test_no_workload_is_never_a_pass() -> None:
    nothing = JobView(None)
    assert judge(nothing, state="pending") == "job: state gone, expected pending"
    assert "QuotaReserved message ''" in judge(nothing, message="anything")
    assert judge(nothing, displayed_reason=True) == "job: no Workload to derive a waiting reason from"
    assert judge(JobView(workload()), reason="waiting_for_quota").startswith(
        "job: QuotaReserved reason (none)"
    )


def test_the_displayed_reason_must_be_the_conditions_verbatim() -> None:
    shown = {"type": "Warning", "reason": "Pending", "message": MESSAGE}
    assert judge(JobView(PENDING, events=(shown,)), displayed_reason=True) == "ok"
    reworded = {**shown, "message": "Waiting for resources"}
    assert "shown Pending: 'Waiting for resources'" in judge(
        JobView(PENDING, events=(shown, reworded)), displayed_reason=True
    )
    assert "no event shows a reason" in judge(JobView(PENDING), displayed_reason=True)


def test_a_gang_seen_half_released_fails_even_when_it_is_whole_later() -> None:
    history = History()
    half = JobView(ADMITTED, (PodView("g-0", "Running", gated=False), PodView("g-1", "Pending", gated=True)))
    history.record(Observation(0.5, NOW, {"job": half}), {"job": 2})
    whole = JobView(ADMITTED, (PodView("g-0", "Running", False), PodView("g-1", "Running", False)))
    assert "only part of the gang was released at t=0.5s" in judge(whole, history=history, gang=True)
    assert judge(whole, gang=True) == "ok"


def test_eviction_and_preemption_come_from_the_history() -> None:
    evicted = workload(
        ("Evicted", "True", "Preempted", "Preempted to accommodate a workload"),
        ("Preempted", "True", "InCohortReclamation", "Preempted to accommodate a workload"),
        schedulingStats={"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]},
    )
    view = JobView(evicted)
    assert judge(view, evicted=True, preempted_reason="InCohortReclamation") == "ok"
    assert "preempted InCohortReclamation, expected InClusterQueue" in judge(
        view, preempted_reason="InClusterQueue"
    )
    assert judge(JobView(ADMITTED), evicted=False) == "ok"
    assert judge(JobView(ADMITTED), evicted=True) == "job: was never evicted"


def test_the_flavor_is_the_accelerators_flavor() -> None:
    admitted = dict(ADMITTED)
    admitted["status"] = {
        **ADMITTED["status"],
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": "fvk-000000-cpu-pool", "nvidia.com/gpu": "fvk-000000-h100"},
                }
            ],
        },
    }
    names = {"h100": "fvk-000000-h100", "a100": "fvk-000000-a100"}
    obs = Observation(1.0, NOW, {"job": JobView(admitted)})
    assert check(expect(flavor="h100"), obs, History(), names, LEGACY).ok
    miss = check(expect(flavor="a100"), obs, History(), names, LEGACY)
    assert miss.detail == "job: admitted on flavor fvk-000000-h100, expected fvk-000000-a100"
    assert not check(
        expect(flavor="h100"), Observation(1.0, NOW, {"job": JobView(PENDING)}), History(), names, None
    ).ok


def test_verdicts_per_criterion() -> None:
    scenario = parse_scenario(shipped_files()["d-sched-01-02-quota"].read_text())
    ok = StepResult(1, "D-SCHED-01", True, "as expected", 0.2, {})
    bad = StepResult(8, "D-SCHED-02", False, "a-wait-4: state pending, expected admitted", 10.0, {})
    verdicts = {
        v.criterion: v
        for v in scenario_verdicts(
            scenario, [ok, bad], kueue_version="v0.19.2", mode=LEGACY, harness_error=""
        )
    }
    assert verdicts["D-SCHED-01"].result == Result.PASS
    assert verdicts["D-SCHED-02"].result == Result.FAIL and verdicts["D-SCHED-02"].reason.startswith(
        "step 8:"
    )
    assert verdicts["D-SCHED-07"].result == Result.INCONCLUSIVE  # no step checked it: never a pass
    against = verdicts["D-SCHED-01"].judged_against
    assert against["kueue_version"] == "v0.19.2" and against["scenario_sha256"] == scenario.digest
    assert verdicts["D-SCHED-01"].subject == "kueue/d-sched-01-02-quota"
    broken = scenario_verdicts(
        scenario, [ok], kueue_version="unknown", mode=None, harness_error="the API refused"
    )
    assert [v.result for v in broken] == [Result.ERROR, Result.ERROR, Result.ERROR]  # not decided: error


def _stopping(history: History, t: float, *pods: tuple[str, bool, str]) -> None:
    views = tuple(PodView(name, phase, gated=False, deleting=deleting) for name, deleting, phase in pods)
    history.record(Observation(t, NOW, {"lo": JobView(ADMITTED, views)}), {"lo": 1})


def test_a_victim_is_judged_on_the_time_it_ran_after_its_deletion() -> None:
    graceful = Expectation("D-SCHED-05", ("lo",), {"stopped_gracefully_s": 6})
    saved, killed, stopping = History(), History(), History()
    for t in (0.0, 2.0, 4.0, 6.0):  # seen stopping for 6 s, then gone
        _stopping(saved, t, ("lo-abcde", True, "Running"))
    _stopping(saved, 6.5)
    _stopping(killed, 0.0, ("lo-abcde", True, "Running"))  # SIGKILL at once: gone by the next look
    _stopping(killed, 0.3)
    _stopping(stopping, 0.0, ("lo-abcde", True, "Running"))
    obs = Observation(7.0, NOW, {"lo": JobView(ADMITTED)})
    assert check(graceful, obs, saved, NAMES, None).ok
    assert check(graceful, obs, killed, NAMES, None).detail == (
        "lo: a pod ran 0.0 s after its deletion, expected its 6 s save"
    )
    assert check(graceful, obs, stopping, NAMES, None).detail == "lo: lo-abcde is still stopping"
    assert check(graceful, obs, History(), NAMES, None).detail == (
        "lo: no pod of it was seen stopping (deleted and still running)"
    )


def test_admitted_but_not_placed_is_reported_as_such() -> None:
    unplaced = PodView(
        "a-0", "Pending", gated=False, unschedulable="0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    )
    expect = Expectation("D-SCHED-01", ("a",), {"pods_running": 1})
    obs = Observation(1.0, NOW, {"a": JobView(ADMITTED, (unplaced,))})
    assert check(expect, obs, History(), NAMES, None).detail == (
        "a: 0 pods running, expected 1: admitted by Kueue, but kube-scheduler could not place it: "
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    )
    pod = {
        "metadata": {"name": "a-0"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no node"}
            ],
        },
    }
    assert PodView.of(pod).unschedulable == "no node"
