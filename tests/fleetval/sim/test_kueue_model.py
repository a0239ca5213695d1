"""The in-memory Kueue admission model against Kueue's own expectations: golden vectors (each
named by the upstream test or code it reproduces), the D-SCHED-01..06 contention
scenarios, StrictFIFO head-of-line blocking against BestEffortFIFO, and the v0.19/v0.20 reason
differences. Upstream paths are files of kubernetes-sigs/kueue at v0.19.2."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fleetval.sim.kube.kueue_model import (
    KueueConfig,
    KueueModel,
    PodSet,
    WaitForPodsReady,
    WorkloadSpec,
    format_quantity,
    gpu_job_workload,
    to_units,
    workload_from_manifest,
)

GPU = "nvidia.com/gpu"
DEFAULT_FLAVOR = {"kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}}
INSTANCE = "cloud.provider.com/instance"
LOW, MID, HIGH = -1, 0, 1  # preemption_test.go: lowPriority int32 = iota - 1


# --- builders --------------------------------------------------------------------------------------


def quota(resources: dict[str, Any]) -> list[dict[str, Any]]:
    """{"cpu": 5, GPU: {"nominalQuota": 8, "borrowingLimit": 4}} as a flavor's resources list."""
    return [
        {"name": name, **(value if isinstance(value, dict) else {"nominalQuota": value})}
        for name, value in resources.items()
    ]


def cluster_queue(
    name: str,
    flavors: list[tuple[str, dict[str, Any]]],
    *,
    cohort: str | None = None,
    namespace_selector: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    covered = list(dict.fromkeys(r for _, resources in flavors for r in resources))
    body: dict[str, Any] = {
        "namespaceSelector": {} if namespace_selector is None else namespace_selector,
        "resourceGroups": [
            {
                "coveredResources": covered,
                "flavors": [{"name": f, "resources": quota(resources)} for f, resources in flavors],
            }
        ],
        **spec,
    }
    if cohort:
        body["cohortName"] = cohort
    return {"kind": "ClusterQueue", "metadata": {"name": name}, "spec": body}


def local_queue(namespace: str, name: str, cq: str) -> dict[str, Any]:
    return {
        "kind": "LocalQueue",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"clusterQueue": cq},
    }


def flavor(
    name: str, labels: dict[str, str] | None = None, taints: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": labels or {}, "nodeTaints": taints or []},
    }


def team_cq(
    team: str, gpus: int | dict[str, Any], *, cohort: str | None = None, **spec: Any
) -> list[dict[str, Any]]:
    """The D-SCHED fixture for one team: non-binding cpu/memory and `gpus` nvidia.com/gpu."""
    resources = {"cpu": "1000", "memory": "8Ti", GPU: gpus}
    return [
        cluster_queue(f"{team}-cq", [("default-flavor", resources)], cohort=cohort, **spec),
        local_queue(team, f"{team}-lq", f"{team}-cq"),
    ]


def cpu_workload(namespace: str, name: str, queue: str, cpu: str, **spec: Any) -> WorkloadSpec:
    return WorkloadSpec(namespace, name, queue, (PodSet("main", 1, {"cpu": cpu}),), **spec)


def job(model: KueueModel, team: str, name: str, gpus: int, **spec: Any) -> str:
    """Submit a one-pod D-SCHED GPU job one second after the previous one (FIFO needs it), and settle."""
    model.advance(1)
    key = model.submit(gpu_job_workload(team, name, f"{team}-lq", gpus_per_pod=gpus, **spec))
    model.settle()
    return key


def cond(model: KueueModel, key: str, kind: str) -> tuple[str, str, str] | None:
    found = model.condition(key, kind)
    return None if found is None else (found.status, found.reason, found.message)


def gpu_message(more: int, podset: str = "main") -> str:
    return (
        f"couldn't assign flavors to pod set {podset}: insufficient unused quota for nvidia.com/gpu "
        f"in flavor default-flavor, {more} more needed"
    )


V019, V020 = KueueConfig.v0_19(), KueueConfig.v0_20()
VERSIONS = [pytest.param(V019, id="v0.19"), pytest.param(V020, id="v0.20")]


# --- golden vectors: Kueue's own expectations, each named by its upstream source --------------------


def gv1() -> None:
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 8)])
    job(m, "team-a", "run", 6)
    wait = job(m, "team-a", "wait", 4)
    assert cond(m, wait, "QuotaReserved") == ("False", "Pending", gpu_message(2))
    assert m.pending_workloads("team-a-cq") == (0, 1)


def gv2() -> None:
    m = KueueModel(
        [
            flavor("on-demand", {INSTANCE: "on-demand"}),
            flavor(
                "spot-tainted",
                {INSTANCE: "spot-tainted"},
                [{"key": INSTANCE, "value": "spot-tainted", "effect": "NoSchedule"}],
            ),
            flavor("spot-untainted", {INSTANCE: "spot-untainted"}),
            cluster_queue(
                "prod-cq",
                [
                    ("spot-tainted", {"cpu": {"nominalQuota": 5, "borrowingLimit": 5}}),
                    ("on-demand", {"cpu": 5}),
                ],
                cohort="prod-cohort",
            ),
            cluster_queue("dev-clusterqueue", [("spot-untainted", {"cpu": 5}), ("on-demand", {"cpu": 5})]),
            local_queue("core", "prod-queue", "prod-cq"),
            local_queue("core", "dev-queue", "dev-clusterqueue"),
        ]
    )
    wl1 = m.submit(cpu_workload("core", "prod-wl1", "prod-queue", "2"))
    m.settle()
    assert (m.admission(wl1) or {})["podSetAssignments"][0]["flavors"] == {"cpu": "on-demand"}
    m.advance(1)
    wl2 = m.submit(cpu_workload("core", "prod-wl2", "prod-queue", "5"))
    m.settle()
    assert m.is_pending(wl2) and m.pending_workloads("prod-cq") == (0, 1)
    # derived from flavorassigner.go: both flavors' reasons, sorted
    assert cond(m, wl2, "QuotaReserved") == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor on-demand, "
        "2 more needed, untolerated taint {cloud.provider.com/instance spot-tainted NoSchedule <nil>} "
        "in flavor spot-tainted",
    )
    dev = m.submit(cpu_workload("core", "dev-wl", "dev-queue", "5"))
    m.settle()
    assert (m.admission(dev) or {})["podSetAssignments"][0]["flavors"] == {"cpu": "spot-untainted"}
    m.finish(wl1)
    m.advance(1)
    assert m.admission(wl2) == {
        "clusterQueue": "prod-cq",
        "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": "on-demand"}, "resourceUsage": {"cpu": "5"}, "count": 1}
        ],
    }
    assert m.pending_workloads("prod-cq") == (0, 0)
    assert m.metric("kueue_admitted_workloads_total", cluster_queue="prod-cq") == 2


