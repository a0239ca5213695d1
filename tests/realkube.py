"""The real control plane under test (`fleetval cluster up`): etcd, kube-apiserver, the controller
manager, the scheduler and Kueue built from their Go modules, the fleet's GPU nodes joined by the
virtual kubelet. The product talks to it as deploy/rbac.yaml's `fleetval-runner` (RBAC enforced
by the real authorizer); the tests as a cluster admin."""

from __future__ import annotations

import os
import pathlib
import signal
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client, config

from fleetval.store.repository import Store
from tests.rbac import TEST_AGENT
from tests.simkube import KubeUnderTest


@dataclass
class RealKube(KubeUnderTest):
    info: dict[str, Any]
    store: Store
    kubeconfig: pathlib.Path  # the runner's
    db_url: str
    state_dir: pathlib.Path = field(default_factory=pathlib.Path)
    outage: bool = False  # a component was killed: the kubelet's complaints meanwhile are expected
    backend = "controlplane"

    @property
    def admin_kubeconfig(self) -> pathlib.Path:
        return pathlib.Path(self.info["kubeconfig"])

    def api_client(self) -> client.ApiClient:
        api = config.new_client_from_config(config_file=str(self.admin_kubeconfig))
        api.user_agent = TEST_AGENT
        return api

    def pid(self, component: str) -> int:
        return int((self.state_dir / "pids" / f"{component}.pid").read_text())

    def kill(self, component: str) -> None:
        """Kill a component outright (SIGKILL), as a crash would."""
        self.outage = True
        os.killpg(self.pid(component), signal.SIGKILL)

    def restart(self, component: str) -> None:
        from fleetval.sim.controlplane.launcher import ControlPlane

        ControlPlane.attach(self.state_dir).restart(component)


def binaries_or_fail() -> None:
    """The real-control-plane tier needs the built binaries (`make controlplane`)."""
    from fleetval.errors import FleetvalError
    from fleetval.sim.controlplane.binaries import find_binaries

    try:
        find_binaries()
    except FleetvalError as exc:
        pytest.fail(str(exc))


def kubelet_complaints(state_dir: pathlib.Path) -> list[str]:
    """What the virtual kubelet reported going wrong (a refused lease renewal, a status write the
    API server rejected): nothing, on a healthy run."""
    log = state_dir / "logs" / "virtual-kubelet.log"
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    return [line for line in lines if line.startswith("virtual-kubelet: ")]


def leftover_processes(state_dir: pathlib.Path) -> list[str]:
    """Processes of that cluster still running (none after `cluster down`)."""
    left = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(state_dir) in cmdline:
            left.append(f"{proc.name}: {cmdline[:120]}")
    return left
