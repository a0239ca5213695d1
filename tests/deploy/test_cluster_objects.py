"""The objects a platform team applies to its cluster (deploy/): valid as the API server would
judge them, and exactly what the product needs.

RBAC is checked twice more at run time: every simulated cluster of the test session refuses the
session if the product makes a call deploy/rbac.yaml does not grant, and a full run fails when a
grant was never used (tests/rbac.py, tests/conftest.py)."""

from __future__ import annotations

import time
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from fleetval.dcgm.probe import dcgm_diag_probe
from fleetval.k8s.validation import KUBERNETES_VERSION
from fleetval.nccl.mpijob import DEFAULT_QUEUE, mpijob_manifest
from fleetval.nccl.probe import nccl_probe
from fleetval.probes.pod import NAMESPACE, kpo_kwargs
from fleetval.settings import DEFAULT_KUEUE_QUEUE
from tests.paths import ROOT
from tests.rbac import Grant, runner_grants

DEPLOY = ROOT / "deploy"
# Pod Security Standards, `baseline`: the only capabilities a container may add.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_rbac_objects_are_valid_kubernetes_objects() -> None:
    for doc in _docs("rbac.yaml"):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_runner_may_not_touch_what_it_does_not_use() -> None:
    grants = runner_grants()
    assert (
        Grant("", "", "secrets", "get") not in grants and Grant(NAMESPACE, "", "secrets", "get") not in grants
    )
    assert not [g for g in grants if g.verb in ("*", "escalate", "bind", "impersonate")]
    assert not [g for g in grants if g.resource == "*" or g.group == "*"]
    # cluster-wide Xid Events from node-problem-detector (it writes them to `default`)
    assert Grant("", "", "events", "list") in grants


def test_the_runner_gets_a_token_and_probes_get_none() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in _docs("rbac.yaml")}
    secret = docs[("Secret", "fleetval-runner-token")]
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "fleetval-runner"
    assert docs[("ServiceAccount", "fleetval-probe")]["automountServiceAccountToken"] is False


def test_the_namespace_admits_exactly_the_capabilities_probes_need() -> None:
    [namespace] = [d for d in _docs("rbac.yaml") if d["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    dcgm = kpo_kwargs(dcgm_diag_probe("n1", level=2, gpus=8, run_key="k"))["container_security_context"]
    nccl = kpo_kwargs(nccl_probe(["n1"], gpus_per_node=8, repeat=0, run_key="k"))[
        "container_security_context"
    ]
    added = set(dcgm.capabilities.add or []) | set(nccl.capabilities.add or [])
    assert set(nccl.capabilities.add) == {"IPC_LOCK"}  # no SYS_ADMIN for NCCL
    assert set(dcgm.capabilities.add) == {"SYS_ADMIN"}
    assert dcgm.allow_privilege_escalation is False and nccl.allow_privilege_escalation is False
    beyond_baseline = added - BASELINE_CAPABILITIES
    assert beyond_baseline, "if probes fit `baseline`, enforce it"
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert (
        labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "baseline"
    )


def test_kueue_config_makes_gangs_all_or_nothing_and_manages_mpijobs() -> None:
    [configmap] = _docs("kueue-manager-config.yaml")
    kubernetes_validate.validate(configmap, KUBERNETES_VERSION, strict=True)
    config = yaml.safe_load(configmap["data"]["controller_manager_config.yaml"])
    assert (config["apiVersion"], config["kind"]) == ("config.kueue.x-k8s.io/v1beta2", "Configuration")
    assert {"batch/job", "kubeflow.org/mpijob", "pod"} <= set(config["integrations"]["frameworks"])
    wait = config["waitForPodsReady"]
    # The simulated cluster's Kueue runs with what we ship.
    from fleetval.sim.kube.kueue import KUEUE_CONFIG

    simulated = KUEUE_CONFIG.wait_for_pods_ready
    strategy = wait["requeuingStrategy"]
    assert (simulated.timeout_s, simulated.recovery_timeout_s) == (
        int(wait["timeout"].removesuffix("m")) * 60,
        int(wait["recoveryTimeout"].removesuffix("m")) * 60,
    )
    assert (simulated.block_admission, simulated.requeuing_timestamp) == (True, strategy["timestamp"])
    assert (simulated.backoff_base_s, simulated.backoff_max_s, simulated.backoff_limit_count) == (
        strategy["backoffBaseSeconds"],
        strategy["backoffMaxSeconds"],
        strategy["backoffLimitCount"],
    )
    assert wait["blockAdmission"] is True
    minutes = int(wait["timeout"].removesuffix("m"))
    probe = nccl_probe(["a", "b"], gpus_per_node=8, repeat=0, run_key="k")
    # a half-placed pair gives its GPUs back long before the probe's own deadline
    assert minutes * 60 < probe.timeout_s


@pytest.mark.postgres
def test_the_shipped_kueue_objects_are_valid_and_admit_a_probe_gang(sim_kube: Any) -> None:
    """Applied to the simulated cluster, which validates them against Kueue's CRDs (422 otherwise),
    in place of the placeholder queues it starts with; then an NCCL pair is admitted through them."""
    kube = sim_kube()
    custom = kube.custom
    group, version = "kueue.x-k8s.io", "v1beta2"
    docs = _docs("kueue.yaml")
    assert {d["apiVersion"] for d in docs} == {f"{group}/{version}"}
    plural = {
        "ResourceFlavor": "resourceflavors",
        "ClusterQueue": "clusterqueues",
        "LocalQueue": "localqueues",
    }
    for doc in reversed(docs):  # the placeholders go, dependents first
        meta = doc["metadata"]
        if "namespace" in meta:
            custom.delete_namespaced_custom_object(
                group, version, meta["namespace"], plural[doc["kind"]], meta["name"]
            )
        else:
            custom.delete_cluster_custom_object(group, version, plural[doc["kind"]], meta["name"])
    broken = yaml.safe_load(yaml.safe_dump(docs[1]))
    broken["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = ["48"]
    with pytest.raises(ApiException) as refused:
        custom.create_cluster_custom_object(group, version, "clusterqueues", broken)
    assert refused.value.status == 422
    for doc in docs:
        meta = doc["metadata"]
        if "namespace" in meta:
            custom.create_namespaced_custom_object(
                group, version, meta["namespace"], plural[doc["kind"]], doc
            )
        else:
            custom.create_cluster_custom_object(group, version, plural[doc["kind"]], doc)
    [local] = [d for d in docs if d["kind"] == "LocalQueue"]
    assert local["metadata"]["name"] == DEFAULT_QUEUE == DEFAULT_KUEUE_QUEUE
    assert local["metadata"]["namespace"] == NAMESPACE

    job = mpijob_manifest(nccl_probe(["r01-n01", "r02-n01"], gpus_per_node=8, repeat=0, run_key="t"))
    custom.create_namespaced_custom_object("kubeflow.org", "v2beta1", NAMESPACE, "mpijobs", job)
    for _ in range(200):
        got = custom.get_namespaced_custom_object(
            "kubeflow.org", "v2beta1", NAMESPACE, "mpijobs", job["metadata"]["name"]
        )
        if not got["spec"]["runPolicy"].get("suspend"):
            break
        time.sleep(0.05)
    assert got["spec"]["runPolicy"].get("suspend") is False, "Kueue never admitted the gang"
