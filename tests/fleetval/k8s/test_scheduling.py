"""kube-scheduler's filters, request arithmetic and FailedScheduling wording, as the simulator needs them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from fleetval.k8s.scheduling import (
    NO_FREE_PORTS,
    NO_PREEMPTION_VICTIMS,
    NODE_AFFINITY_MISMATCH,
    NODE_AFFINITY_PREFILTERED,
    NODE_NAME_MISMATCH,
    PREEMPTION_NOT_HELPFUL,
    TOO_MANY_PODS,
    UNSCHEDULABLE_NODE,
    UNTOLERATED_TAINT,
    failed_scheduling_message,
    filter_node,
    filter_node_reasons,
    fit_error_message,
    node_affinity_prefilter,
    node_name_affinity,
    nodes_available_message,
    parse_quantity,
    pod_requests,
    preemption_reasons,
    tolerates,
)

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", "0.1"),
        ("1", "1"),
        ("1.5", "1.5"),
        ("2Gi", str(2 * 2**30)),
        ("500Mi", str(500 * 2**20)),
        ("1Ki", "1024"),
        ("1e3", "1000"),
        ("1E3", "1000"),
        ("1k", "1000"),
        ("1M", "1000000"),
        ("1E", "1e18"),  # exa, not an exponent
        ("10n", "1e-8"),
        ("5u", "5e-6"),
        ("-1.5", "-1.5"),
        ("+2", "2"),
        (".5", "0.5"),
        ("1.", "1"),
        ("0", "0"),
        ("1e-20", "1e-9"),  # rounds up to one nano unit
        ("9Ei", str(2**63 - 1)),  # binary quantities are capped
        (8, "8"),
        (0.25, "0.25"),
    ],
)
def test_parse_quantity(text: str | int | float, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "quantities must match the regular expression"),
        ("abc", "quantities must match the regular expression"),
        ("1Gb", "quantities must match the regular expression"),
        ("1 ", "quantities must match the regular expression"),
        ("1K", "unable to parse quantity's suffix"),  # kilo is a lowercase k
        ("1e", "unable to parse quantity's suffix"),
        ("1Mm", "unable to parse quantity's suffix"),
        (True, "quantities must match the regular expression"),
        (float("inf"), "quantities must match the regular expression"),
    ],
)
def test_parse_quantity_rejects_what_the_api_server_rejects(text: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_quantity(text)


def container(
    name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def test_pod_requests_sum_containers_and_default_requests_to_limits() -> None:
    pod = {
        "spec": {
            "containers": [
                container("a", {"cpu": "500m", "memory": "1Gi"}),
                container("b", {"cpu": "1"}, {"cpu": "2", GPU: "8", "memory": "2Gi"}),
            ]
        }
    }
    requests = pod_requests(pod)
    assert requests == {
        "cpu": Decimal("1.5"),
        "memory": Decimal(3 * 2**30),
        GPU: Decimal(8),  # only a limit: the request defaults to it
        "pods": Decimal(1),
    }


def test_pod_requests_take_the_larger_of_containers_and_each_init_container() -> None:
    pod = {
        "spec": {
            "initContainers": [
                container("i1", {"cpu": "2", "memory": "1G"}),
                container("i2", {"cpu": "2", "memory": "3G"}),
            ],
            "containers": [
                container("c1", {"cpu": "2", "memory": "1G"}),
                container("c2", {"cpu": "1", "memory": "1G"}),
            ],
        }
    }
    requests = pod_requests(pod)
    assert (requests["cpu"], requests["memory"]) == (Decimal(3), Decimal(3 * 10**9))


def test_pod_requests_count_sidecars_with_the_containers_and_add_overhead() -> None:
    pod = {
        "spec": {
            "initContainers": [
                container("sidecar", {"cpu": "1"}, restartPolicy="Always"),
                container("setup", {"cpu": "3"}),
            ],
            "containers": [container("main", {"cpu": "1"})],
            "overhead": {"cpu": "250m"},
        }
    }
    # running: main + sidecar = 2; peak init: setup + sidecar = 4; plus overhead
    assert pod_requests(pod)["cpu"] == Decimal("4.25")
    assert pod_requests({"spec": {"containers": [container("c")]}}) == {"pods": Decimal(1)}


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (
            {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
            ("k", "v", "NoSchedule"),
            True,
        ),
        (
            {"key": "k", "value": "v", "effect": "NoSchedule"},
            ("k", "v", "NoSchedule"),
            True,
        ),  # Equal by default
        (
            {"key": "k", "operator": "Equal", "value": "w", "effect": "NoSchedule"},
            ("k", "v", "NoSchedule"),
            False,
        ),
        ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, ("k", "any", "NoSchedule"), True),
        ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, ("k", "", "NoExecute"), False),
        ({"key": "k", "operator": "Exists"}, ("k", "", "NoExecute"), True),  # empty effect: every effect
        ({"key": "other", "operator": "Exists"}, ("k", "", "NoSchedule"), False),
        ({"operator": "Exists"}, ("anything", "x", "NoExecute"), True),  # empty key: every taint
        ({"key": "k", "operator": "Gt", "value": "1"}, ("k", "5", "NoSchedule"), False),  # feature-gated off
    ],
)
def test_tolerates(toleration: dict[str, str], taint: tuple[str, str, str], expected: bool) -> None:
    key, value, effect = taint
    assert tolerates([toleration], {"key": key, "value": value, "effect": effect}) is expected


def test_no_tolerations_tolerate_nothing() -> None:
    assert not tolerates(None, {"key": "k", "effect": "NoSchedule"})
    assert not tolerates([], {"key": "k", "effect": "NoSchedule"})


def gpu_node(
    name: str,
    *,
    gpus: int = 8,
    pods: int = 110,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": str(pods), GPU: str(gpus)}},
    }


def probe_pod(
    node: str | None = "r01-n01",
    *,
    gpus: int = 8,
    tolerations: list[dict[str, str]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A probe pod as the KubernetesPodOperator creates it: pinned by hostname, GPUs as limits."""
    pod_spec: dict[str, Any] = {
        "containers": [container("base", {"cpu": "1", GPU: str(gpus)}, {GPU: str(gpus)})],
        "tolerations": tolerations
        if tolerations is not None
        else [
            {"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
            {"key": "fleetval.io/maintenance", "operator": "Exists"},
        ],
        **spec,
    }
    if node:
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {
        "metadata": {"name": "probe", "namespace": "fleetval"},
        "spec": pod_spec,
        "status": {"phase": "Pending"},
    }


def running(
    pod: dict[str, Any], node: str, phase: str = "Running", priority: int | None = None
) -> dict[str, Any]:
    spec = {**pod["spec"], "nodeName": node}
    if priority is not None:
        spec["priority"] = priority
    return {**pod, "spec": spec, "status": {"phase": phase}}


def test_a_fitting_pod_passes() -> None:
    assert filter_node(probe_pod(), gpu_node("r01-n01"), []) is None
    assert filter_node_reasons(probe_pod(), gpu_node("r01-n01"), []) == ()


def test_node_selector_and_required_node_affinity() -> None:
    assert filter_node(probe_pod("r01-n02"), gpu_node("r01-n01"), []) == NODE_AFFINITY_MISMATCH
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu.product", "operator": "In", "values": ["H100"]}]}
                ]
            }
        }
    }
    pod = probe_pod(None, affinity=affinity)
    assert filter_node(pod, gpu_node("r01-n01", labels={"gpu.product": "H100"}), []) is None
    assert filter_node(pod, gpu_node("r01-n01", labels={"gpu.product": "A100"}), []) == NODE_AFFINITY_MISMATCH


