"""The k8s backend against a recording stand-in for CoreV1Api: what it sends to the API server."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest

from fleetval.k8s.specs import dcgm_diag_probe


class FakeCore:
    def __init__(
        self, phase: str = "Succeeded", log: str = '{"DCGM Diagnostic": {}}', fail_create: bool = False
    ):
        self.phase, self.log, self.fail_create = phase, log, fail_create
        self.calls: list[tuple[str, Any]] = []
        self.taints = [NS(key="other", value="x", effect="NoSchedule")]

    def list_node(self, label_selector: str, limit: int, _continue: str | None) -> Any:
        self.calls.append(("list_node", (label_selector, _continue)))
        page = 0 if _continue is None else 1
        node = NS(
            metadata=NS(name=f"n{page}", labels={"topology.kubernetes.io/zone": "r1"}),
            status=NS(allocatable={"nvidia.com/gpu": "8"}),
            spec=NS(taints=None, unschedulable=page == 1),
        )
        return NS(items=[node], metadata=NS(_continue="t1" if page == 0 else None))

    def list_pod_for_all_namespaces(self, field_selector: str) -> Any:
        gpu = NS(resources=NS(limits={"nvidia.com/gpu": "8"}))
        cpu = NS(resources=NS(limits={"cpu": "1"}))
        return NS(
            items=[
                NS(spec=NS(containers=[gpu], node_name="n0")),
                NS(spec=NS(containers=[cpu], node_name="n1")),
            ]
        )

    def create_namespaced_pod(self, namespace: str, body: Any) -> Any:
        if self.fail_create:
            raise RuntimeError("pods is forbidden")
        self.calls.append(("create", body))
        return NS(metadata=NS(name=body.metadata.name))

    def read_namespaced_pod(self, name: str, namespace: str) -> Any:
        return NS(status=NS(phase=self.phase))

    def read_namespaced_pod_log(self, name: str, namespace: str, container: str) -> str:
        return self.log

    def delete_namespaced_pod(self, name: str, namespace: str) -> None:
        self.calls.append(("delete", name))

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.calls.append(("patch", (name, body)))

    def read_node(self, name: str) -> Any:
        return NS(spec=NS(taints=self.taints))


def backend(core: FakeCore) -> Any:
    from fleetval_airflow.k8s_backend import KubernetesBackend

    b = KubernetesBackend.__new__(KubernetesBackend)  # no kubeconfig here: skip the hook
    b.core = core
    return b


def test_list_nodes_paginates_and_counts_gpu_pods() -> None:
    nodes = backend(FakeCore()).list_nodes()
    assert [(n.name, n.gpus, n.gpu_pods, n.unschedulable, n.rack) for n in nodes] == [
        ("n0", 8, 1, False, "r1"),
        ("n1", 8, 0, True, "r1"),
    ]


def test_probe_pod_is_created_pinned_and_deleted_on_success() -> None:
    core = FakeCore()
    [out] = backend(core).run_probes([dcgm_diag_probe("n0", level=2, gpus=8, run_key="k")])
    assert out.error is None
    assert out.raw == core.log
    created = next(body for call, body in core.calls if call == "create")
    assert created.spec.node_selector == {"kubernetes.io/hostname": "n0"}
    assert ("delete", created.metadata.name) in core.calls


@pytest.mark.parametrize(
    ("core", "expect"),
    [
        (FakeCore(phase="Failed"), "ended in phase Failed"),
        (FakeCore(fail_create=True), "RuntimeError: pods is forbidden"),
    ],
    ids=["pod-failed", "api-refused"],
)
def test_harness_failures_are_errors_not_verdicts(core: FakeCore, expect: str) -> None:
    [out] = backend(core).run_probes([dcgm_diag_probe("n0", level=2, gpus=8, run_key="k")])
    assert out.error is not None
    assert expect in out.error
    assert not any(call == "delete" for call, _ in core.calls)  # failed pods stay for forensics


def test_node_actions_patch_bodies() -> None:
    core = FakeCore()
    b = backend(core)
    b.cordon("n0")
    b.set_labels("n0", {"fleetval.io/health": "fail", "fleetval.io/quarantine": None})
    b.add_taint("n0", "fleetval.io/maintenance", "quarantine", "NoSchedule")
    b.remove_taint("n0", "other")
    patches = [body for call, (_, body) in ((c, a) for c, a in core.calls if c == "patch")]
    assert patches[0] == {"spec": {"unschedulable": True}}
    assert patches[1] == {
        "metadata": {"labels": {"fleetval.io/health": "fail", "fleetval.io/quarantine": None}}
    }
    assert patches[2]["spec"]["taints"] == [
        {"key": "other", "value": "x", "effect": "NoSchedule"},
        {"key": "fleetval.io/maintenance", "value": "quarantine", "effect": "NoSchedule"},
    ]
    assert patches[3] == {"spec": {"taints": []}}