def gv3() -> None:
    def cq(name: str, nominal: int, limit: int) -> dict[str, Any]:
        return cluster_queue(
            name, [("on-demand", {"cpu": {"nominalQuota": nominal, "borrowingLimit": limit}})], cohort="all"
        )

    m = KueueModel(
        [
            flavor("on-demand"),
            cq("prod-cq", 5, 10),
            cq("dev-cq", 5, 10),
            local_queue("core", "prod-queue", "prod-cq"),
            local_queue("core", "dev-queue", "dev-cq"),
        ]
    )
    wl1 = m.submit(cpu_workload("core", "wl-1", "prod-queue", "11"))
    wl2 = m.submit(cpu_workload("core", "wl-2", "dev-queue", "11"))
    m.settle()
    exceeds = (
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor on-demand, previously "
        "considered podsets requests (0) + current podset request (11) > maximum capacity (10)"
    )
    assert cond(m, wl1, "QuotaReserved") == cond(m, wl2, "QuotaReserved") == ("False", "Pending", exceeds)
    assert m.pending_workloads("prod-cq") == m.pending_workloads("dev-cq") == (0, 1)
    m.apply(cq("test-cq", 15, 0))
    report = m.run_cycle()
    assert set(report.admitted) == {wl1, wl2}  # one cycle


def gv4() -> None:
    def cq(name: str, lending: int) -> dict[str, Any]:
        return cluster_queue(
            name, [("on-demand", {"cpu": {"nominalQuota": 5, "lendingLimit": lending}})], cohort="all"
        )

    m = KueueModel([flavor("on-demand"), cq("prod-cq", 1), local_queue("core", "queue", "prod-cq")])
    wl = m.submit(cpu_workload("core", "wl", "queue", "9"))
    m.settle()
    assert cond(m, wl, "QuotaReserved") == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor on-demand, previously "
        "considered podsets requests (0) + current podset request (9) > maximum capacity (5)",
    )
    m.apply(cq("dev-cq", 4))
    m.settle()
    assert (m.admission(wl) or {})["podSetAssignments"][0]["resourceUsage"] == {"cpu": "9"}


def _single_cq_preemption() -> KueueModel:
    return KueueModel(
        [
            flavor("alpha"),
            cluster_queue(
                "cq", [("alpha", {"cpu": 4})], preemption={"withinClusterQueue": "LowerOrNewerEqualPriority"}
            ),
            local_queue("preemption", "q", "cq"),
        ]
    )


def gv5() -> None:
    m = _single_cq_preemption()
    keys = {}
    for name, priority in (("low-wl-1", LOW), ("low-wl-2", LOW), ("mid-wl", MID), ("high-wl-1", HIGH)):
        keys[name] = m.submit(cpu_workload("preemption", name, "q", "1", priority=priority))
        m.advance(1)
    assert all(m.is_admitted(k) for k in keys.values())
    low3 = m.submit(cpu_workload("preemption", "low-wl-3", "q", "1", priority=LOW))
    m.advance(1)
    assert m.is_pending(low3) and not m.metric("kueue_evicted_workloads_total")
    high2 = m.submit(cpu_workload("preemption", "high-wl-2", "q", "2", priority=HIGH))
    report = m.run_cycle()
    assert {(p.victim, p.reason) for p in report.preemptions} == {
        (keys["low-wl-1"], "InClusterQueue"),
        (keys["low-wl-2"], "InClusterQueue"),
    }
    m.settle()
    assert m.is_admitted(high2)
    assert m.is_pending(keys["low-wl-1"]) and m.is_pending(keys["low-wl-2"])
    assert m.metric("kueue_evicted_workloads_total", cluster_queue="cq", reason="Preempted") == 2
    assert (
        m.metric("kueue_preempted_workloads_total", preempting_cluster_queue="cq", reason="InClusterQueue")
        == 2
    )


def _cohort_of_three() -> KueueModel:
    reclaiming = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    return KueueModel(
        [
            flavor("alpha"),
            cluster_queue("alpha-cq", [("alpha", {"cpu": 2})], cohort="all", preemption=reclaiming),
            cluster_queue("beta-cq", [("alpha", {"cpu": 2})], cohort="all"),
            cluster_queue("gamma-cq", [("alpha", {"cpu": 2})], cohort="all", preemption=reclaiming),
        ]
        + [local_queue("preemption", f"{n}-q", f"{n}-cq") for n in ("alpha", "beta", "gamma")]
    )


def gv6() -> None:
    m = _cohort_of_three()
    alpha_low = m.submit(cpu_workload("preemption", "alpha-low", "alpha-q", "1", priority=LOW))
    beta_mid = m.submit(cpu_workload("preemption", "beta-mid", "beta-q", "1", priority=MID))
    m.advance(1)
    beta_high = m.submit(cpu_workload("preemption", "beta-high", "beta-q", "4", priority=HIGH))
    m.advance(1)
    assert all(m.is_admitted(k) for k in (alpha_low, beta_mid, beta_high))
    alpha_mid = m.submit(
        cpu_workload("preemption", "alpha-mid", "alpha-q", "2", priority=MID, uid="alpha-mid-uid")
    )
    report = m.run_cycle()
    assert {(p.victim, p.reason) for p in report.preemptions} == {
        (alpha_low, "InClusterQueue"),
        (beta_mid, "InCohortReclamation"),
    }

    def message(human: str, preemptee: str) -> str:
        return (
            f"Preempted to accommodate a workload (UID: alpha-mid-uid, JobUID: UNKNOWN) due to {human}; "
            f"preemptor path: /all/alpha-cq; preemptee path: {preemptee}"
        )

    low_message = message("prioritization in the ClusterQueue", "/all/alpha-cq")
    mid_message = message("reclamation within the cohort", "/all/beta-cq")
    assert cond(m, alpha_low, "Preempted") == ("True", "InClusterQueue", low_message)
    assert cond(m, beta_mid, "Preempted") == ("True", "InCohortReclamation", mid_message)
    m.settle()
    assert m.is_admitted(alpha_mid) and m.is_admitted(beta_high)
    assert m.is_pending(alpha_low) and m.is_pending(beta_mid)
    m.advance(1)
    m.finish(alpha_mid)
    m.settle()
    assert m.is_admitted(alpha_low) and m.is_admitted(beta_mid)
    assert cond(m, alpha_low, "Preempted") == ("False", "QuotaReserved", "Previously: " + low_message)
    assert cond(m, beta_mid, "Preempted") == ("False", "QuotaReserved", "Previously: " + mid_message)


