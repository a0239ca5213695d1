"""The k8s backend's probe runner (Xid remediation and the NCCL sweep, until they use probe pod
tasks) against a recording stand-in for CoreV1Api. Its inventory and node actions are
KubeCluster's, tested against the simulated API server (tests/fleetval/sim/test_kube_server.py)."""

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


def backend(core: FakeCore) -> Any:
    from fleetval_airflow.k8s_backend import KubernetesBackend

    b = KubernetesBackend.__new__(KubernetesBackend)  # no kubeconfig here: skip the hook
    b.core = core
    return b


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
