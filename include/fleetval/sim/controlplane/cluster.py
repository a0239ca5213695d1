"""A whole loopback cluster for fleetval: the real control plane (`launcher.ControlPlane`), the
objects a site installs for fleetval (deploy/: the namespace, RBAC, Kueue's queues and
configuration; the CRDs of mpi-operator and the GPU Operator), and a fleet's GPU nodes joined by
the virtual kubelet. The one implementation behind `fleetval cluster up` and the tests' fixture.

`up()` returns, and writes to STATE_DIR/cluster.json, what `fleetval sim serve` prints (`fleet`,
`server`, `kubeconfig`) and more: `runner_kubeconfig` authenticates as deploy/rbac.yaml's
`fleetval-runner` service account (what Airflow's `kubernetes_default` connection uses, RBAC
enforced by the real authorizer), `kubeconfig` as a cluster admin (for people and tests).
"""

from __future__ import annotations

import base64
import json
import sys
import time
from importlib import resources
from pathlib import Path
from typing import IO, Any, Final

import yaml

from fleetval.errors import FleetvalError
from fleetval.fleet.spec import FleetSpec, load_fleet_spec
from fleetval.sim.controlplane.binaries import find_binaries
from fleetval.sim.controlplane.launcher import (
    KUBELET_USER,
    ControlPlane,
    ControlPlaneError,
    StateDir,
    kubeconfig_for,
    refuse_running,
    stop,
)
from fleetval.sim.kube import mpi_operator

RUNNER_NAMESPACE: Final = "fleetval"
GPU_OPERATOR_NAMESPACE: Final = "gpu-operator"
RUNNER_TOKEN_SECRET: Final = "fleetval-runner-token"
NODES_READY_TIMEOUT_S: Final = 120.0
# Objects fleetval's deploy/ does not hold but a GPU cluster has: the upstream CRDs of the
# components fleetval talks to (Kueue's own come with Kueue).
PRODUCT_CRDS: Final = (
    "kubeflow.org_mpijobs.yaml",
    "nvidia.com_clusterpolicies.yaml",
    "nvidia.com_nvidiadrivers.yaml",
)
DEPLOY_OBJECTS: Final = ("rbac.yaml", "kueue.yaml")


def product_crds(spec: FleetSpec) -> tuple[str, ...]:
    """PRODUCT_CRDS as the fleet's cluster has them: its mpi-operator release's MPIJob CRD."""
    if mpi_operator.release(spec) != mpi_operator.V04:
        return PRODUCT_CRDS
    v04 = f"kubeflow.org_mpijobs.{mpi_operator.V04_CRD_TAG}.yaml"
    return tuple(v04 if name == "kubeflow.org_mpijobs.yaml" else name for name in PRODUCT_CRDS)


def source_deploy_dir() -> Path:
    """deploy/ of the source tree this package runs from."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "deploy" / "rbac.yaml").is_file():
            return parent / "deploy"
    raise FleetvalError("cannot find fleetval's deploy/ folder beside this package: pass --deploy DIR")


def site_kueue_config(deploy: Path) -> dict[str, Any]:
    """The Kueue Configuration deploy/kueue-manager-config.yaml ships (inside its ConfigMap)."""
    config_map = yaml.safe_load((deploy / "kueue-manager-config.yaml").read_text())
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    if not isinstance(config, dict):
        raise FleetvalError("deploy/kueue-manager-config.yaml holds no Kueue Configuration")
    return config


def _kubelet_rbac() -> dict[str, Any]:
    """The virtual kubelet gets what a kubelet gets: the built-in `system:node` ClusterRole."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "fleetval:virtual-kubelet"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_USER}],
    }