def gv7() -> None:
    m = _cohort_of_three()
    high1 = m.submit(cpu_workload("preemption", "alpha-high-1", "alpha-q", "2", priority=HIGH))
    beta_low = m.submit(cpu_workload("preemption", "beta-low", "beta-q", "4", priority=LOW))
    m.advance(1)
    high2 = m.submit(cpu_workload("preemption", "alpha-high-2", "alpha-q", "2", priority=HIGH))
    m.settle()
    assert m.is_admitted(high1) and m.is_admitted(beta_low) and m.is_pending(high2)
    assert not m.metric("kueue_evicted_workloads_total")
    assert cond(m, high2, "QuotaReserved") == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor alpha, "
        "2 more needed",
    )


def gv8() -> None:
    m = KueueModel(
        [
            flavor("on-demand"),
            {"kind": "Namespace", "metadata": {"name": "foo", "labels": {"dep": "eng"}}},
            cluster_queue(
                "strict-fifo-cq",
                [("on-demand", {"cpu": {"nominalQuota": 5, "borrowingLimit": 0}})],
                cohort="cohort",
                queueingStrategy="StrictFIFO",
                namespace_selector={
                    "matchExpressions": [{"key": "dep", "operator": "In", "values": ["eng"]}]
                },
            ),
            local_queue("foo", "strict-fifo-q", "strict-fifo-cq"),
        ]
    )
    wl1 = m.submit(cpu_workload("foo", "wl1", "strict-fifo-q", "2", priority=100))
    wl2 = m.submit(cpu_workload("foo", "wl2", "strict-fifo-q", "5", priority=10))
    wl3 = m.submit(cpu_workload("foo", "wl3", "strict-fifo-q", "1", priority=1))
    m.settle()
    assert m.is_admitted(wl1) and m.is_pending(wl2)
    assert m.condition(wl3, "QuotaReserved") is None  # never got a scheduling attempt
    assert m.pending_workloads("strict-fifo-cq") == (2, 0)


def gv_memory() -> None:
    """Upstream's memory example: "1Gi more needed" is formatted as a Kubernetes quantity."""
    m = KueueModel(
        [
            flavor("on-demand"),
            cluster_queue("cq1", [("on-demand", {"cpu": 1, "memory": "1Gi"})], cohort="cohort"),
            cluster_queue("cq2", [("on-demand", {"cpu": 2, "memory": "1Gi"})], cohort="cohort"),
            local_queue("core", "lq1", "cq1"),
            local_queue("core", "lq2", "cq2"),
        ]
    )
    wl1 = m.submit(WorkloadSpec("core", "wl1", "lq1", (PodSet("main", 1, {"cpu": "2", "memory": "2Gi"}),)))
    m.advance(1)
    wl2 = m.submit(WorkloadSpec("core", "wl2", "lq2", (PodSet("main", 1, {"cpu": "1", "memory": "1Gi"}),)))
    m.settle()
    assert cond(m, wl1, "QuotaReserved") == ("True", "QuotaReserved", "Quota reserved in ClusterQueue cq1")
    assert cond(m, wl1, "Admitted") == ("True", "Admitted", "The workload is admitted")
    assert cond(m, wl2, "QuotaReserved") == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for memory in flavor on-demand, "
        "1Gi more needed",
    )


