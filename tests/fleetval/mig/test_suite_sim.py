"""The MIG suite against the simulated MIG pool (`fleets/mig.yaml`: two healthy nodes, one node per
mig.* fault): every step through the Kubernetes API as on a real cluster, each fault caught on its
criterion and node, healthy nodes passing everything, every node given back; and the plan (pure):
who is taken, why the others are not, within the budget."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client import ApiClient

from fleetval.k8s.cluster import gpu_pods_per_node
from fleetval.mig import suite
from fleetval.mig.catalog import read_mig_parted_config
from fleetval.policy.blast_radius import DiagnosisBudget
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import ProbeSpec, kpo_kwargs
from fleetval.sim.kube.mig_parted_config import CONFIG_YAML
from tests.paths import ROOT

MIG_FLEET = ROOT / "include" / "fleetval" / "sim" / "fleets" / "mig.yaml"
# Simulated seconds per real one: a healthy reconfiguration (127 s) takes ~0.13 s, the slow node's
# 30 minutes 1.8 s; the D-GPU-MIG-01 limit here sits between them.
TIME_SCALE = 0.001
LIMIT_S = 0.6
WATCH_S = 2.5
POLL_S = 0.05
# fault node -> the criterion it must fail (D-GPU-MIG-05's node share is the billing fault's).
FAULTS = {
    "r01-n02": "D-GPU-MIG-01",
    "r01-n03": "D-GPU-MIG-02",
    "r01-n04": "D-GPU-MIG-03",
    "r01-n05": "D-GPU-MIG-04",
    "r01-n06": "D-GPU-MIG-05",
    "r01-n07": "D-GPU-MIG-06",
}


def run_probe(kube: Any, spec: ProbeSpec, store: Any, run_id: int) -> None:
    """One probe pod as the KubernetesPodOperator builds it (kpo_kwargs), its log stored."""
    kw = kpo_kwargs(spec)
    name = f"{kw['name']}-{spec.params['phase']}"
    resources = kw["container_resources"]
    kube.core.create_namespaced_pod(
        "fleetval",
        {
            "metadata": {"name": name, "labels": kw["labels"]},
            "spec": {
                "restartPolicy": "Never",
                "affinity": ApiClient().sanitize_for_serialization(kw["affinity"]),
                "tolerations": [
                    {"key": t.key, "operator": t.operator, "effect": t.effect} for t in kw["tolerations"]
                ],
                "containers": [
                    {
                        "name": "base",
                        "image": kw["image"],
                        "command": kw["cmds"],
                        "args": kw["arguments"],
                        "env": [{"name": e.name, "value": e.value} for e in kw["env_vars"]],
                        "resources": {"limits": resources.limits, "requests": resources.requests},
                    }
                ],
            },
        },
    )
    for _ in range(400):
        if kube.core.read_namespaced_pod(name, "fleetval").status.phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.01)
    raw = kube.core.read_namespaced_pod_log(name, "fleetval", _preload_content=False).data.decode()
    probe_outputs.store_probe_outputs(
        store,
        run_id,
        [probe_outputs.probe_output(spec, raw, exit_code=0, error=None, finished_at=time.time())],
    )
    kube.core.delete_namespaced_pod(name, "fleetval")


@pytest.mark.postgres
def test_each_mig_fault_is_caught_on_its_criterion_and_every_node_comes_back(sim_kube: Any) -> None:
    kube = sim_kube(MIG_FLEET, time_scale=TIME_SCALE)
    store, core, actions = kube.store, kube.core, kube.cluster
    run = store.ensure_run("mig/test", suite=suite.SUITE, backend="kubernetes", meta={})
    source, config = suite.read_config(core, kube.custom, "gpu-operator")
    assert source == "gpu-operator/default-mig-parted-config"
    plan = suite.plan(
        suite.gpu_nodes(core), gpu_pods_per_node(core), source, config, budget=DiagnosisBudget(1.0, 1.0)
    )
    assert [n.node for n in plan.nodes] == [f"r01-n0{i}" for i in range(1, 9)]
    first = plan.nodes[0]
    assert (first.layouts, first.refused, first.probe_profile, first.probe_instances, first.busy_target) == (
        ("all-balanced",),
        "all-1g.5gb",  # the config's first layout an H100 cannot hold
        "1g.10gb",
        16,
        "all-1g.10gb",
    )
    mig_run = suite.MigRun(
        store=store,
        run_id=run,
        run_key="t",
        plan=plan,
        taken=(),
        mig_config=config,
        core=core,
        actions=actions,
        pod_namespace="fleetval",
        image=None,
        watch_s=WATCH_S,
        poll_s=POLL_S,
    )
    taken = suite.take(mig_run)
    assert taken == [n.node for n in plan.nodes]
    assert all(core.read_node(n).spec.unschedulable for n in taken)
    mig_run = mig_run.with_taken(taken)
    suite.apply_layouts(mig_run, max_s=LIMIT_S)
    ready = suite.probe_ready(mig_run)
    not_probed = {n: why for n, why in ready.items() if why}
    assert list(not_probed) == ["r01-n06"]  # it sells its instances as whole GPUs: no MIG resource
    probed = [n for n in taken if n not in not_probed]
    for spec in suite.isolation_probes(plan, probed, "baseline", run_key="t", image=None):
        run_probe(kube, spec, store, run)
    fills = suite.start_fill(mig_run, probed)
    assert sorted(fills) == probed
    for spec in suite.isolation_probes(plan, probed, "during", run_key="t", image=None):
        run_probe(kube, spec, store, run)
    suite.stop_fill(mig_run, fills)
    suite.judge_isolation(store, run, plan, taken, run_key="t", not_probed=not_probed)
    suite.busy_reconfig(mig_run, not_probed=not_probed)
    suite.refused_layout(mig_run)
    back = suite.restore(mig_run)
    assert back == dict.fromkeys(taken, True)
    suite.missing_verdicts(store, run, taken)

    results = {(v["criterion"], v["subject"]): v for v in store.verdicts(run)}
    failed = sorted((c, n) for (c, n), v in results.items() if v["result"] == "fail")
    # Each fault on its criterion; the billing node also fails D-GPU-MIG-01 (its MIG resources never
    # appear: it sells them as nvidia.com/gpu).
    assert failed == sorted([(c, n) for n, c in FAULTS.items()] + [("D-GPU-MIG-01", "r01-n06")])
    for healthy in ("r01-n01", "r01-n08"):
        mine = {c: v["result"] for (c, n), v in results.items() if n == healthy}
        assert mine == dict.fromkeys(
            ("D-GPU-MIG-01", "D-GPU-MIG-02", "D-GPU-MIG-03", "D-GPU-MIG-04", "D-GPU-MIG-05", "D-GPU-MIG-06"),
            "pass",
        ), healthy
    # What the billing node could not be probed for is said, not passed.
    assert {results[(c, "r01-n06")]["result"] for c in ("D-GPU-MIG-03", "D-GPU-MIG-04", "D-GPU-MIG-06")} == {
        "inconclusive"
    }
    assert results[("D-GPU-MIG-02", "r01-n03")]["reason"].startswith(
        "all-1g.5gb reported applied (state success)"
    )
    assert "free memory fell from 9467 to" in results[("D-GPU-MIG-03", "r01-n04")]["reason"]
    assert "the work was deleted" in results[("D-GPU-MIG-06", "r01-n07")]["reason"]
    # The advertise time is a measurement; raw evidence came first (one probe per change and node).
    tools = {p["tool"] for p in store.probes(run, with_raw=False)}
    assert tools == {"mig-reconfig", "mig-workload", "mig-fill"}
    for node in taken:  # given back: original layout, uncordoned, fleetval's label gone
        n = core.read_node(node)
        assert not n.spec.unschedulable and suite.VALIDATION_LABEL not in n.metadata.labels
        assert n.metadata.labels["nvidia.com/mig.config"] == "all-disabled"
        assert n.metadata.labels["nvidia.com/mig.config.state"] == "success"
    assert not core.list_namespaced_pod("fleetval", label_selector="fleetval.io/mig-fill").items


# --- the plan (pure) ------------------------------------------------------------------------------------

CONFIG = read_mig_parted_config(CONFIG_YAML)


def node(name: str, rack: str = "r01", **labels: str) -> dict[str, Any]:
    base = {
        "fleetval.io/rack": rack,
        "nvidia.com/mig.capable": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": "all-disabled",
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/gpu.deploy.mig-manager": "true",
    }
    unschedulable = labels.pop("unschedulable", None)
    taints = [{"key": labels.pop("taint"), "effect": "NoSchedule"}] if "taint" in labels else []
    return {
        "metadata": {"name": name, "labels": {**base, **labels}},
        "spec": {"unschedulable": bool(unschedulable), "taints": taints},
    }


def test_the_plan_takes_only_idle_settled_known_nodes_and_says_why_not_the_others() -> None:
    nodes = [
        node("a"),
        node("busy"),
        node("cordoned", unschedulable="1"),
        node("quarantined", **{"fleetval.io/quarantine": "r3"}),
        node("pending", **{"nvidia.com/mig.config.state": "pending"}),
        node("t4", **{"nvidia.com/mig.capable": "false"}),
        node("unknown", **{"nvidia.com/gpu.product": "NVIDIA-B300"}),
        node("custom", **{"nvidia.com/mig.config": "my-own-layout"}),
        node("nomanager", **{"nvidia.com/gpu.deploy.mig-manager": "false"}),
        node("new", taint="fleetval.io/onboarding"),
    ]
    plan = suite.plan(nodes, {"busy": 2}, "ns/cm", CONFIG, budget=DiagnosisBudget(1.0, 1.0))
    assert [n.node for n in plan.nodes] == ["a"]
    onboarding = suite.plan(
        nodes, {"busy": 2}, "ns/cm", CONFIG, budget=DiagnosisBudget(1.0, 1.0), include_onboarding=True
    )
    assert [n.node for n in onboarding.nodes] == ["a", "new"]  # rack_onboarding's own MIG stage
    assert plan.skipped == {
        "busy": "busy (2 GPU pods)",
        "cordoned": "cordoned",
        "quarantined": "quarantined",
        "pending": "MIG manager state pending, not success",
        "t4": "not MIG-capable",
        "unknown": "GPU NVIDIA-B300 not in the MIG catalog",
        "custom": "its mig.config my-own-layout is not in the mig-parted config: it could not be restored",
        "nomanager": "no MIG manager on the node",
        "new": "being onboarded (rack_onboarding)",
    }


def test_the_budget_takes_one_wave_and_defers_the_rest_week_by_week() -> None:
    nodes = [node(f"r{r}-n{i}", rack=f"r{r}") for r in (1, 2) for i in range(8)]
    budget = DiagnosisBudget(max_fleet_fraction=0.25, max_rack_fraction=0.25)
    week1 = suite.plan(nodes, {}, "ns/cm", CONFIG, budget=budget, week="2026-W10")
    assert len(week1.nodes) == 4 and len(week1.deferred) == 12
    assert sorted(n.rack for n in week1.nodes) == ["r1", "r1", "r2", "r2"]  # 2 of 8 per rack
    week2 = suite.plan(nodes, {}, "ns/cm", CONFIG, budget=budget, week="2026-W11")
    assert {n.node for n in week2.nodes} != {n.node for n in week1.nodes}  # another sample
    assert suite.MigPlan.from_json(week1.to_json()) == week1


def test_layouts_the_gpu_cannot_hold_or_the_strategy_cannot_sell_are_left_out() -> None:
    plan = suite.plan(
        [node("a")], {}, "ns/cm", CONFIG, budget=DiagnosisBudget(1.0, 1.0), layouts=["all-1g.5gb"]
    )
    assert plan.skipped["a"].startswith('no layout to try fits: all-1g.5gb: "1g.5gb" is not a MIG profile')
    single = node("s", **{"nvidia.com/mig.strategy": "single"})
    plan = suite.plan([single], {}, "ns/cm", CONFIG, budget=DiagnosisBudget(1.0, 1.0))
    assert "the single strategy cannot advertise it" in plan.skipped["s"]
    plan = suite.plan(
        [node("b", **{"nvidia.com/mig.config": "all-balanced"})],
        {},
        "ns/cm",
        CONFIG,
        budget=DiagnosisBudget(1.0, 1.0),
    )
    assert plan.nodes[0].layouts == ("all-disabled", "all-balanced")  # a change to time, ending on MIG
    assert plan.nodes[0].busy_target == "all-1g.10gb"


def test_a_run_that_could_check_no_node_says_so(store: Any) -> None:
    run = store.ensure_run("mig/none", suite=suite.SUITE, backend="kubernetes", meta={})
    plan = suite.plan(
        [node("a"), node("b")], {"a": 1, "b": 3}, "ns/cm", CONFIG, budget=DiagnosisBudget(1.0, 1.0)
    )
    verdict = suite.nothing_taken(store, run, plan, [])
    assert verdict is not None and verdict.subject == "mig-pool" and verdict.result.value == "inconclusive"
    assert verdict.reason.startswith("none of the 2 MIG-capable nodes could be checked this run (1 busy")
    assert [v["result"] for v in store.verdicts(run)] == ["inconclusive"]
    assert suite.nothing_taken(store, run, plan, ["a"]) is None
    empty = suite.plan([], {}, "ns/cm", CONFIG, budget=DiagnosisBudget(1.0, 1.0))
    assert suite.nothing_taken(store, run, empty, []) is None  # no MIG pool: nothing to say