def _write_objects(path: Path, objects: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


def up(
    state_dir: Path,
    fleet: Path | None = None,
    *,
    bin_dir: Path | None = None,
    deploy: Path | None = None,
    time_scale: float = 0.0,
    log: IO[str] | None = None,
) -> dict[str, Any]:
    """Start the cluster; returns what cluster.json holds (see the module doc)."""
    started = time.monotonic()
    state = StateDir(state_dir.resolve())
    refuse_running(state)
    state.root.mkdir(parents=True, exist_ok=True)
    deploy = deploy or source_deploy_dir()
    spec_text = fleet.read_text() if fleet is not None else _default_fleet()
    spec: FleetSpec = load_fleet_spec(spec_text)
    fleet_path = state.root / "fleet.yaml"
    fleet_path.write_text(spec_text)
    crds = [
        yaml.safe_load(resources.files("fleetval.k8s").joinpath("crds", name).read_text())
        for name in product_crds(spec)
    ]
    # The GPU Operator's namespace: deploy/rbac.yaml grants reads of its MIG manager config there.
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GPU_OPERATOR_NAMESPACE}}]
    crd_file = _write_objects(state.root / "objects" / "cluster.yaml", [*namespaces, *crds])
    kubelet_rbac = _write_objects(state.root / "objects" / "virtual-kubelet-rbac.yaml", [_kubelet_rbac()])
    plane = ControlPlane(state.root, find_binaries(bin_dir))
    info = plane.up(
        crds=[crd_file],
        kueue_config=site_kueue_config(deploy),
        manifests=[*(deploy / name for name in DEPLOY_OBJECTS), kubelet_rbac],
        kubelet_command=[
            sys.executable,
            "-m",
            "fleetval.cli",
            "cluster",
            "kubelet",
            "--fleet",
            str(fleet_path),
            "--client-ca",
            str(state.pki / "ca.crt"),
            "--time-scale",
            repr(time_scale),
        ],
        log=log,
    )
    try:
        _wait_nodes_ready(plane, spec)
        runner = _runner_kubeconfig(plane)
    except BaseException:
        plane.down()
        raise
    info.update(
        {
            "fleet": spec.name,
            "nodes": len(spec.nodes()),
            "runner_kubeconfig": str(runner),
            "deploy": str(deploy),
            "up_s": round(time.monotonic() - started, 2),
        }
    )
    info["pids"] = state.recorded_pids()
    state.info.write_text(json.dumps(info, indent=2))
    return info


def down(state_dir: Path) -> list[str]:
    """Stop everything `up` started in `state_dir`; returns the components that were running."""
    state = StateDir(state_dir.resolve())
    if not state.root.is_dir():
        raise FleetvalError(f"{state_dir} is not a cluster's state directory")
    return stop(state.root)


def _default_fleet() -> str:
    return resources.files("fleetval.sim").joinpath("fleets", "mini.yaml").read_text()


def _wait_nodes_ready(plane: ControlPlane, spec: FleetSpec) -> None:
    """Every node of the fleet registered and Ready (the node lifecycle controller agrees)."""
    names = [name for name, _rack in spec.nodes()]
    deadline = time.monotonic() + NODES_READY_TIMEOUT_S
    while True:
        result = plane.kubectl(["get", "nodes", "-o", "json"], check=False)
        ready: set[str] = set()
        if result.returncode == 0:
            for node in json.loads(result.stdout).get("items", []):
                conditions = node.get("status", {}).get("conditions") or []
                if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                    ready.add(node["metadata"]["name"])
        if ready >= set(names):
            return
        plane._check_running("virtual-kubelet")
        if time.monotonic() > deadline:
            missing = sorted(set(names) - ready)
            raise ControlPlaneError(f"nodes not Ready after {NODES_READY_TIMEOUT_S:.0f} s: {missing[:10]}")
        time.sleep(0.3)


def _runner_kubeconfig(plane: ControlPlane) -> Path:
    """A kubeconfig with the `fleetval-runner` token the token controller wrote into its Secret."""
    deadline = time.monotonic() + NODES_READY_TIMEOUT_S
    while True:
        result = plane.kubectl(
            ["get", "secret", RUNNER_TOKEN_SECRET, "-n", RUNNER_NAMESPACE, "-o", "jsonpath={.data.token}"],
            check=False,
        )
        if result.returncode == 0 and result.stdout.strip():
            token = base64.b64decode(result.stdout.strip()).decode()
            break
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"the token of {RUNNER_NAMESPACE}/{RUNNER_TOKEN_SECRET} never appeared")
        time.sleep(0.3)
    path = plane.state.root / "runner.kubeconfig"
    config = kubeconfig_for(
        plane.server, (plane.state.pki / "ca.crt").read_bytes(), "fleetval-runner", token=token
    )
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