def gv_hierarchical() -> None:
    """A multi-level cohort: the guaranteed subtree reclaims its quota from a best-effort queue."""
    reclaiming = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    guaranteed_quota = [
        {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": quota({"cpu": 3})}]}
    ]
    m = KueueModel(
        [
            flavor("default"),
            {"kind": "Cohort", "metadata": {"name": "root"}, "spec": {}},
            {
                "kind": "Cohort",
                "metadata": {"name": "guaranteed"},
                "spec": {"parentName": "root", "resourceGroups": guaranteed_quota},
            },
            cluster_queue("best-effort", [("default", {"cpu": 0})], cohort="root", preemption=reclaiming),
            cluster_queue(
                "guaranteed", [("default", {"cpu": 0})], cohort="guaranteed", preemption=reclaiming
            ),
            local_queue("ns", "best-effort-lq", "best-effort"),
            local_queue("ns", "guaranteed-lq", "guaranteed"),
        ]
    )
    best_effort = m.submit(cpu_workload("ns", "best-effort-wl", "best-effort-lq", "3", priority=HIGH))
    m.advance(1)
    assert m.is_admitted(best_effort)
    guaranteed = m.submit(cpu_workload("ns", "guaranteed-wl", "guaranteed-lq", "3", priority=MID, uid="g"))
    report = m.run_cycle()
    assert [(p.victim, p.reason) for p in report.preemptions] == [(best_effort, "InCohortReclamation")]
    assert report.preemptions[0].message.endswith(
        "preemptor path: /root/guaranteed/guaranteed; preemptee path: /root/best-effort"
    )
    m.settle()
    assert m.is_pending(best_effort) and m.is_admitted(guaranteed)


INTEGRATION = "test/integration/singlecluster/scheduler/"  # upstream test files, kueue v0.19.2
GOLDEN_VECTORS: list[Any] = [
    pytest.param(gv1, id="GV1[derived: flavorassigner.go fitsResourceQuota]"),
    pytest.param(gv2, id=f"GV2[{INTEGRATION}scheduler_test.go:258-335]"),
    pytest.param(gv3, id=f"GV3[{INTEGRATION}scheduler_test.go:1415-1470]"),
    pytest.param(gv4, id=f"GV4[{INTEGRATION}scheduler_test.go:1932-1972]"),
    pytest.param(gv5, id=f"GV5[{INTEGRATION}preemption_test.go:96-152]"),
    pytest.param(gv6, id=f"GV6[{INTEGRATION}preemption_test.go:425-517]"),
    pytest.param(gv7, id=f"GV7[{INTEGRATION}preemption_test.go:519-550]"),
    pytest.param(gv8, id=f"GV8[{INTEGRATION}scheduler_test.go:2065-2093]"),
    pytest.param(gv_memory, id=f"GV-memory[{INTEGRATION}scheduler_test.go:2920-2966]"),
    pytest.param(gv_hierarchical, id=f"GV-hierarchy[{INTEGRATION}preemption_test.go:1202-1287]"),
]


@pytest.mark.parametrize("vector", GOLDEN_VECTORS)
def test_golden_vector(vector: Callable[[], None]) -> None:
    vector()


# --- D-SCHED-01..06 contention scenarios -----------------------------------------------------------


@pytest.mark.parametrize("config", VERSIONS)
def test_dsched01_quota_8_with_6_used_leaves_a_4_gpu_job_pending(config: KueueConfig) -> None:
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 8)], config)
    job(m, "team-a", "a-run-6", 6)
    wait = job(m, "team-a", "a-wait-4", 4)
    gated = config.unadmitted_workloads_observability
    reason = "WaitingForQuota" if gated else "Pending"
    assert cond(m, wait, "QuotaReserved") == ("False", reason, gpu_message(2))
    expected_admitted = ("False", "NoReservation", "The workload has no reservation") if gated else None
    assert cond(m, wait, "Admitted") == expected_admitted
    assert cond(m, wait, "PodsReady") == ("False", "WaitForStart", "Not all pods are ready or succeeded")
    status = m.workload(wait)["status"]
    assert "admission" not in status
    assert status["resourceRequests"] == [
        {"name": "main", "resources": {"cpu": "1", "memory": "1Gi", GPU: "4"}}
    ]
    cq_status = m.cluster_queue_status("team-a-cq")
    assert cq_status["pendingWorkloads"] == 1 and cq_status["reservingWorkloads"] == 1
    gpu_row = next(r for r in cq_status["flavorsReservation"][0]["resources"] if r["name"] == GPU)
    assert gpu_row == {"name": GPU, "total": "6", "borrowed": "0"}
    assert m.pending_workloads("team-a-cq") == (0, 1)
    warnings = [(e.reason, e.message) for e in m.events_for(wait) if e.type == "Warning"]
    assert warnings == [(reason, gpu_message(2))]
    too_big = job(m, "team-a", "a-nine", 9)
    assert cond(m, too_big, "QuotaReserved") == (
        "False",
        "ExceedsMaxQuota" if gated else "Pending",
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
        "default-flavor, previously considered podsets requests (0) + current podset request (9) > "
        "maximum capacity (8)",
    )


def test_dsched01_variant_8_in_use_needs_4_more() -> None:
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 8)])
    job(m, "team-a", "a-run-8", 8)
    assert cond(m, job(m, "team-a", "a-wait-4", 4), "QuotaReserved") == ("False", "Pending", gpu_message(4))


def test_dsched02_a_finish_admits_the_waiting_job() -> None:
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 8)])
    job(m, "team-a", "a-run-2", 2)
    run4 = job(m, "team-a", "a-run-4", 4)
    wait = job(m, "team-a", "a-wait-4", 4)
    assert m.is_pending(wait)
    m.advance(30)
    m.finish(run4)
    m.advance(1)
    assert cond(m, run4, "Finished") == ("True", "Succeeded", "Reached expected number of succeeded pods")
    assert cond(m, wait, "QuotaReserved") == (
        "True",
        "QuotaReserved",
        "Quota reserved in ClusterQueue team-a-cq",
    )
    assert cond(m, wait, "Admitted") == ("True", "Admitted", "The workload is admitted")
    assert m.admission(wait) == {
        "clusterQueue": "team-a-cq",
        "podSetAssignments": [
            {
                "name": "main",
                "flavors": {"cpu": "default-flavor", "memory": "default-flavor", GPU: "default-flavor"},
                "resourceUsage": {"cpu": "1", "memory": "1Gi", GPU: "4"},
                "count": 1,
            }
        ],
    }
    admitted_at = m.conditions(wait)["Admitted"].last_transition_time
    assert 0 <= admitted_at - m.conditions(run4)["Finished"].last_transition_time <= 10
    normal = [(e.reason, e.message) for e in m.events_for(wait) if e.type == "Normal"]
    assert normal == [
        ("QuotaReserved", "Quota reserved in ClusterQueue team-a-cq, wait time since queued was 30s"),
        ("Admitted", "Admitted by ClusterQueue team-a-cq, wait time since reservation was 0s"),
    ]
    assert m.metric("kueue_admitted_workloads_total", cluster_queue="team-a-cq") == 3
    assert m.pending_workloads("team-a-cq") == (0, 0)


def _borrowing_cohort(
    team_b_preemption: dict[str, Any] | None = None, a_limit: int | None = 4, config: KueueConfig = V019
) -> KueueModel:
    a_gpus: dict[str, Any] = {"nominalQuota": 8} | (
        {"borrowingLimit": a_limit} if a_limit is not None else {}
    )
    b_spec = {"preemption": team_b_preemption} if team_b_preemption else {}
    return KueueModel(
        [
            DEFAULT_FLAVOR,
            {"kind": "Cohort", "metadata": {"name": "gpu-cohort"}, "spec": {}},
            *team_cq("team-a", a_gpus, cohort="gpu-cohort"),
            *team_cq("team-b", 8, cohort="gpu-cohort", **b_spec),
        ],
        config,
    )


