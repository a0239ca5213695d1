"""What a scenario run reads of the cluster before it creates anything, and whether the scenario
can run meaningfully there.

A scenario's expectations hold on Kueue as configured by default; a cluster can differ in ways
that make an expectation wrong rather than Kueue: a Kueue too old to serve the v1beta2 API the
scenarios are written in, fair sharing (which picks other victims and gives other preemption
reasons), a fleet without the GPU product a flavor must name. Such a scenario is `inconclusive`
with the reason, never `fail`. Everything read is kept in the run record.

The reader also says when the live Kueue configuration would manage fleetval's own namespace
(`own_namespace_findings`), facts of Kueue v0.17 (`apis/config/v1beta2/configuration_types.go`,
`defaults.go`, `pkg/controller/jobs/pod/pod_webhook.go`, `pkg/features/kube_features.go`):
with `manageJobsWithoutQueueName: true`, a pod-based integration on (`pod`, `deployment`,
`statefulset`, ...) and `managedJobsNamespaceSelector` selecting the namespace (unset: everything
but kube-system and Kueue's own namespace), Kueue's pod webhook gates every probe pod there and none
starts. Excluding the namespace is the cure, but the same selector, since v0.15
(`ManagedJobsNamespaceSelectorAlwaysRespected`, Beta on by default; GA and locked on in v0.19), also
stops Kueue reconciling queue-named jobs there: fleetval's MPIJobs, created suspended, would never
be admitted. Both are findings.

Scenario objects may write `<fleet-gpu-product>` where a real GPU product label value belongs
(a ResourceFlavor's `nodeLabels`): the run puts the fleet's most common `nvidia.com/gpu.product`
there.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from fleetval.k8s.selectors import LabelSelector, Operator, Requirement
from fleetval.kueue.api import GROUP, VERSION

GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"  # GPU Feature Discovery
FLEET_GPU_PRODUCT: Final = "<fleet-gpu-product>"
KUEUE_CONFIG_MAP: Final = "kueue-manager-config"
KUEUE_CONFIG_KEY: Final = "controller_manager_config.yaml"
MINIMUM_KUEUE: Final = "v0.15"  # the first release serving kueue.x-k8s.io/v1beta2
OWN_NAMESPACE: Final = "fleetval"  # fleetval.probes.pod.NAMESPACE (no Kubernetes client import here)
EXEMPT_LABEL: Final = "fleetval.io/kueue-managed"  # "false" on the namespace: deploy/rbac.yaml
# Integrations whose objects are pods, deployments...: the pod webhook's strong exemption.
POD_BASED: Final = frozenset(("pod", "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset"))
MPIJOB_FRAMEWORK: Final = "kubeflow.org/mpijob"
_SELECTOR_OPERATORS: Final = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}


@dataclass(frozen=True, slots=True)
class KueueSettings:
    """The parts of Kueue's Configuration that change what the scenarios expect."""

    read: str  # "yes", or why not (no ConfigMap, not allowed, unreadable)
    fair_sharing: bool = False
    admission_fair_sharing: bool = False
    wait_for_pods_ready: bool = False
    block_admission: bool = False
    manage_jobs_without_queue_name: bool = False
    # As configured; None: Kueue's default (kubernetes.io/metadata.name NotIn kube-system, its namespace)
    managed_jobs_namespace_selector: dict[str, Any] | None = None
    frameworks: tuple[str, ...] = ("batch/job",)
    kueue_namespace: str = "kueue-system"

    def to_json(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "fair_sharing": self.fair_sharing,
            "admission_fair_sharing": self.admission_fair_sharing,
            "wait_for_pods_ready": self.wait_for_pods_ready,
            "block_admission": self.block_admission,
            "manage_jobs_without_queue_name": self.manage_jobs_without_queue_name,
            "managed_jobs_namespace_selector": self.namespace_selector(),
            "frameworks": list(self.frameworks),
        }

    def namespace_selector(self) -> dict[str, Any]:
        """managedJobsNamespaceSelector after Kueue's defaulting (v1beta2 `defaults.go`)."""
        if self.managed_jobs_namespace_selector is not None:
            return self.managed_jobs_namespace_selector
        return {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system", self.kueue_namespace],
                }
            ]
        }


