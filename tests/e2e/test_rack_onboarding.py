"""End to end, on the one real path: `rack_onboarding` on a running Airflow 3 (api-server, LocalExecutor)
against the simulated `onboarding` fleet (`fleetval sim serve`), verdicts in the real PostgreSQL,
both human-in-the-loop questions answered through the REST API as a person's browser would
(`PATCH …/taskInstances/{task}/{map_index}/hitlDetails`).

Rack r01 registers with the onboarding taint (as the kubelet's --register-with-taints does): two
healthy nodes, two with a DCGM thermal warning, one with a failing GPU. The first run asks to promote
the NCCL baselines the rack measured (a profile fleetval has never measured) and, promoted, judges
NCCL against them; the healthy nodes are admitted before anyone answers; the failing node is held
and never offered; one warned node is approved (in service, untainted), the other not (held, the
reason recorded), and the answer is in their D-DEV-01 verdicts. The second run re-onboards the held
node and nobody answers: the timeout holds it. The form refuses bad input before a run exists.
`make test` runs the form check and a shorter approval (three nodes, no pairs); the full flow is
`e2e_long`.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
from typing import Any

import pytest

from fleetval.nccl.judge_stored import METRIC
from fleetval.onboarding.approval import HOLD_ALL
from fleetval.onboarding.baselines import PROMOTE_NONE
from fleetval.store.onboarding import onboarding_report
from tests.paths import ROOT

FLEET = ROOT / "include" / "fleetval" / "sim" / "fleets" / "onboarding.yaml"
DAG = "rack_onboarding"
PROFILE = "NVIDIA-H100-80GB-HBM3"
TAINT = "fleetval.io/onboarding"
RACK = ["r01-n01", "r01-n02", "r01-n03", "r01-n04", "r01-n05"]
READING_S = 5  # a person reads the question before answering


def register_tainted(kube: Any, nodes: list[str]) -> None:
    """What the kubelet's --register-with-taints=fleetval.io/onboarding=pending:NoSchedule leaves."""
    for node in nodes:
        kube.core.patch_node(
            node, {"spec": {"taints": [{"key": TAINT, "value": "pending", "effect": "NoSchedule"}]}}
        )


def taint(kube: Any, node: str) -> str | None:
    found = [t.value for t in kube.node(node).spec.taints or [] if t.key == TAINT]
    return found[0] if found else None


def labels(kube: Any, node: str) -> dict[str, str]:
    return dict(kube.node(node).metadata.labels or {})


def hitl_path(run_id: str, task: str) -> str:
    return (
        f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/{task}/0/hitlDetails"
    )


def wait_question(airflow: Any, run_id: str, task: str, timeout_s: float = 900) -> dict[str, Any]:
    """The question once its task waits for an answer (the run must still be going)."""

    def asked() -> dict[str, Any] | None:
        states = {(t["task_id"], t["map_index"]): t["state"] for t in airflow.task_states(DAG, run_id)}
        if states.get((task, 0)) == "awaiting_input":
            return dict(airflow.call("GET", hitl_path(run_id, task)))
        run = airflow.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}")
        assert run["state"] not in ("success", "failed"), f"{task} never asked: {states}"
        progress.append(states)
        return None

    progress: list[dict[Any, Any]] = []

    try:
        return dict(airflow.wait_for(f"{task} to ask", asked, timeout_s))
    except Exception:
        print("task states when giving up:", progress[-1:] or "none")
        raise


def task_instance(airflow: Any, run_id: str, task: str) -> dict[str, Any]:
    path = f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/{task}/0"
    return dict(airflow.call("GET", path))


def answer(airflow: Any, run_id: str, task: str, chosen: list[str]) -> dict[str, Any]:
    """Answer as a person would, and see the task take it. Airflow 3.3.2 (LocalExecutor, measured
    here): an answer that lands before the executor reports the parked task (a few seconds) resumes
    a process the server then kills, and the retry asks again; so answer after a person's reading
    time, and answer again if the question came back."""
    for _ in range(3):
        time.sleep(READING_S)
        asked = task_instance(airflow, run_id, task)
        reply = dict(
            airflow.call("PATCH", hitl_path(run_id, task), {"chosen_options": chosen, "params_input": {}})
        )

        def settled(try_number: int = asked["try_number"]) -> str | None:
            ti = task_instance(airflow, run_id, task)
            if ti["state"] == "awaiting_input" and ti["try_number"] > try_number:
                return "asked again"
            return str(ti["state"]) if ti["state"] in ("success", "failed", "upstream_failed") else None

        outcome = airflow.wait_for(f"{task} to take the answer", settled, 300)
        if outcome == "success":
            return reply
        assert outcome == "asked again", f"{task} ended {outcome} after the answer"
    raise AssertionError(f"{task} never took the answer")