def _gpu_reservation(m: KueueModel, cq: str) -> dict[str, str]:
    rows = m.cluster_queue_status(cq)["flavorsReservation"][0]["resources"]
    return next(r for r in rows if r["name"] == GPU)


def test_dsched03_borrowing_up_to_the_borrowing_limit() -> None:
    m = _borrowing_cohort()
    a1, a2, a3 = (job(m, "team-a", name, 4) for name in ("a1", "a2", "a3"))
    assert all(m.is_admitted(k) for k in (a1, a2, a3))
    assert _gpu_reservation(m, "team-a-cq") == {"name": GPU, "total": "12", "borrowed": "4"}
    assert _gpu_reservation(m, "team-b-cq") == {"name": GPU, "total": "0", "borrowed": "0"}
    a4 = job(m, "team-a", "a4", 1)
    assert cond(m, a4, "QuotaReserved") == ("False", "Pending", gpu_message(1))
    big = job(m, "team-a", "a13", 13)
    assert cond(m, big, "QuotaReserved") == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
        "default-flavor, previously considered podsets requests (0) + current podset request (13) > "
        "maximum capacity (12)",
    )


@pytest.mark.parametrize("config", VERSIONS)
def test_dsched04_reclaim_on_evicts_the_newest_borrower(config: KueueConfig) -> None:
    m = _borrowing_cohort({"reclaimWithinCohort": "Any"}, config=config)
    a1, a2, a3 = (job(m, "team-a", name, 4) for name in ("a1", "a2", "a3"))
    m.advance(1)
    b1 = m.submit(
        gpu_job_workload("team-b", "b1", "team-b-lq", gpus_per_pod=8, uid="b1-uid", job_uid="b1-job")
    )
    report = m.run_cycle()
    gated = config.unadmitted_workloads_observability
    assert cond(m, b1, "QuotaReserved") == (
        "False",
        "WaitingForPreemptedWorkloads" if gated else "Pending",
        gpu_message(4) + ". Pending the preemption of 1 workload(s)",
    )
    evicted_message = (
        "Preempted to accommodate a workload (UID: b1-uid, JobUID: b1-job) due to reclamation within the "
        "cohort; preemptor path: /gpu-cohort/team-b-cq; preemptee path: /gpu-cohort/team-a-cq"
    )
    assert [(p.victim, p.reason) for p in report.preemptions] == [(a3, "InCohortReclamation")]
    assert cond(m, a3, "Evicted") == ("True", "Preempted", evicted_message)
    assert cond(m, a3, "Preempted") == ("True", "InCohortReclamation", evicted_message)
    assert m.is_admitted(a3)  # QuotaReserved and Admitted stay True until the job is inactive
    m.reconcile()  # the job is inactive: Kueue clears the reservation
    assert cond(m, a3, "QuotaReserved") == (
        "False",
        "PendingEvaluation" if gated else "Pending",
        evicted_message,
    )
    assert cond(m, a3, "Admitted") == ("False", "NoReservation", "The workload has no reservation")
    assert cond(m, a3, "Requeued") == ("True", "Preempted", evicted_message)
    m.settle()
    assert m.is_admitted(b1) and m.is_admitted(a1) and m.is_admitted(a2)
    assert cond(m, a3, "QuotaReserved") == (
        "False",
        "WaitingForQuota" if gated else "Pending",
        gpu_message(4),
    )
    assert _gpu_reservation(m, "team-b-cq") == {"name": GPU, "total": "8", "borrowed": "0"}
    assert _gpu_reservation(m, "team-a-cq") == {"name": GPU, "total": "8", "borrowed": "0"}
    assert m.workload(a3)["status"]["schedulingStats"] == {
        "evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]
    }
    assert (
        m.metric(
            "kueue_preempted_workloads_total",
            preempting_cluster_queue="team-b-cq",
            reason="InCohortReclamation",
        )
        == 1
    )
    assert m.metric("kueue_evicted_workloads_total", cluster_queue="team-a-cq", reason="Preempted") == 1
    assert [e.reason for e in m.events_for(a3) if e.type == "Normal"][-2:] == [
        "EvictedDueToPreempted",
        "Preempted",
    ]


def test_dsched04_reclaim_off_waits_for_a_finish() -> None:
    m = _borrowing_cohort()
    a1 = job(m, "team-a", "a1", 4)
    job(m, "team-a", "a2", 4)
    job(m, "team-a", "a3", 4)
    b1 = job(m, "team-b", "b1", 8)
    assert cond(m, b1, "QuotaReserved") == ("False", "Pending", gpu_message(4))
    assert not m.metric("kueue_evicted_workloads_total")
    m.advance(5)
    m.finish(a1)
    m.settle()
    assert m.is_admitted(b1)


def test_dsched04_reclaim_off_reserves_the_lenders_share_in_the_cycle() -> None:
    m = _borrowing_cohort(a_limit=None)
    for name in ("a1", "a2", "a3"):
        job(m, "team-a", name, 4)
    m.advance(1)
    b1 = m.submit(gpu_job_workload("team-b", "b1", "team-b-lq", gpus_per_pod=8))
    a4 = m.submit(gpu_job_workload("team-a", "a4", "team-a-lq", gpus_per_pod=2))
    report = m.run_cycle()
    assert report.admitted == ()
    assert {k: msg for k, _, msg in report.pending} == {
        b1: gpu_message(4),
        a4: "Workload no longer fits after processing another workload",
    }


def test_dsched04_whole_workload_is_preempted_and_leaves_gpus_idle() -> None:
    m = _borrowing_cohort({"reclaimWithinCohort": "Any"})
    big = job(m, "team-a", "a12", 12)
    b1 = job(m, "team-b", "b6", 6)
    assert m.is_admitted(b1) and m.is_pending(big)
    assert cond(m, big, "QuotaReserved") == ("False", "Pending", gpu_message(2))


def test_dsched04_no_reclaim_when_the_preemptor_must_borrow() -> None:
    m = _borrowing_cohort({"reclaimWithinCohort": "Any"})
    for name in ("a1", "a2", "a3"):
        job(m, "team-a", name, 4)
    b1 = job(m, "team-b", "b10", 10)
    assert m.is_pending(b1) and not m.metric("kueue_evicted_workloads_total")


