"""What a scenario run reads of the cluster before it creates anything, and whether the scenario
can run meaningfully there.

A scenario's expectations hold on Kueue as configured by default; a cluster can differ in ways
that make an expectation wrong rather than Kueue: a Kueue too old to serve the v1beta2 API the
scenarios are written in, fair sharing (which picks other victims and gives other preemption
reasons), a fleet without the GPU product a flavor must name. Such a scenario is `inconclusive`
with the reason, never `fail`. Everything read is kept in the run record.

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

from fleetval.kueue.api import GROUP, VERSION

GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"  # GPU Feature Discovery
FLEET_GPU_PRODUCT: Final = "<fleet-gpu-product>"
KUEUE_CONFIG_MAP: Final = "kueue-manager-config"
KUEUE_CONFIG_KEY: Final = "controller_manager_config.yaml"
MINIMUM_KUEUE: Final = "v0.15"  # the first release serving kueue.x-k8s.io/v1beta2


@dataclass(frozen=True, slots=True)
class KueueSettings:
    """The parts of Kueue's Configuration that change what the scenarios expect."""

    read: str  # "yes", or why not (no ConfigMap, not allowed, unreadable)
    fair_sharing: bool = False
    admission_fair_sharing: bool = False
    wait_for_pods_ready: bool = False
    block_admission: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "fair_sharing": self.fair_sharing,
            "admission_fair_sharing": self.admission_fair_sharing,
            "wait_for_pods_ready": self.wait_for_pods_ready,
            "block_admission": self.block_admission,
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
    return KueueSettings(
        read="yes",
        # v1beta1 has fairSharing.enable; in v1beta2 the section being there turns it on
        fair_sharing=isinstance(config.get("fairSharing"), dict) and bool(fair.get("enable", True)),
        admission_fair_sharing=isinstance(config.get("admissionFairSharing"), dict),
        wait_for_pods_ready=ready is not None and bool(ready.get("enable", True)),
        block_admission=ready is not None and bool(ready.get("blockAdmission", False)),
    )


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    kueue_version: str
    served: tuple[str, ...] | None  # kueue.x-k8s.io versions the API serves; None: no such group
    settings: KueueSettings
    gpu_products: Mapping[str, int] = field(default_factory=dict)  # product -> nodes

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