def test_an_unschedulable_node_rejects_pods_that_do_not_tolerate_the_unschedulable_taint() -> None:
    cordoned = gpu_node("r01-n01", unschedulable=True)
    assert filter_node(probe_pod(), cordoned, []) == UNSCHEDULABLE_NODE
    tolerant = probe_pod(
        tolerations=[
            {"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
        ]
    )
    assert filter_node(tolerant, cordoned, []) is None


def test_untolerated_no_schedule_and_no_execute_taints_block_prefer_no_schedule_does_not() -> None:
    for effect in ("NoSchedule", "NoExecute"):
        node = gpu_node(
            "r01-n01", taints=[{"key": "fleetval.io/quarantine", "value": "xid79", "effect": effect}]
        )
        assert filter_node(probe_pod(), node, []) == UNTOLERATED_TAINT
    soft = gpu_node("r01-n01", taints=[{"key": "fleetval.io/quarantine", "effect": "PreferNoSchedule"}])
    assert filter_node(probe_pod(), soft, []) is None
    maintenance = gpu_node(
        "r01-n01", taints=[{"key": "fleetval.io/maintenance", "value": "x", "effect": "NoExecute"}]
    )
    assert filter_node(probe_pod(), maintenance, []) is None
    assert UNTOLERATED_TAINT == "node(s) had untolerated taint(s)"


def test_filters_run_in_kube_schedulers_order() -> None:
    # unschedulable, node name, taints, affinity, ports, resources: the first failing plugin speaks
    everything_wrong = gpu_node(
        "r09-n09", gpus=0, unschedulable=True, taints=[{"key": "x", "effect": "NoSchedule"}]
    )
    assert filter_node(probe_pod(), everything_wrong, []) == UNSCHEDULABLE_NODE
    everything_wrong["spec"]["unschedulable"] = False
    assert filter_node(probe_pod(nodeName="r01-n01"), everything_wrong, []) == NODE_NAME_MISMATCH
    assert filter_node(probe_pod(), everything_wrong, []) == UNTOLERATED_TAINT
    everything_wrong["spec"]["taints"] = []
    assert filter_node(probe_pod(), everything_wrong, []) == NODE_AFFINITY_MISMATCH
    assert filter_node(probe_pod("r09-n09"), everything_wrong, []) == f"Insufficient {GPU}"


def test_extended_resources_already_requested_on_the_node_leave_too_few() -> None:
    node = gpu_node("r01-n01", gpus=8)
    holder = running(probe_pod(gpus=4), "r01-n01")
    assert filter_node(probe_pod(gpus=4), node, [holder]) is None
    assert filter_node(probe_pod(gpus=5), node, [holder]) == f"Insufficient {GPU}"
    # terminated pods hold nothing
    assert filter_node(probe_pod(gpus=8), node, [running(holder, "r01-n01", phase="Succeeded")]) is None
    assert filter_node(probe_pod(gpus=8), node, [running(holder, "r01-n01", phase="Failed")]) is None


def test_a_resource_missing_from_allocatable_counts_as_zero() -> None:
    cpu_only = gpu_node("r01-n01")
    del cpu_only["status"]["allocatable"][GPU]
    assert filter_node(probe_pod(gpus=1), cpu_only, []) == f"Insufficient {GPU}"
    assert filter_node(probe_pod(gpus=0), cpu_only, []) is None  # a zero request is never short


def test_every_short_resource_is_a_reason_and_pods_are_counted() -> None:
    node = gpu_node("r01-n01", gpus=8, pods=1)
    hog = {"spec": {"containers": [container("hog", {"cpu": "64", "memory": "512Gi"})]}}
    reasons = filter_node_reasons(probe_pod(), node, [running(hog, "r01-n01")])
    assert reasons == (TOO_MANY_PODS, "Insufficient cpu")
    pod = probe_pod(gpus=9)
    pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = "513Gi"
    assert filter_node_reasons(pod, gpu_node("r01-n01"), []) == ("Insufficient memory", f"Insufficient {GPU}")


def test_cpu_is_compared_in_millicores_rounded_up() -> None:
    node = gpu_node("r01-n01")
    node["status"]["allocatable"]["cpu"] = "1"
    pod = {"spec": {"containers": [container("c", {"cpu": "1.0001"})]}}
    assert filter_node(pod, node, []) == "Insufficient cpu"
    pod = {"spec": {"containers": [container("c", {"cpu": "999.5m"})]}}
    assert filter_node(pod, node, []) is None


def test_host_port_conflicts() -> None:
    with_port = {"spec": {"containers": [container("c", ports=[{"containerPort": 80, "hostPort": 8080}])]}}
    other_ip = {
        "spec": {
            "containers": [
                container("c", ports=[{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}])
            ]
        }
    }
    node = gpu_node("r01-n01")
    assert filter_node(with_port, node, [running(with_port, "r01-n01")]) == NO_FREE_PORTS
    assert filter_node(other_ip, node, [running(with_port, "r01-n01")]) == NO_FREE_PORTS
    assert filter_node(with_port, node, []) is None


def test_preemption_reasons() -> None:
    node = gpu_node("r01-n01")
    equal = running(probe_pod(gpus=8), "r01-n01")
    assert preemption_reasons(probe_pod(), node, [equal]) == (NO_PREEMPTION_VICTIMS,)
    assert preemption_reasons(probe_pod(), node, [running(equal, "r01-n01", priority=-1)]) == ()
    assert preemption_reasons(probe_pod("r01-n02"), node, []) == (PREEMPTION_NOT_HELPFUL,)
    assert preemption_reasons(probe_pod(gpus=9), node, []) == (
        PREEMPTION_NOT_HELPFUL,
    )  # bigger than the node


EXPECTED_16 = (
    "0/16 nodes are available: 1 Insufficient nvidia.com/gpu, 15 node(s) didn't match Pod's node "
    "affinity/selector. preemption: 0/16 nodes are available: 16 Preemption is not helpful for scheduling."
)


def test_fit_error_message_exact_wording() -> None:
    reasons = {f"Insufficient {GPU}": 1, NODE_AFFINITY_MISMATCH: 15}
    assert fit_error_message(16, reasons, dynamic_resources=False) == EXPECTED_16
    assert fit_error_message(16, reasons) == EXPECTED_16.replace(
        ". preemption:", ". no new claims to deallocate, preemption:"
    )


def test_fit_error_message_sorts_whole_count_and_reason_strings() -> None:
    reasons = {
        "Insufficient cpu": 2,
        "Insufficient memory": 3,
        UNTOLERATED_TAINT: 1,
        NODE_AFFINITY_MISMATCH: 15,
    }
    assert nodes_available_message(21, reasons) == (
        "0/21 nodes are available: 1 node(s) had untolerated taint(s), 15 node(s) didn't match Pod's node "
        "affinity/selector, 2 Insufficient cpu, 3 Insufficient memory."
    )
    assert fit_error_message(
        3, {"Insufficient memory": 1, UNTOLERATED_TAINT: 2}, preemption_reasons={NO_PREEMPTION_VICTIMS: 1}
    ) == (
        "0/3 nodes are available: 1 Insufficient memory, 2 node(s) had untolerated taint(s). "
        "no new claims to deallocate, preemption: 0/3 nodes are available: "
        "1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling."
    )
    assert fit_error_message(
        1, {"Insufficient cpu": 1}, preemption_policy="Never", dynamic_resources=False
    ) == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    )
    assert fit_error_message(0, {}) == "no nodes available to schedule pods"