def test_dsched05_preempted_job_resumes_after_the_preemptor_finishes() -> None:
    priority_classes = [
        {"kind": "WorkloadPriorityClass", "metadata": {"name": "low"}, "value": 100},
        {"kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 1000},
    ]
    m = KueueModel(
        [
            DEFAULT_FLAVOR,
            *priority_classes,
            *team_cq("team-a", 8, preemption={"withinClusterQueue": "LowerPriority"}),
        ]
    )
    lo = job(m, "team-a", "lo", 8, priority_class="low", pods_ready_after_s=5)
    m.advance(60)
    assert cond(m, lo, "PodsReady") == (
        "True",
        "Started",
        "All pods reached readiness and the workload is running",
    )
    m.submit(
        gpu_job_workload("team-a", "hi", "team-a-lq", gpus_per_pod=8, priority_class="high", uid="hi-uid")
    )
    hi = "team-a/hi"
    m.run_cycle()
    assert cond(m, hi, "QuotaReserved") == (
        "False",
        "Pending",
        gpu_message(8) + ". Pending the preemption of 1 workload(s)",
    )
    message = (
        "Preempted to accommodate a workload (UID: hi-uid, JobUID: UNKNOWN) due to prioritization in the "
        "ClusterQueue; preemptor path: /team-a-cq; preemptee path: /team-a-cq"
    )
    assert cond(m, lo, "Evicted") == ("True", "Preempted", message)
    assert cond(m, lo, "Preempted") == ("True", "InClusterQueue", message)
    assert [e.reason for e in m.events_for(hi)] == ["PreemptedWorkload", "Pending"]  # issued, then requeued
    assert [e.reason for e in m.events_for(lo)][-2:] == ["EvictedDueToPreempted", "Preempted"]
    assert m.events_for(hi)[0].message == (
        f"Preempted workload team-a/lo (UID: {m.workload(lo)['metadata']['uid']}) in ClusterQueue team-a-cq; "
        "preemptor effective priority: 1000 (base: 1000, boost: 0); "
        "preemptee effective priority: 100 (base: 100, boost: 0)"
    )
    m.settle()
    assert m.is_admitted(hi) and m.is_pending(lo)
    m.advance(600)
    m.finish(hi)
    m.advance(1)
    assert m.is_admitted(lo)
    assert cond(m, lo, "Evicted") == ("False", "QuotaReserved", "Previously: " + message)
    assert cond(m, lo, "Preempted") == ("False", "QuotaReserved", "Previously: " + message)
    assert cond(m, lo, "Requeued") == ("True", "Preempted", message)
    status = m.workload(lo)["status"]
    assert status["schedulingStats"] == {
        "evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]
    }
    assert status["accumulatedPastExecutionTimeSeconds"] == 60


def test_dsched06a_gang_is_admitted_only_when_all_gpus_fit() -> None:
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 8)])
    run6 = job(m, "team-a", "a-run-6", 6)
    m.advance(1)
    gang = m.submit(
        gpu_job_workload("team-a", "gang", "team-a-lq", gpus_per_pod=4, pods=2, pod_set="workers")
    )
    m.settle()
    assert cond(m, gang, "QuotaReserved") == ("False", "Pending", gpu_message(6, "workers"))
    m.finish(run6)
    m.settle()
    assignment = (m.admission(gang) or {})["podSetAssignments"]
    assert [(a["name"], a["count"], a["resourceUsage"][GPU]) for a in assignment] == [("workers", 2, "8")]


def test_dsched06a_every_pod_set_is_reserved_together() -> None:
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 8)])
    job(m, "team-a", "a-run-2", 2)
    mpi = WorkloadSpec(
        "team-a",
        "mpi",
        "team-a-lq",
        (PodSet("launcher", 1, {"cpu": "1"}), PodSet("worker", 2, {"cpu": "1", GPU: 4})),
    )
    key = m.submit(mpi)
    m.settle()
    assert m.admission(key) is None
    assert cond(m, key, "QuotaReserved") == ("False", "Pending", gpu_message(2, "worker"))


def test_dsched06b_pods_ready_timeout_evicts_requeues_and_deactivates() -> None:
    wfpr = WaitForPodsReady(timeout_s=120, backoff_base_s=30, backoff_limit_count=2)
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 16)], KueueConfig.v0_19(wait_for_pods_ready=wfpr))
    gang = job(m, "team-a", "gang", 8)
    admitted_at = m.conditions(gang)["Admitted"].last_transition_time
    m.advance(119)
    assert m.is_admitted(gang)
    m.advance(1)
    timeout = "Exceeded the PodsReady timeout team-a/gang"
    assert cond(m, gang, "Evicted") == ("True", "PodsReadyTimeout", timeout)
    assert m.conditions(gang)["Evicted"].last_transition_time == admitted_at + 120
    assert cond(m, gang, "QuotaReserved") == ("False", "Pending", timeout)
    assert cond(m, gang, "Admitted") == ("False", "NoReservation", "The workload has no reservation")
    assert cond(m, gang, "Requeued") == ("False", "PodsReadyTimeout", timeout)
    assert cond(m, gang, "PodsReady") == ("False", "WaitForStart", "Not all pods are ready or succeeded")
    status = m.workload(gang)["status"]
    assert status["requeueState"] == {
        "count": 1,
        "requeueAt": "1970-01-01T00:02:31Z",
    }  # evicted at 121, +30 s
    assert status["schedulingStats"] == {
        "evictions": [{"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1}]
    }
    m.advance(30)
    assert cond(m, gang, "Requeued") == ("True", "BackoffFinished", "The workload backoff was finished")
    assert m.is_admitted(gang)
    assert cond(m, gang, "Evicted") == ("False", "QuotaReserved", "Previously: " + timeout)
    m.advance(120)
    assert m.workload(gang)["status"]["requeueState"]["count"] == 2
    m.advance(60)  # second backoff: 30·2
    assert m.is_admitted(gang)
    m.advance(120)
    deactivated = "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    assert cond(m, gang, "Evicted") == ("True", "DeactivatedDueToRequeuingLimitExceeded", deactivated)
    assert cond(m, gang, "QuotaReserved") == ("False", "Pending", deactivated)
    assert cond(m, gang, "Requeued") == ("False", "DeactivatedDueToRequeuingLimitExceeded", deactivated)
    assert cond(m, gang, "Admitted") == ("False", "NoReservation", "The workload has no reservation")
    workload = m.workload(gang)
    assert workload["spec"]["active"] is False and "requeueState" not in workload["status"]
    m.advance(3600)
    assert m.is_pending(gang)


def test_dsched06b_ready_pods_are_not_evicted_and_block_admission_serializes() -> None:
    wfpr = WaitForPodsReady(timeout_s=120, block_admission=True)
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 16)], KueueConfig.v0_19(wait_for_pods_ready=wfpr))
    first = job(m, "team-a", "first", 8)
    second = job(m, "team-a", "second", 8)
    assert m.is_admitted(first)
    assert cond(m, second, "QuotaReserved") == (
        "False",
        "Waiting",
        "waiting for all admitted workloads to be in PodsReady condition",
    )
    m.advance(10)
    m.mark_pods_ready(first)
    m.settle()
    assert m.is_admitted(second)
    assert cond(m, first, "PodsReady") == (
        "True",
        "Started",
        "All pods reached readiness and the workload is running",
    )
    m.mark_pods_ready(second)
    m.advance(600)
    assert m.is_admitted(first) and m.is_admitted(second)
    assert not m.metric("kueue_evicted_workloads_total")


