"""NCCL on Kubernetes without a cluster: the single-node probe pod (rendered by the probe pod
operator, schema-valid), the multi-node MPIJob (structure, Kueue gang admission, pod templates
schema-valid as Pods, one job per try) and the ClusterPolicy pause. The MPIJob lifecycle runs
against the simulated cluster in tests/fleetval_airflow/test_mpijob_probe.py."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
from kubernetes.client import ApiClient

from fleetval.nccl import mpijob
from fleetval.nccl.probe import NCCL_TESTS_IMAGE, nccl_probe, nccl_subject
from fleetval.probes.pod import ProbeSpec, probe_label

PAIR = ["r01-n01", "r02-n01"]


def pair_spec(nodes: list[str] | None = None) -> ProbeSpec:
    return nccl_probe(nodes or PAIR, gpus_per_node=8, repeat=1, run_key="post_upgrade_nccl_sweep/manual__x")


def test_nccl_probe_spec() -> None:
    spec = nccl_probe(["r01-n01"], gpus_per_node=8, repeat=2, run_key="k", profile="p", scope="intra-8")
    assert spec.probe_key == "k/nccl-intra/r01-n01/r2" and spec.node == "r01-n01" and spec.tool == "nccl"
    assert spec.params["argv"] == [
        "all_reduce_perf",
        "-b",
        "8",
        "-e",
        "8G",
        "-f",
        "2",
        "-g",
        "8",
        "-T",
        "600",
    ]
    # By its path in the image (not on its PATH), and no `; exit 0` hiding a missing binary.
    assert spec.args == ("exec /opt/nccl-tests/build/all_reduce_perf -b 8 -e 8G -f 2 -g 8 -T 600",)
    assert 127 not in spec.reported_exit_codes
    assert spec.env == {"NCCL_DEBUG": "INFO"} and spec.gpus == 8
    assert spec.image == NCCL_TESTS_IMAGE and ":latest" not in spec.image
    assert (spec.params["profile"], spec.params["scope"], spec.params["repeat"]) == ("p", "intra-8", 2)
    assert pair_spec().node == "r01-n01+r02-n01" and pair_spec().probe_key.endswith(
        "/nccl-inter/r01-n01+r02-n01/r1"
    )
    many = [f"node-with-a-long-name-{i:03d}" for i in range(40)]
    assert nccl_subject(many).startswith("group40-") and len(nccl_subject(many)) < 30
    with pytest.raises(ValueError, match="duplicate"):
        nccl_probe(["a", "a"], gpus_per_node=8, repeat=0, run_key="k")
    with pytest.raises(ValueError, match="at least one"):
        nccl_probe([], gpus_per_node=8, repeat=0, run_key="k")


def test_single_node_probe_is_a_pinned_pod() -> None:
    from fleetval_airflow.probe_pod import ProbePodOperator

    spec = nccl_probe(["r01-n01"], gpus_per_node=8, repeat=0, run_key="k")
    op = ProbePodOperator(task_id="nccl_intra", probe=spec.to_json(), fv_run=1, deferrable=False)
    manifest = ApiClient().sanitize_for_serialization(op.build_pod_request_obj(dry_run=True))
    kubernetes_validate.validate(manifest, "1.30", strict=True)
    container = manifest["spec"]["containers"][0]
    assert manifest["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["r01-n01"]}]}
        ]
    }
    assert not manifest["spec"].get("nodeSelector")  # the hostname label need not be the node's name
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert container["command"] == ["/bin/bash", "-c"]
    assert container["args"] == ["exec /opt/nccl-tests/build/all_reduce_perf -b 8 -e 8G -f 2 -g 8 -T 600"]
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in container["env"]
    # A memory-backed /dev/shm larger than the runtime's 64 MiB, and no SYS_ADMIN.
    [shm] = [v for v in manifest["spec"]["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert "SYS_ADMIN" not in (container["securityContext"]["capabilities"].get("add") or [])
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def _as_pod(template: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**copy.deepcopy(template.get("metadata") or {}), "name": name, "namespace": "fleetval"},
        "spec": copy.deepcopy(template["spec"]),
    }


def test_mpijob_manifest_is_a_kueue_gang_with_one_pinned_worker_per_node() -> None:
    spec = pair_spec(["r01-n01", "r02-n01", "r03-n01"])
    job = mpijob.mpijob_manifest(spec, queue_name="gpu-validation")
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    meta = job["metadata"]
    assert meta["labels"][mpijob.QUEUE_LABEL] == "gpu-validation"
    assert (
        meta["namespace"] == "fleetval" and meta["annotations"][mpijob.PROBE_KEY_ANNOTATION] == spec.probe_key
    )
    assert len(meta["name"]) <= 40 and meta["name"] == mpijob.mpijob_name(spec)
    assert meta["labels"]["fleetval.io/probe"] == probe_label(spec.probe_key)  # finds a retry's job
    retry = mpijob.mpijob_manifest(spec, name=mpijob.mpijob_name(spec, attempt=2))
    assert retry["metadata"]["name"] == f"{meta['name']}-t2" and len(retry["metadata"]["name"]) <= 40
    [retry_anti] = retry["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"][
        "podAntiAffinity"
    ]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert retry_anti["labelSelector"]["matchLabels"][mpijob.JOB_NAME_LABEL] == retry["metadata"]["name"]
    run_policy = job["spec"]["runPolicy"]
    assert run_policy["suspend"] is True  # Kueue admits the whole gang by unsuspending it
    assert run_policy["backoffLimit"] == 0
    assert (
        job["spec"]["slotsPerWorker"] == 1 and job["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    )

    replicas = job["spec"]["mpiReplicaSpecs"]
    assert set(replicas) == {"Launcher", "Worker"}
    worker, launcher = replicas["Worker"], replicas["Launcher"]
    assert worker["replicas"] == 3 and launcher["replicas"] == 1
    wspec = worker["template"]["spec"]
    [wc] = wspec["containers"]
    assert wc["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert wc["resources"]["requests"]["nvidia.com/gpu"] == "8"
    terms = wspec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # pinned by the Node object's name (matchFields metadata.name), one term per node
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}
        for n in ("r01-n01", "r02-n01", "r03-n01")
    ]
    assert all("matchExpressions" not in t for t in terms["nodeSelectorTerms"])
    [anti] = wspec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"][mpijob.JOB_NAME_LABEL] == meta["name"]
    assert {t["key"] for t in wspec["tolerations"]} >= {"nvidia.com/gpu", "fleetval.io/maintenance"}

    [lc] = launcher["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in (lc["resources"].get("limits") or {})
    script = lc["args"][0]
    assert script.startswith("exec mpirun --allow-run-as-root -np 3 --map-by ppr:1:node")
    assert script.endswith("-x NCCL_DEBUG /opt/nccl-tests/build/all_reduce_perf -b 8 -e 8G -f 2 -g 8 -T 600")

    # no CRD schema for MPIJob: the pod templates are validated as Pods
    for role, replica in replicas.items():
        kubernetes_validate.validate(_as_pod(replica["template"], f"x-{role.lower()}"), "1.30", strict=True)
    broken = _as_pod(worker["template"], "x")
    broken["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.30", strict=True)


def test_mpijob_refuses_single_node_probes() -> None:
    with pytest.raises(ValueError, match="at least two nodes"):
        mpijob.mpijob_manifest(nccl_probe(["a"], gpus_per_node=8, repeat=0, run_key="k"))


@pytest.mark.parametrize(
    ("conditions", "state"),
    [
        ([], "Pending"),
        ([{"type": "Created", "status": "True"}, {"type": "Suspended", "status": "True"}], "Suspended"),
        ([{"type": "Suspended", "status": "False"}, {"type": "Running", "status": "True"}], "Running"),
        ([{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}], "Succeeded"),
        ([{"type": "Running", "status": "False"}, {"type": "Failed", "status": "True"}], "Failed"),
    ],
)
def test_job_state(conditions: list[dict[str, str]], state: str) -> None:
    assert mpijob.job_state({"status": {"conditions": conditions}}) == state


class FakePolicies:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    def list_cluster_custom_object(self, **api: Any) -> dict[str, Any]:
        assert api == {"group": "nvidia.com", "version": "v1", "plural": "clusterpolicies"}
        return {"items": [{"metadata": {"name": "cluster-policy"}}]}

    def get_cluster_custom_object(self, **api: Any) -> dict[str, Any]:
        return {"spec": {"driver": {"upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1}}}}

    def patch_cluster_custom_object(self, **kw: Any) -> None:
        self.patches.append(kw)


@pytest.mark.parametrize("dry_run", [False, True])
def test_rollout_halt_pauses_the_driver_upgrade_controller(dry_run: bool) -> None:
    from fleetval_airflow.k8s_gate import pause_driver_upgrades

    api = FakePolicies()
    changed = pause_driver_upgrades(api, dry_run=dry_run)
    assert changed == [{"clusterpolicy": "cluster-policy", "autoUpgrade_before": True, "dry_run": dry_run}]
    [patch] = api.patches
    assert patch["name"] == "cluster-policy" and patch["plural"] == "clusterpolicies"
    assert patch["body"] == {"spec": {"driver": {"upgradePolicy": {"autoUpgrade": False}}}}
    assert patch.get("dry_run") == ("All" if dry_run else None)


def test_mpijob_workers_request_the_sites_rdma_device_with_their_gpus() -> None:
    from fleetval.settings import Settings

    devices = Settings.from_env({"FLEETVAL_RDMA_RESOURCE": "rdma/ib=1, nvidia.com/hostdev=8"}).rdma_resources
    assert devices == (("rdma/ib", "1"), ("nvidia.com/hostdev", "8"))
    job = mpijob.mpijob_manifest(pair_spec(["r01-n01", "r02-n01"]), worker_devices=devices)
    replicas = job["spec"]["mpiReplicaSpecs"]
    [wc] = replicas["Worker"]["template"]["spec"]["containers"]
    # an extended resource's request must equal its limit
    for resources in (wc["resources"]["limits"], wc["resources"]["requests"]):
        assert (resources["rdma/ib"], resources["nvidia.com/hostdev"], resources["nvidia.com/gpu"]) == (
            "1",
            "8",
            "8",
        )
    [lc] = replicas["Launcher"]["template"]["spec"]["containers"]
    assert "rdma/ib" not in str(lc["resources"])  # the launcher only runs mpirun
    kubernetes_validate.validate(_as_pod(replicas["Worker"]["template"], "x-worker"), "1.30", strict=True)
    assert Settings.from_env({}).rdma_resources == ()


@pytest.mark.parametrize(
    "text", ["rdma/ib", "rdma/ib=0", "rdma/ib=-1", "rdma/ib=x", "ib=1", "rdma/ib=\u0663"]
)
def test_a_malformed_rdma_setting_is_refused_naming_the_entry(text: str) -> None:
    from fleetval.settings import Settings

    with pytest.raises(ValueError, match="FLEETVAL_RDMA_RESOURCE"):
        Settings.from_env({"FLEETVAL_RDMA_RESOURCE": text})


def test_what_the_rollout_had_not_finished_is_read_before_the_halt() -> None:
    from fleetval.nccl.gate import upgrade_in_flight
    from fleetval.nodes import NodeInfo

    state = "nvidia.com/gpu-driver-upgrade-state"
    nodes = [
        NodeInfo("n1", "r1", "p", 8, labels={state: "upgrade-done"}),
        NodeInfo("n2", "r1", "p", 8, labels={state: "cordon-required"}),
        NodeInfo("n3", "r2", "p", 8, labels={state: "upgrade-required"}),
        NodeInfo("n4", "r2", "p", 8, labels={state: "upgrade-required"}),
        NodeInfo("n5", "r2", "p", 8),  # not managed by the operator
    ]
    assert upgrade_in_flight(nodes) == {"cordon-required": ["n2"], "upgrade-required": ["n3", "n4"]}
