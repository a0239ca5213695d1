"""NCCL on Kubernetes without a cluster: the single-node probe pod (KPO-rendered, schema-valid),
the multi-node MPIJob (structure, Kueue gang admission, pod templates schema-valid as Pods), the
MPIJob lifecycle against a fake API, the backend's dispatch, and the ClusterPolicy pause."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
import pytest
from kubernetes.client import ApiClient

from fleetval.k8s import mpijob
from fleetval.k8s.specs import NCCL_TESTS_IMAGE, ProbeSpec, nccl_probe, nccl_subject

PAIR = ["r01-n01", "r02-n01"]


def pair_spec(nodes: list[str] | None = None) -> ProbeSpec:
    return nccl_probe(nodes or PAIR, gpus_per_node=8, repeat=1, run_key="post_upgrade_nccl_sweep/manual__x")


def test_nccl_probe_spec() -> None:
    spec = nccl_probe(["r01-n01"], gpus_per_node=8, repeat=2, run_key="k", profile="p", scope="intra-8")
    assert spec.probe_key == "k/nccl-intra/r01-n01/r2" and spec.node == "r01-n01" and spec.tool == "nccl"
    assert spec.params["argv"] == ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8"]
    # By its path in the image (not on its PATH), and no `; exit 0` hiding a missing binary.
    assert spec.args == ("exec /opt/nccl-tests/build/all_reduce_perf -b 8 -e 8G -f 2 -g 8",)
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
    from fleetval_airflow.k8s_backend import render_pod

    spec = nccl_probe(["r01-n01"], gpus_per_node=8, repeat=0, run_key="k")
    manifest = ApiClient().sanitize_for_serialization(render_pod(spec))
    kubernetes_validate.validate(manifest, "1.30", strict=True)
    container = manifest["spec"]["containers"][0]
    assert manifest["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "r01-n01"}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert container["command"] == ["/bin/bash", "-c"]
    assert container["args"] == ["exec /opt/nccl-tests/build/all_reduce_perf -b 8 -e 8G -f 2 -g 8"]
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
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["r01-n01", "r02-n01", "r03-n01"]
    [anti] = wspec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"][mpijob.JOB_NAME_LABEL] == meta["name"]
    assert {t["key"] for t in wspec["tolerations"]} >= {"nvidia.com/gpu", "fleetval.io/maintenance"}

    [lc] = launcher["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in (lc["resources"].get("limits") or {})
    script = lc["args"][0]
    assert script.startswith("exec mpirun --allow-run-as-root -np 3 --map-by ppr:1:node")
    assert script.endswith("-x NCCL_DEBUG /opt/nccl-tests/build/all_reduce_perf -b 8 -e 8G -f 2 -g 8")

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


class FakeCustom:
    """CustomObjectsApi stand-in: the MPIJob goes through `states` one poll at a time."""

    def __init__(self, states: list[str]) -> None:
        self.states = states
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.polls = 0

    def create_namespaced_custom_object(self, *, body: dict[str, Any], **api: Any) -> None:
        assert api == {
            "group": "kubeflow.org",
            "version": "v2beta1",
            "namespace": "fleetval",
            "plural": "mpijobs",
        }
        self.created.append(body)

    def get_namespaced_custom_object(self, *, name: str, **api: Any) -> dict[str, Any]:
        state = self.states[min(self.polls, len(self.states) - 1)]
        self.polls += 1
        return {"status": {"conditions": [{"type": state, "status": "True"}]}}

    def delete_namespaced_custom_object(self, *, name: str, **api: Any) -> None:
        self.deleted.append(name)


class FakeCore:
    def __init__(self, log: str) -> None:
        self.log = log
        self.selectors: list[str] = []

    def list_namespaced_pod(self, *, namespace: str, label_selector: str) -> Any:
        self.selectors.append(label_selector)
        pod = SimpleNamespace(metadata=SimpleNamespace(name="launcher-abc", creation_timestamp=1))
        return SimpleNamespace(items=[pod] if self.log else [])

    def read_namespaced_pod_log(self, *, name: str, namespace: str) -> str:
        return self.log


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _run(states: list[str], log: str, **kw: Any) -> tuple[Any, FakeCustom, FakeCore]:
    from fleetval_airflow.k8s_mpijob import run_mpijob_probe

    custom, core = FakeCustom(states), FakeCore(log)
    out = run_mpijob_probe(custom, core, pair_spec(), poll_s=30, clock=FakeClock(), **kw)
    return out, custom, core


def test_mpijob_lifecycle_success_reads_the_launcher_log_and_deletes() -> None:
    out, custom, core = _run(["Suspended", "Running", "Succeeded"], "# nccl-tests version 2.20.0\n")
    assert out.error is None and out.exit_code == 0 and out.raw.startswith("# nccl-tests")
    assert out.node == "r01-n01+r02-n01" and out.spec["mpijob"] == custom.created[0]["metadata"]["name"]
    assert custom.deleted == [custom.created[0]["metadata"]["name"]]
    assert core.selectors == [
        f"training.kubeflow.org/job-name={custom.created[0]['metadata']['name']},training.kubeflow.org/job-role=launcher"
    ]


def test_mpijob_failed_with_output_is_evidence_not_a_harness_error() -> None:
    out, custom, _ = _run(["Running", "Failed"], "r01-n01: Test NCCL failure common.cu:1279 'x'\n")
    assert out.error is None and out.exit_code == 1 and "Test NCCL failure" in out.raw
    assert custom.deleted == []  # kept for forensics


def test_mpijob_never_admitted_is_a_harness_error_and_is_withdrawn() -> None:
    out, custom, _ = _run(["Suspended"], "", admission_timeout_s=60)
    assert out.error is not None and "never admitted by Kueue" in out.error and out.raw == ""
    assert custom.deleted == [custom.created[0]["metadata"]["name"]]


def test_backend_dispatches_multi_node_probes_to_mpijobs(monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetval_airflow import k8s_backend, k8s_mpijob

    seen: list[str] = []

    def fake_mpijob(custom: Any, core: Any, spec: ProbeSpec) -> Any:
        seen.append(spec.probe_key)
        return "mpijob"

    monkeypatch.setattr(k8s_mpijob, "run_mpijob_probe", fake_mpijob)
    backend = object.__new__(k8s_backend.KubernetesBackend)
    backend.hook = SimpleNamespace(custom_object_client="custom")  # type: ignore[assignment]
    backend.core = SimpleNamespace(
        create_namespaced_pod=lambda **kw: (_ for _ in ()).throw(RuntimeError("pod"))
    )
    assert backend._run_one(pair_spec()) == "mpijob"
    single = backend._run_one(nccl_probe(["r01-n01"], gpus_per_node=8, repeat=0, run_key="k"))
    assert seen == [pair_spec().probe_key]
    assert single.error == "RuntimeError: pod"  # the single-node probe went the pod way


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