def test_recovery_timeout_after_a_pod_failure() -> None:
    wfpr = WaitForPodsReady(timeout_s=120, recovery_timeout_s=30)
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 8)], KueueConfig.v0_19(wait_for_pods_ready=wfpr))
    key = job(m, "team-a", "trainer", 8, pods_ready_after_s=5)
    m.advance(10)
    m.mark_pod_failed(key)
    m.settle()
    assert cond(m, key, "PodsReady") == (
        "False",
        "WaitForRecovery",
        "At least one pod has failed, waiting for recovery",
    )
    m.advance(30)
    assert cond(m, key, "Evicted") == (
        "True",
        "PodsReadyTimeout",
        "Exceeded the PodsReady timeout team-a/trainer",
    )
    assert (
        m.workload(key)["status"]["schedulingStats"]["evictions"][0]["underlyingCause"] == "WaitForRecovery"
    )


# --- queueing strategies (X-02) ----------------------------------------------------------------------


def test_strict_fifo_blocks_the_smaller_job_behind_the_head() -> None:
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 8, queueingStrategy="StrictFIFO")])
    job(m, "team-a", "run", 6)
    big = job(m, "team-a", "big", 4)
    small = job(m, "team-a", "small", 2)
    assert cond(m, big, "QuotaReserved") == ("False", "Pending", gpu_message(2))
    assert m.is_pending(small) and m.condition(small, "QuotaReserved") is None
    assert m.pending_workloads("team-a-cq") == (2, 0)
    urgent = job(m, "team-a", "urgent", 2, priority=10)
    assert m.is_admitted(urgent)  # priority first, even in StrictFIFO


def test_best_effort_fifo_admits_the_smaller_job() -> None:
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 8)])
    job(m, "team-a", "run", 6)
    big = job(m, "team-a", "big", 4)
    small = job(m, "team-a", "small", 2)
    assert m.is_admitted(small) and m.is_pending(big)
    assert m.pending_workloads("team-a-cq") == (0, 1)


def test_strict_fifo_namespace_mismatch_does_not_block_others() -> None:
    selector = {"matchLabels": {"dep": "eng"}}
    m = KueueModel(
        [
            DEFAULT_FLAVOR,
            {"kind": "Namespace", "metadata": {"name": "eng", "labels": {"dep": "eng"}}},
            cluster_queue(
                "cq",
                [("default-flavor", {"cpu": 5})],
                namespace_selector=selector,
                queueingStrategy="StrictFIFO",
            ),
            local_queue("other", "q", "cq"),
            local_queue("eng", "q", "cq"),
        ]
    )
    stranger = m.submit(cpu_workload("other", "w", "q", "1", priority=100))
    member = m.submit(cpu_workload("eng", "w", "q", "1"))
    m.settle()
    assert cond(m, stranger, "QuotaReserved") == (
        "False",
        "Pending",
        "workload namespace doesn't match ClusterQueue selector",
    )
    assert m.is_admitted(member)


# --- flavors, lending, blockers --------------------------------------------------------------------


def test_multiple_flavors_in_preference_order_and_sorted_reasons() -> None:
    label = "nvidia.com/gpu.product"
    m = KueueModel(
        [
            flavor("h100", {label: "H100"}),
            flavor("a100", {label: "A100"}),
            cluster_queue("cq", [("h100", {GPU: 8}), ("a100", {GPU: 16})]),
            local_queue("ml", "q", "cq"),
        ]
    )

    def submit(name: str, gpus: int, selector: dict[str, str] | None = None) -> str:
        key = m.submit(WorkloadSpec("ml", name, "q", (PodSet("main", 1, {GPU: gpus}, selector or {}),)))
        m.advance(1)
        return key

    first, second, third = submit("first", 8), submit("second", 4), submit("third", 8)
    assert (m.admission(first) or {})["podSetAssignments"][0]["flavors"] == {GPU: "h100"}
    for key in (second, third):  # h100 is full: the next flavor, no borrowing needed
        assert (m.admission(key) or {})["podSetAssignments"][0]["flavors"] == {GPU: "a100"}
    pinned = submit("pinned", 16, {label: "A100"})
    assert cond(m, pinned, "QuotaReserved") == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: flavor h100 doesn't match node affinity, "
        "insufficient unused quota for nvidia.com/gpu in flavor a100, 12 more needed",
    )
    both = submit("both", 8)
    assert cond(m, both, "QuotaReserved") == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
        "a100, 4 more needed, insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed",
    )
    too_big = submit("too-big", 14)
    assert cond(m, too_big, "QuotaReserved") == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor h100, "
        "previously considered podsets requests (0) + current podset request (14) > maximum capacity (8), "
        "insufficient unused quota for nvidia.com/gpu in flavor a100, 10 more needed",
    )