def read_settings(config_map: Mapping[str, Any] | None, why_not: str = "") -> KueueSettings:
    """Kueue's settings from its ConfigMap's data (None: not read, `why_not` says why)."""
    if config_map is None:
        return KueueSettings(read=why_not or "not read")
    text = (config_map.get("data") or {}).get(KUEUE_CONFIG_KEY)
    if not isinstance(text, str):
        return KueueSettings(read=f"the ConfigMap has no {KUEUE_CONFIG_KEY}")
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return KueueSettings(read=f"{KUEUE_CONFIG_KEY} is not YAML: {str(exc).splitlines()[0]}")
    if not isinstance(config, dict):
        return KueueSettings(read=f"{KUEUE_CONFIG_KEY} is not a mapping")
    fair: dict[str, Any] = config["fairSharing"] if isinstance(config.get("fairSharing"), dict) else {}
    ready = config.get("waitForPodsReady") if isinstance(config.get("waitForPodsReady"), dict) else None
    integrations: dict[str, Any] = (
        config["integrations"] if isinstance(config.get("integrations"), dict) else {}
    )
    frameworks = integrations.get("frameworks")
    selector = config.get("managedJobsNamespaceSelector")
    return KueueSettings(
        read="yes",
        manage_jobs_without_queue_name=config.get("manageJobsWithoutQueueName") is True,
        managed_jobs_namespace_selector=dict(selector) if isinstance(selector, dict) else None,
        frameworks=tuple(str(f) for f in frameworks) if isinstance(frameworks, list) else ("batch/job",),
        kueue_namespace=str(config.get("namespace") or "kueue-system"),
        # v1beta1 has fairSharing.enable; in v1beta2 the section being there turns it on
        fair_sharing=isinstance(config.get("fairSharing"), dict) and bool(fair.get("enable", True)),
        admission_fair_sharing=isinstance(config.get("admissionFairSharing"), dict),
        wait_for_pods_ready=ready is not None and bool(ready.get("enable", True)),
        block_admission=ready is not None and bool(ready.get("blockAdmission", False)),
    )


def _selector(raw: Mapping[str, Any]) -> LabelSelector | None:
    """metav1.LabelSelectorAsSelector (None: an invalid selector, which Kueue refuses at start)."""
    requirements = [
        Requirement(str(k), Operator.EQUALS, (str(v),)) for k, v in (raw.get("matchLabels") or {}).items()
    ]
    for expression in raw.get("matchExpressions") or []:
        operator = _SELECTOR_OPERATORS.get(str(expression.get("operator")))
        if operator is None:
            return None
        values = tuple(str(v) for v in expression.get("values") or ())
        requirements.append(Requirement(str(expression.get("key", "")), operator, values))
    return LabelSelector(tuple(requirements))