def d_dev_01(store: Any, run_key: str, node: str) -> dict[str, Any]:
    fv_run = store.run_id(run_key)
    [row] = [r for r in store.verdicts(fv_run, "D-DEV-01") if r["subject"] == node]
    return dict(row)


def test_the_form_refuses_bad_input_before_a_run_exists(e2e: Any) -> None:
    airflow = e2e(FLEET).airflow
    airflow.unpause(DAG)
    for conf in (
        {"rack": "r01; rm"},
        {"rack": "r01", "dcgm_level": 1},
        {"rack": "r01", "label_selector": ""},
        {"rack": "r01", "nodes": ["r01-n01", "r01-n01"]},
        {"nodes": ["r01-n01"]},
    ):
        with pytest.raises(urllib.error.HTTPError) as refused:
            airflow.call("POST", f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None, "conf": conf})
        assert refused.value.code == 400, conf
    assert airflow.runs(DAG) == []


def test_one_warned_node_approved_the_other_not_both_answers_over_rest(e2e: Any) -> None:
    """The approval path in `make test` (the longer flow below adds pairs, a failing node and the
    timeout): three new nodes, no pairs; both questions answered through the REST API."""
    env = e2e(FLEET)
    kube, airflow, store = env.kube, env.airflow, env.kube.store
    picked = ["r01-n01", "r01-n02", "r01-n03"]  # healthy; a thermal warning each on the other two
    register_tainted(kube, picked)

    run_id = airflow.trigger(DAG, {"rack": "r01", "nodes": picked, "run_pairs": False})
    run_key = f"{DAG}/{run_id}"
    question = wait_question(airflow, run_id, "approve_baselines")
    candidates = [o for o in question["options"] if o != PROMOTE_NONE]
    assert [o.split()[2].rstrip(":") for o in candidates] == ["intra-8"]  # no pairs: no inter scope
    answer(airflow, run_id, "approve_baselines", candidates)

    question = wait_question(airflow, run_id, "approve_nodes")
    assert question["options"] == ["r01-n02", "r01-n03", HOLD_ALL]
    assert question["defaults"] == [HOLD_ALL]
    assert "GPU 3" in question["body"] and "GPU 5" in question["body"]
    reply = answer(airflow, run_id, "approve_nodes", ["r01-n02"])
    assert reply["responded_by"]["name"] == "admin" and reply["chosen_options"] == ["r01-n02"]
    assert airflow.wait_run(DAG, run_id, timeout_s=600) == "success"

    for node in ("r01-n01", "r01-n02"):
        assert taint(kube, node) is None, node
        assert labels(kube, node)["fleetval.io/in-service"] == "true"
    assert taint(kube, "r01-n03") == "held" and "fleetval.io/in-service" not in labels(kube, "r01-n03")
    assert "fleetval.io/onboarding" not in labels(kube, "r01-n05")  # not asked for: untouched
    approved, held = d_dev_01(store, run_key, "r01-n02"), d_dev_01(store, run_key, "r01-n03")
    assert (approved["result"], approved["action"]) == ("warn", "admit_approved")
    assert approved["evidence"]["approval"]["by"] == "admin"
    assert held["action"] == "hold_not_approved" and held["evidence"]["approval"]["answer"] == "held"
    assert store.promoted_baseline(profile=PROFILE, metric=METRIC, scope="intra-8") is not None
    assert store.promoted_baseline(profile=PROFILE, metric=METRIC, scope="inter-2x8") is None
    report = onboarding_report(store, store.run_id(run_key))
    assert report is not None
    assert (report["admitted"], report["held"]) == (["r01-n01", "r01-n02"], ["r01-n03"])
    assert report["stages"]["nccl_pairs"]["enabled"] is False