def test_lending_limit_keeps_part_of_the_quota_private() -> None:
    m = KueueModel(
        [
            DEFAULT_FLAVOR,
            *team_cq("team-a", 8, cohort="gpu-cohort"),
            *team_cq("team-b", {"nominalQuota": 8, "lendingLimit": 2}, cohort="gpu-cohort"),
        ]
    )
    eight, two = job(m, "team-a", "a8", 8), job(m, "team-a", "a2", 2)
    one = job(m, "team-a", "a1", 1)
    assert m.is_admitted(eight) and m.is_admitted(two)
    assert cond(m, one, "QuotaReserved") == ("False", "Pending", gpu_message(1))
    private = job(m, "team-b", "b6", 6)
    assert m.is_admitted(private) and not m.metric("kueue_evicted_workloads_total")
    m2 = KueueModel(
        [
            DEFAULT_FLAVOR,
            *team_cq("team-a", 8, cohort="gpu-cohort"),
            *team_cq("team-b", {"nominalQuota": 8, "lendingLimit": 2}, cohort="gpu-cohort"),
        ]
    )
    eleven = job(m2, "team-a", "a11", 11)
    assert cond(m2, eleven, "QuotaReserved") == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
        "default-flavor, previously considered podsets requests (0) + current podset request (11) > "
        "maximum capacity (10)",
    )


@pytest.mark.parametrize(
    ("config", "reason"),
    [pytest.param(V019, "Inadmissible", id="v0.19"), pytest.param(V020, "Misconfigured", id="v0.20")],
)
def test_missing_local_queue_then_created(config: KueueConfig, reason: str) -> None:
    m = KueueModel([DEFAULT_FLAVOR, team_cq("team-a", 8)[0]], config)
    key = job(m, "team-a", "w", 1)
    assert cond(m, key, "QuotaReserved") == ("False", reason, "LocalQueue team-a-lq doesn't exist")
    m.apply(local_queue("team-a", "team-a-lq", "team-a-cq"))
    m.settle()
    assert m.is_admitted(key)


def test_stopped_cluster_queue_holds_pending_workloads() -> None:
    held = team_cq("team-a", 8, stopPolicy="Hold")
    m = KueueModel([DEFAULT_FLAVOR, *held])
    key = job(m, "team-a", "w", 1)
    assert cond(m, key, "QuotaReserved") == ("False", "Inadmissible", "ClusterQueue team-a-cq is inactive")
    m.apply(team_cq("team-a", 8)[0])
    m.settle()
    assert m.is_admitted(key)


def test_undeclared_resource_blocks_admission() -> None:
    m = KueueModel(
        [DEFAULT_FLAVOR, cluster_queue("cq", [("default-flavor", {GPU: 8})]), local_queue("ns", "q", "cq")]
    )
    key = m.submit(gpu_job_workload("ns", "w", "q", gpus_per_pod=1))
    m.settle()
    assert cond(m, key, "QuotaReserved") == (
        "False",
        "Pending",
        # Kueue visits resources in FNV-1a order (memory, nvidia.com/gpu, pods, cpu) and stops at the first
        "couldn't assign flavors to pod set main: resource memory unavailable in ClusterQueue",
    )
    cpu_and_gpu = m.submit(WorkloadSpec("ns", "w2", "q", (PodSet("main", 1, {"cpu": "1", GPU: 1}),)))
    m.settle()
    assert cond(m, cpu_and_gpu, "QuotaReserved") == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: resource cpu unavailable in ClusterQueue",
    )
    ignoring = KueueModel(
        [DEFAULT_FLAVOR, cluster_queue("cq", [("default-flavor", {GPU: 8})]), local_queue("ns", "q", "cq")],
        KueueConfig.v0_19(quota_check_strategy="IgnoreUndeclared"),
    )
    key = ignoring.submit(gpu_job_workload("ns", "w", "q", gpus_per_pod=1))
    ignoring.settle()
    assert ignoring.is_admitted(key)


def test_workload_manifest_and_quantities() -> None:
    manifest = {
        "metadata": {
            "namespace": "team-a",
            "name": "job-x-12345",
            "labels": {"kueue.x-k8s.io/job-uid": "j-1"},
        },
        "spec": {
            "queueName": "team-a-lq",
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "resources": {"requests": {"cpu": "500m"}, "limits": {GPU: "2"}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }
    spec = workload_from_manifest(manifest)
    assert spec.job_uid == "j-1" and spec.pod_sets[0].count == 2
    m = KueueModel([DEFAULT_FLAVOR, *team_cq("team-a", 8)])
    key = m.submit(spec)
    m.settle()
    usage = (m.admission(key) or {})["podSetAssignments"][0]["resourceUsage"]
    assert usage == {"cpu": "1", GPU: "4"}
    assert [format_quantity("cpu", 1500), format_quantity("memory", to_units("memory", "1536Mi"))] == [
        "1500m",
        "1536Mi",
    ]
    assert format_quantity("memory", 2000) == "2k" and format_quantity(GPU, 1000) == "1k"


def test_best_effort_preemptor_stays_at_the_head_until_admitted() -> None:
    """The preemptor keeps the head of its BestEffortFIFO queue (preemptorWorkload in
    pkg/cache/queue/cluster_queue.go), so an older workload requeued by the victim's release does
    not take the freed quota in its place."""
    m = KueueModel(
        [
            DEFAULT_FLAVOR,
            *team_cq("team-a", 4, cohort="gpu-cohort", preemption={"reclaimWithinCohort": "Any"}),
            *team_cq("team-b", 4, cohort="gpu-cohort"),
        ]
    )
    job(m, "team-b", "b-big", 6)
    old = job(m, "team-a", "a-old", 5)
    assert m.is_pending(old) and m.pending_workloads("team-a-cq") == (0, 1)
    m.advance(1)
    new = m.submit(gpu_job_workload("team-a", "a-new", "team-a-lq", gpus_per_pod=3))
    assert [p.victim for p in m.run_cycle().preemptions] == ["team-b/b-big"]
    m.reconcile()  # the victim's quota is released and the inadmissible a-old goes back to the heap
    assert m.pending_workloads("team-a-cq") == (2, 0)
    assert m.run_cycle().admitted == (new,)