def _release(version: str) -> tuple[int, int] | None:
    parts = version.lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def own_namespace_findings(
    settings: KueueSettings,
    namespace_labels: Mapping[str, str] | None,
    kueue_version: str,
    namespace: str = OWN_NAMESPACE,
) -> list[str]:
    """What the live Kueue configuration does to fleetval's own namespace: its pods gated (managed
    without a queue name), or its queue-named MPIJobs never admitted (excluded while Kueue respects
    the selector for every job). Empty when neither, or when the configuration or the namespace
    could not be read."""
    if settings.read != "yes" or namespace_labels is None:
        return []
    selector = _selector(settings.namespace_selector())
    labels = {**namespace_labels, "kubernetes.io/metadata.name": namespace}
    selected = selector is not None and selector.matches(labels)
    shown = json.dumps(settings.namespace_selector(), sort_keys=True)
    findings = []
    pod_based = sorted(POD_BASED & set(settings.frameworks))
    if settings.manage_jobs_without_queue_name and selected and pod_based:
        findings.append(
            f"Kueue manages namespace {namespace}: manageJobsWithoutQueueName is true, the "
            f"{', '.join(pod_based)} integration is on and managedJobsNamespaceSelector {shown} selects "
            f"the namespace, so Kueue gates every probe and worker pod there (kueue.x-k8s.io/admission "
            f"scheduling gate) and none starts: label the namespace {EXEMPT_LABEL}=false and merge the "
            "selector expression of deploy/kueue-manager-config.yaml into the site's configuration"
        )
    release = _release(kueue_version)
    always = release is None or release >= (0, 15)
    if not selected and always and MPIJOB_FRAMEWORK in settings.frameworks:
        when = "is" if release is None or release >= (0, 19) else "is, unless its feature gate is off,"
        findings.append(
            f"managedJobsNamespaceSelector {shown} excludes namespace {namespace} and Kueue "
            f"{kueue_version} {when} respecting it for every job "
            "(ManagedJobsNamespaceSelectorAlwaysRespected: on by default since v0.15, locked on since "
            "v0.19): fleetval's MPIJobs there, created "
            "suspended with a queue name, are never admitted and the multi-node NCCL probes time out"
        )
    return findings


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    kueue_version: str
    served: tuple[str, ...] | None  # kueue.x-k8s.io versions the API serves; None: no such group
    settings: KueueSettings
    gpu_products: Mapping[str, int] = field(default_factory=dict)  # product -> nodes
    own_namespace_labels: Mapping[str, str] | None = None  # fleetval's namespace; None: not read

    @property
    def findings(self) -> list[str]:
        return own_namespace_findings(self.settings, self.own_namespace_labels, self.kueue_version)

    @property
    def fleet_gpu_product(self) -> str | None:
        if not self.gpu_products:
            return None
        return sorted(self.gpu_products.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]

    def to_json(self) -> dict[str, Any]:
        return {
            "kueue_version": self.kueue_version,
            "served_versions": list(self.served) if self.served is not None else None,
            "settings": self.settings.to_json(),
            "gpu_products": dict(self.gpu_products),
            "findings": self.findings,
        }


def gpu_products(node_labels: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    return dict(
        Counter(str(labels[GPU_PRODUCT_LABEL]) for labels in node_labels if labels.get(GPU_PRODUCT_LABEL))
    )


def uses_fleet_product(objects: Any) -> bool:
    return FLEET_GPU_PRODUCT in json.dumps(objects)


def why_not_meaningful(scenario: Any, facts: ClusterFacts) -> str:
    """Why the scenario cannot be judged on this cluster, or "" when it can."""
    if facts.served is None:
        return f"the cluster serves no {GROUP} API: Kueue is not installed"
    if VERSION not in facts.served:
        return (
            f"Kueue {facts.kueue_version} serves {GROUP} {', '.join(facts.served)}: the scenarios are "
            f"written in {VERSION} ({MINIMUM_KUEUE} or later)"
        )
    preempts = any(s.expect is not None and "preempted_reason" in s.expect.checks for s in scenario.steps)
    if preempts and facts.settings.fair_sharing:
        return (
            "fair sharing is on in the cluster's Kueue configuration: it chooses other victims and "
            "gives other preemption reasons than this scenario expects (it assumes fair sharing off)"
        )
    if uses_fleet_product(scenario.objects) and facts.fleet_gpu_product is None:
        return (
            f"no node carries {GPU_PRODUCT_LABEL} (GPU Feature Discovery): the scenario's flavor "
            "names the fleet's GPU product"
        )
    return ""


def with_fleet_product(value: Any, product: str) -> Any:
    """`value` with every `<fleet-gpu-product>` string replaced by the fleet's product."""
    if isinstance(value, str):
        return product if value == FLEET_GPU_PRODUCT else value
    if isinstance(value, list):
        return [with_fleet_product(v, product) for v in value]
    if isinstance(value, dict):
        return {k: with_fleet_product(v, product) for k, v in value.items()}
    return value