def test_failed_scheduling_message_for_a_fleet() -> None:
    nodes = [gpu_node(f"r01-n{i:02d}") for i in range(1, 17)]
    busy = running(probe_pod(gpus=4), "r01-n01")
    pod = probe_pod("r01-n01", gpus=8)
    assert failed_scheduling_message(pod, nodes, {}) is None
    assert failed_scheduling_message(pod, nodes, {"r01-n01": [busy]}, dynamic_resources=False) == (
        "0/16 nodes are available: 1 Insufficient nvidia.com/gpu, 15 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/16 nodes are available: 1 No preemption victims found for incoming "
        "pod, 15 Preemption is not helpful for scheduling."
    )
    too_big = probe_pod("r01-n01", gpus=9)
    assert failed_scheduling_message(too_big, nodes, {}, dynamic_resources=False) == EXPECTED_16
    # a lower-priority pod could be evicted: kube-scheduler preempts and reports only the filters
    low = running(busy, "r01-n01", priority=-5)
    assert failed_scheduling_message(pod, nodes, {"r01-n01": [low]}) == (
        "0/16 nodes are available: 1 Insufficient nvidia.com/gpu, 15 node(s) didn't match Pod's node "
        "affinity/selector."
    )


def test_a_pod_pinned_by_node_name_fits_a_node_whose_hostname_label_differs() -> None:
    """The kubelet's hostname label need not be the Node's name (cloud nodes named by FQDN): a
    probe pinned by matchFields metadata.name lands there; one pinned by the hostname label with
    the node's name does not."""
    named = "ip-10-0-1-3.ec2.internal"
    node = gpu_node(named) | {
        "metadata": {"name": named, "labels": {"kubernetes.io/hostname": "ip-10-0-1-3"}}
    }
    others = [gpu_node(f"r01-n{i:02d}") for i in range(1, 4)]
    pinned = probe_pod(None, affinity=node_name_affinity(named))
    assert node_affinity_prefilter(pinned) == {named}
    assert filter_node_reasons(pinned, node, []) == ()
    assert filter_node(pinned, others[0], []) == NODE_AFFINITY_MISMATCH
    assert failed_scheduling_message(pinned, [*others, node], {}) is None
    by_label = probe_pod(named)  # nodeSelector kubernetes.io/hostname=<node name>
    assert filter_node(by_label, node, []) == NODE_AFFINITY_MISMATCH
    # A busy node: the nodes NodeAffinity's PreFilter left out are counted as kube-scheduler counts them.
    busy = [running(probe_pod(None), named)]
    assert failed_scheduling_message(pinned, [*others, node], {named: busy}) == (
        f"0/4 nodes are available: 1 Insufficient {GPU}, 3 {NODE_AFFINITY_PREFILTERED}. "
        "no new claims to deallocate, preemption: 0/4 nodes are available: 1 No preemption victims "
        "found for incoming pod, 3 Preemption is not helpful for scheduling."
    )


def test_node_affinity_prefilter_narrows_only_on_metadata_name_in() -> None:
    def terms(*each: list[dict[str, Any]]) -> dict[str, Any]:
        return probe_pod(
            None,
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": t} for t in each]
                    }
                }
            },
        )

    def name(op: str, value: str) -> dict[str, Any]:
        return {"key": "metadata.name", "operator": op, "values": [value]}

    assert node_affinity_prefilter(probe_pod("a")) is None  # a label selector does not narrow
    assert node_affinity_prefilter(terms([name("In", "a")], [name("In", "b")])) == {"a", "b"}
    assert node_affinity_prefilter(terms([name("In", "a")], [name("NotIn", "b")])) is None
    either = probe_pod(None, affinity=node_name_affinity("a", "b"))  # one term per node, ORed
    assert node_affinity_prefilter(either) == {"a", "b"}
    assert filter_node(either, gpu_node("b"), []) is None
    conflict = terms([name("In", "a"), name("In", "b")])
    assert node_affinity_prefilter(conflict) == frozenset()
    assert failed_scheduling_message(conflict, [gpu_node("a"), gpu_node("b")], {}) == (
        "0/2 nodes are available: pod affinity terms conflict. no new claims to deallocate, "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
