"""Halting a GPU Operator driver rollout when the post-upgrade NCCL gate fails.

Mechanism (NVIDIA's GPU Operator documentation, driver upgrades, "Pausing Driver Upgrades"):
set `spec.driver.upgradePolicy.autoUpgrade` to `false` on the ClusterPolicy
(`nvidia.com/v1`, cluster-scoped). The whole upgrade state machine pauses; nodes not yet upgraded
stay on their driver; setting it back to `true` resumes. The nodes that failed carry
`fleetval.io/nccl-gate=fail` (set by the gate task on the `kubernetes_default` cluster). Resuming
is a human decision: fleetval never sets autoUpgrade back to true.

The gate task calls this whenever the gate fails, on every cluster: a cluster without the GPU
Operator's ClusterPolicy CRD fails the task (a rollout halt that could not be applied must not
pass silently); one with no ClusterPolicy object pauses nothing and says so (an empty list).

With `spec.driver.useNvidiaDriverCRD` the operator reads the upgrade policy from the NVIDIADriver
objects (`nvidia.com/v1alpha1`, cluster-scoped) and patching the ClusterPolicy does nothing: every
NVIDIADriver gets `spec.upgradePolicy.autoUpgrade=false` instead.

`dry_run=True` sends the same patch with the API server's `dryRun=All`: RBAC, admission and the
object are checked, nothing is persisted.
"""

from __future__ import annotations

from typing import Any, Final

GROUP: Final = "nvidia.com"
VERSION: Final = "v1"
PLURAL: Final = "clusterpolicies"
PAUSE_PATCH: Final = {"spec": {"driver": {"upgradePolicy": {"autoUpgrade": False}}}}
DRIVER_VERSION: Final = "v1alpha1"
DRIVER_PLURAL: Final = "nvidiadrivers"
DRIVER_PAUSE_PATCH: Final = {"spec": {"upgradePolicy": {"autoUpgrade": False}}}
FIELD_MANAGER: Final = "fleetval"


def pause_driver_upgrades(custom: Any, *, dry_run: bool, name: str | None = None) -> list[dict[str, Any]]:
    """Patch autoUpgrade=false on the ClusterPolicy `name` (default: every ClusterPolicy; there is
    normally one, `cluster-policy`). Returns what was (or, in dry-run, would be) changed."""
    if name is not None:
        names = [name]
    else:
        listed = custom.list_cluster_custom_object(group=GROUP, version=VERSION, plural=PLURAL)
        names = [item["metadata"]["name"] for item in listed.get("items", [])]
    changed: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER}
    if dry_run:
        kwargs["dry_run"] = "All"
    for policy in names:
        current = custom.get_cluster_custom_object(group=GROUP, version=VERSION, plural=PLURAL, name=policy)
        driver = (current.get("spec") or {}).get("driver") or {}
        if driver.get("useNvidiaDriverCRD"):
            changed.extend(_pause_nvidia_drivers(custom, kwargs, dry_run=dry_run))
            continue
        before = (driver.get("upgradePolicy") or {}).get("autoUpgrade")
        custom.patch_cluster_custom_object(
            group=GROUP, version=VERSION, plural=PLURAL, name=policy, body=PAUSE_PATCH, **kwargs
        )
        changed.append({"clusterpolicy": policy, "autoUpgrade_before": before, "dry_run": dry_run})
    return changed


def _pause_nvidia_drivers(custom: Any, kwargs: dict[str, Any], *, dry_run: bool) -> list[dict[str, Any]]:
    listed = custom.list_cluster_custom_object(group=GROUP, version=DRIVER_VERSION, plural=DRIVER_PLURAL)
    changed: list[dict[str, Any]] = []
    for item in listed.get("items", []):
        name = item["metadata"]["name"]
        before = ((item.get("spec") or {}).get("upgradePolicy") or {}).get("autoUpgrade", True)
        custom.patch_cluster_custom_object(
            group=GROUP,
            version=DRIVER_VERSION,
            plural=DRIVER_PLURAL,
            name=name,
            body=DRIVER_PAUSE_PATCH,
            **kwargs,
        )
        changed.append({"nvidiadriver": name, "autoUpgrade_before": before, "dry_run": dry_run})
    return changed
