"""What a scenario run reads of the cluster first: a scenario the cluster cannot run meaningfully
is inconclusive with the reason, never failed."""

from __future__ import annotations

from typing import Any

from fleetval.kueue.cluster_facts import (
    ClusterFacts,
    KueueSettings,
    gpu_products,
    read_settings,
    why_not_meaningful,
    with_fleet_product,
)
from fleetval.kueue.judge import scenario_verdicts
from fleetval.kueue.suite import resolve
from fleetval.records import Result

# deploy/kueue-manager-config.yaml's form; fairSharing as Kueue's docs enable it (v1beta2: present = on)
CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
waitForPodsReady:
  timeout: 10m
  blockAdmission: true
"""


def facts(served: tuple[str, ...] | None = ("v1beta2", "v1beta1"), **settings: bool) -> ClusterFacts:
    return ClusterFacts(
        "v0.17.0", served, KueueSettings(read="yes", **settings), {"NVIDIA-H100-80GB-HBM3": 4}
    )


def test_the_live_configuration_is_read() -> None:
    plain = read_settings({"data": {"controller_manager_config.yaml": CONFIG}})
    assert (plain.read, plain.wait_for_pods_ready, plain.block_admission, plain.fair_sharing) == (
        "yes",
        True,
        True,
        False,
    )
    fair = read_settings({"data": {"controller_manager_config.yaml": CONFIG + "fairSharing: {}\n"}})
    assert fair.fair_sharing
    v1beta1_off = read_settings(
        {"data": {"controller_manager_config.yaml": "fairSharing: {enable: false}\n"}}
    )
    assert not v1beta1_off.fair_sharing
    assert read_settings({"data": {"controller_manager_config.yaml": ": ["}}).read.startswith(
        "controller_manager_config.yaml is not YAML"
    )
    assert read_settings(None, "no ConfigMap kueue-system/kueue-manager-config").read == (
        "no ConfigMap kueue-system/kueue-manager-config"
    )


def test_what_makes_a_scenario_inconclusive() -> None:
    preempting = resolve("d-sched-05-preempt-resume")
    assert why_not_meaningful(preempting, facts()) == ""
    assert "fair sharing is on" in why_not_meaningful(preempting, facts(fair_sharing=True))
    assert why_not_meaningful(resolve("d-sched-01-02-quota"), facts(fair_sharing=True)) == ""
    assert why_not_meaningful(preempting, facts(("v1beta1",))) == (
        "Kueue v0.17.0 serves kueue.x-k8s.io v1beta1: the scenarios are written in v1beta2 (v0.15 or later)"
    )
    assert "Kueue is not installed" in why_not_meaningful(preempting, facts(None))
    flavors = resolve("x-07-two-flavors")
    no_gfd = ClusterFacts("v0.17.0", ("v1beta2",), KueueSettings(read="yes"), {})
    assert "nvidia.com/gpu.product" in why_not_meaningful(flavors, no_gfd)

    verdicts = scenario_verdicts(
        preempting, [], kueue_version="v0.17.0", mode=None, inconclusive="fair sharing is on"
    )
    assert [(v.result, v.reason) for v in verdicts] == [(Result.INCONCLUSIVE, "not run: fair sharing is on")]


def test_the_fleet_product_goes_where_the_scenario_names_it() -> None:
    products = gpu_products(
        [
            {"nvidia.com/gpu.product": "NVIDIA-H200"},
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            {"nvidia.com/gpu.product": "NVIDIA-H200"},
            {},
        ]
    )
    assert products == {"NVIDIA-H200": 2, "NVIDIA-H100-80GB-HBM3": 1}
    chosen = ClusterFacts("v0.17.0", ("v1beta2",), KueueSettings(read="yes"), products).fleet_gpu_product
    assert chosen == "NVIDIA-H200"
    flavor = {"spec": {"nodeLabels": {"nvidia.com/gpu.product": "<fleet-gpu-product>"}}}
    assert with_fleet_product(flavor, "NVIDIA-H200") == {
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H200"}}
    }


def settings_of(extra: str) -> Any:
    return read_settings({"data": {"controller_manager_config.yaml": CONFIG + extra}})


POD_INTEGRATION = "integrations:\n  frameworks: [batch/job, kubeflow.org/mpijob, pod]\n"


def test_kueue_managing_fleetvals_own_namespace_is_a_finding() -> None:
    from fleetval.kueue.cluster_facts import own_namespace_findings

    managing = settings_of("manageJobsWithoutQueueName: true\n" + POD_INTEGRATION)
    assert managing.manage_jobs_without_queue_name and "pod" in managing.frameworks
    # The default selector (unset: all but kube-system and kueue-system) selects fleetval.
    [finding] = own_namespace_findings(managing, {}, "v0.17.8")
    assert finding.startswith("Kueue manages namespace fleetval: manageJobsWithoutQueueName is true, the pod")
    assert "fleetval.io/kueue-managed=false" in finding
    on_cluster = ClusterFacts("v0.17.8", ("v1beta2",), managing, {}, {"team": "x"})
    assert on_cluster.to_json()["findings"] == [finding]
    # Not managing without a queue name, or no pod-based integration, or the namespace not read: none.
    assert own_namespace_findings(settings_of(POD_INTEGRATION), {}, "v0.17.8") == []
    assert own_namespace_findings(settings_of("manageJobsWithoutQueueName: true\n"), {}, "v0.17.8") == []
    assert own_namespace_findings(managing, None, "v0.17.8") == []
    # Excluded by the shipped label and expression: no gating, but Kueue v0.15+ then ignores the
    # queue-named MPIJobs there too, which is the other finding.
    excluding = settings_of(
        "manageJobsWithoutQueueName: true\n"
        + POD_INTEGRATION
        + "managedJobsNamespaceSelector:\n  matchExpressions:\n"
        + "    - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, kueue-system]}\n"
        + '    - {key: fleetval.io/kueue-managed, operator: NotIn, values: ["false"]}\n'
    )
    [mpijobs] = own_namespace_findings(excluding, {"fleetval.io/kueue-managed": "false"}, "v0.17.8")
    assert mpijobs.startswith("managedJobsNamespaceSelector") and "never admitted" in mpijobs
    assert "unless its feature gate is off" in mpijobs
    assert own_namespace_findings(excluding, {"fleetval.io/kueue-managed": "false"}, "v0.14.2") == []
    assert own_namespace_findings(excluding, {}, "v0.17.8") != []  # unlabelled: gated again