# Two runs of about 45 task processes each (about 25 of them one after another): minutes on two
# cores, so in make test-all.
@pytest.mark.e2e_long
def test_onboarding_with_approval_and_timeout(e2e: Any) -> None:
    env = e2e(FLEET)
    kube, airflow, store = env.kube, env.airflow, env.kube.store
    register_tainted(kube, RACK)

    started = time.monotonic()
    run_id = airflow.trigger(DAG, {"rack": "r01", "approval_timeout_minutes": 60})
    run_key = f"{DAG}/{run_id}"

    # A profile fleetval never measured: the rack's NCCL runs become candidates, promoted on request.
    question = wait_question(airflow, run_id, "approve_baselines")
    candidates = [o for o in question["options"] if o != PROMOTE_NONE]
    assert question["defaults"] == [PROMOTE_NONE]
    assert sorted(o.split()[2].rstrip(":") for o in candidates) == ["inter-2x8", "intra-8"]
    assert "r01-n04" not in question["body"]  # its r2 failed: never NCCL-tested, not a reference
    answer(airflow, run_id, "approve_baselines", candidates)

    question = wait_question(airflow, run_id, "approve_nodes")
    assert question["options"] == ["r01-n02", "r01-n03", HOLD_ALL]  # the failed node is not offered
    assert question["defaults"] == [HOLD_ALL] and question["multiple"] is True
    body = question["body"]
    assert "Thermal violations totaling 13.3 seconds" in body and "r01-n04" in body
    # While the warned nodes wait, the passing node is in service and the others still held.
    assert taint(kube, "r01-n01") is None and labels(kube, "r01-n01")["fleetval.io/in-service"] == "true"
    assert taint(kube, "r01-n02") == "pending" and taint(kube, "r01-n04") == "held"
    reply = answer(airflow, run_id, "approve_nodes", ["r01-n02"])
    assert reply["responded_by"]["name"] == "admin"
    assert airflow.wait_run(DAG, run_id, timeout_s=600) == "success"
    first_run_s = time.monotonic() - started

    for node in ("r01-n01", "r01-n05", "r01-n02"):  # passed; approved
        assert taint(kube, node) is None, node
        assert labels(kube, node)["fleetval.io/in-service"] == "true"
    for node in ("r01-n03", "r01-n04"):  # not approved; failed
        assert taint(kube, node) == "held", node
        assert labels(kube, node)["fleetval.io/onboarding"] == "held"
        assert "fleetval.io/in-service" not in labels(kube, node)
    assert labels(kube, "r01-n02")["fleetval.io/onboarding"] == "approved"
    assert taint(kube, "r02-n01") is None  # another rack: untouched

    approved = d_dev_01(store, run_key, "r01-n02")
    assert approved["result"] == "warn" and approved["action"] == "admit_approved"
    assert approved["evidence"]["approval"]["by"] == "admin" and approved["evidence"]["approval"]["at"]
    rejected = d_dev_01(store, run_key, "r01-n03")
    assert rejected["action"] == "hold_not_approved"
    assert rejected["evidence"]["approval"]["answer"] == "held"
    for scope in ("intra-8", "inter-2x8"):
        assert store.promoted_baseline(profile=PROFILE, metric=METRIC, scope=scope) is not None

    report = onboarding_report(store, store.run_id(run_key))
    assert report is not None
    assert report["admitted"] == ["r01-n01", "r01-n02", "r01-n05"]
    assert report["held"] == ["r01-n03", "r01-n04"]
    assert report["nodes"]["r01-n01"]["result"] == "pass"  # NCCL judged against the promoted baselines
    assert "not approved: answered by admin" in report["nodes"]["r01-n03"]["why"]
    failed = report["nodes"]["r01-n04"]
    assert failed["result"] == "fail" and failed["findings"][0]["criterion"] == "D-DEV-01"
    assert failed["stages"]["nccl_intra"].startswith("not run")
    assert any(e["kind"] == "taint" and "not approved" in e["reason"] for e in store.node_events("r01-n03"))

    # The held node again, alone, no pairs: nobody answers, the timeout holds it. The admitted node
    # asked for too is refused: it is in service now.
    started = time.monotonic()
    run_id = airflow.trigger(
        DAG,
        {
            "rack": "r01",
            "nodes": ["r01-n03", "r01-n01"],
            "run_pairs": False,
            "approval_timeout_minutes": 0.2,  # past the executor's report of the parked task
        },
    )
    question = wait_question(airflow, run_id, "approve_nodes")
    assert question["options"] == ["r01-n03", HOLD_ALL]
    assert airflow.wait_run(DAG, run_id, timeout_s=300) == "success"
    run_key = f"{DAG}/{run_id}"
    timed_out = d_dev_01(store, run_key, "r01-n03")["evidence"]["approval"]
    assert timed_out["timed_out"] is True and timed_out["by"] is None and timed_out["decision"] == "hold"
    report = onboarding_report(store, store.run_id(run_key))
    assert report is not None and report["held"] == ["r01-n03"] and report["admitted"] == []
    assert "in service" in report["refused"]["r01-n01"]
    assert report["stages"]["nccl_pairs"]["enabled"] is False
    assert taint(kube, "r01-n03") == "held" and taint(kube, "r01-n01") is None
    print(f"first run {first_run_s:.0f} s, second {time.monotonic() - started:.0f} s")
