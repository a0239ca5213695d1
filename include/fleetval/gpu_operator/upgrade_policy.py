"""D-OP-04: a driver rollout as observed, against the upgrade policy in force. Pure.

The GPU Operator's upgrade controller walks each node through states in the
`nvidia.com/gpu-driver-upgrade-state` label (`upgrade-required` → `cordon-required` →
`wait-for-jobs-required` → `pod-deletion-required` → [`drain-required`] → `pod-restart-required`
→ `validation-required` → `uncordon-required` → `upgrade-done`, or `upgrade-failed`). The policy
is `spec.driver.upgradePolicy` of the ClusterPolicy, or, with `spec.driver.useNvidiaDriverCRD`,
the NVIDIADriver's `spec.upgradePolicy`. Checked against a series of snapshots (the nodes' state
labels, cordons and running GPU pods):

- `autoUpgrade: false` — no node moves from one state to another;
- `maxParallelUpgrades` (0: no limit) — never more nodes between `cordon-required` and
  `uncordon-required` at once;
- `maxUnavailable` (a count or a percentage of the managed nodes, rounded up) — never more managed
  nodes cordoned at once;
- `podDeletion` / `drain` — no GPU pod still runs on a node once its driver restarts
  (`pod-restart-required` and later): the job would die with the driver, not be evicted;
- `waitForCompletion` (`podSelector`, `timeoutSeconds`; 0: wait for ever) — a node leaves
  `wait-for-jobs-required` only once its matching pods ended or the timeout passed.

A snapshot series is a lower bound: a violation shorter than the sampling interval can be missed
(the verdict says the interval). No rollout seen at all is no evidence: `inconclusive`.

A halt erases the evidence: with `autoUpgrade: false` (or no ClusterPolicy, or sandbox workloads)
the operator's upgrade controller does not pause in place, it deletes the state label from every
node, one patch per node, and leaves the cordons (NVIDIA/gpu-operator v26.7.0,
`controllers/upgrade_controller.go`: `reconcileClusterPolicyDriverUpgrades` →
`removeNodeUpgradeStateLabels`; per NVIDIADriver, `removeNodeUpgradeStateLabelsForNVD`). It removes
the label nowhere else, so a label that disappears marks the halt: from that snapshot on nothing is
judged against the policy (a snapshot taken mid-cleanup would otherwise shrink the managed count
under `maxUnavailable`), and a rollout halted before it ended is `inconclusive` naming the nodes it
left mid-upgrade and cordoned — not a pass. A breach seen before the halt still fails. On resume,
k8s-operator-libs (`pkg/upgrade/common_manager.go` `ProcessDoneOrUnknownNodes`, commit 11e747a5)
treats an unlabelled out-of-sync node that is cordoned as cordoned by someone else: it annotates
`nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable` and never uncordons it, so the
verdict's action says to uncordon those nodes before resuming.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.k8s.selectors import SelectorError, parse_label_selector
from fleetval.records import Result, Verdict

CRITERION: Final = "D-OP-04"
RULE_ID: Final = "operator-upgrade-policy-v1"
SUBJECT: Final = "driver-rollout"
STATE_LABEL: Final = "nvidia.com/gpu-driver-upgrade-state"
ORDER: Final = (
    "upgrade-required",
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
    "pod-restart-required",
    "validation-required",
    "uncordon-required",
    "upgrade-done",
)
UPGRADING: Final = frozenset(ORDER[1:8])
DRIVER_RESTARTED: Final = frozenset(("pod-restart-required", "validation-required", "uncordon-required"))
ACTIONS: Final = {
    Result.PASS: "none",
    Result.FAIL: "pause the rollout (autoUpgrade=false); fix the named field",
    Result.INCONCLUSIVE: "observe during a rollout",
}
HALTED_ACTION: Final = (
    "uncordon the nodes the halted rollout left cordoned (else the operator keeps them cordoned on "
    "resume), then resume (autoUpgrade=true) and observe the rest of the rollout"
)


@dataclass(frozen=True, slots=True)
class NodeState:
    state: str  # "" when the node carries no state label
    unschedulable: bool = False
    gpu_pods: tuple[dict[str, Any], ...] = ()  # {"name": "ns/name", "labels": {...}} of running GPU pods

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "unschedulable": self.unschedulable, "gpu_pods": list(self.gpu_pods)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeState:
        return cls(
            str(data.get("state") or ""), bool(data.get("unschedulable")), tuple(data.get("gpu_pods") or ())
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    at: float  # seconds since the epoch
    nodes: dict[str, NodeState] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "nodes": {n: s.to_json() for n, s in self.nodes.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Snapshot:
        return cls(
            float(data["at"]), {n: NodeState.from_json(s) for n, s in (data.get("nodes") or {}).items()}
        )


def policy_in_force(
    cluster_policy: Mapping[str, Any] | None, nvidia_drivers: Sequence[Mapping[str, Any]]
) -> tuple[str, dict[str, Any]]:
    """(where the policy comes from, the upgradePolicy) — the NVIDIADriver's (the oldest, as the
    operator acts on it) when the ClusterPolicy delegates to NVIDIADriver objects."""
    driver = ((cluster_policy or {}).get("spec") or {}).get("driver") or {}
    if driver.get("useNvidiaDriverCRD") and nvidia_drivers:
        oldest = min(
            nvidia_drivers, key=lambda d: str((d.get("metadata") or {}).get("creationTimestamp", ""))
        )
        name = (oldest.get("metadata") or {}).get("name")
        return f"NVIDIADriver/{name}", {
            "autoUpgrade": True,
            **((oldest.get("spec") or {}).get("upgradePolicy") or {}),
        }
    name = ((cluster_policy or {}).get("metadata") or {}).get("name")
    return f"ClusterPolicy/{name}", dict(driver.get("upgradePolicy") or {})


def scaled(value: Any, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent, rounding up (the operator's reading of maxUnavailable)."""
    text = str(value if value is not None else "25%")
    if text.endswith("%") and text[:-1].isascii() and text[:-1].isdigit():
        return math.ceil(total * int(text[:-1]) / 100)
    return int(text) if text.isascii() and text.isdigit() else total  # '²'.isdigit() is True


def _labels_removed(before: Snapshot, after: Snapshot) -> bool:
    """Whether a node that carried the state label carries none now (the halt's cleanup)."""
    return any(
        not st.state and (prior := before.nodes.get(n)) is not None and prior.state
        for n, st in after.nodes.items()
    )


def judge_rollout(
    policy_source: str, policy: Mapping[str, Any], snapshots: Sequence[Snapshot], *, interval_s: float
) -> Verdict:
    judged_against = {
        "rule_id": RULE_ID,
        "policy": policy_source,
        "upgradePolicy": dict(policy),
        "interval_s": interval_s,
    }
    facts: dict[str, Any] = {"snapshots": len(snapshots)}

    def verdict(result: Result, reason: str, action: str = "") -> Verdict:
        return Verdict(
            CRITERION, SUBJECT, result, action or ACTIONS[result], RULE_ID, reason, facts, judged_against
        )

    seen = {
        n
        for s in snapshots
        for n, st in s.nodes.items()
        if st.state in UPGRADING or st.state == "upgrade-required"
    }
    if not seen:
        return verdict(
            Result.INCONCLUSIVE, f"no node was upgrading in {len(snapshots)} snapshot(s): nothing to compare"
        )
    facts["nodes_seen_upgrading"] = sorted(seen)
    problems: list[str] = []
    auto = policy.get("autoUpgrade", True) is not False
    parallel = int(policy.get("maxParallelUpgrades", 1) or 0)
    wait = policy.get("waitForCompletion") or {}
    try:
        wait_selector = (
            parse_label_selector(str(wait.get("podSelector") or "")) if wait.get("podSelector") else None
        )
    except SelectorError:
        wait_selector = None
        problems.append(f"waitForCompletion.podSelector {wait.get('podSelector')!r} is not a label selector")
    wait_timeout = float(wait.get("timeoutSeconds") or 0)
    most_upgrading, most_cordoned = 0, 0
    entered_wait: dict[str, float] = {}
    halt: tuple[Snapshot, Snapshot] | None = None
    for before, after in zip([None, *snapshots], snapshots, strict=False):
        if before is not None and _labels_removed(before, after):
            halt = (before, after)
            break
        managed = [n for n, st in after.nodes.items() if st.state]
        upgrading = sorted(n for n, st in after.nodes.items() if st.state in UPGRADING)
        cordoned = sorted(n for n in managed if after.nodes[n].unschedulable)
        most_upgrading, most_cordoned = max(most_upgrading, len(upgrading)), max(most_cordoned, len(cordoned))
        if parallel and len(upgrading) > parallel:
            problems.append(
                f"maxParallelUpgrades={parallel}: {len(upgrading)} nodes upgrading at once "
                f"({', '.join(upgrading)})"
            )
        limit = scaled(policy.get("maxUnavailable"), len(managed))
        if len(cordoned) > limit:
            problems.append(
                f"maxUnavailable={policy.get('maxUnavailable', '25%')} ({limit} of {len(managed)}): "
                f"{len(cordoned)} cordoned at once ({', '.join(cordoned)})"
            )
        for node, st in after.nodes.items():
            prior = before.nodes.get(node) if before is not None else None
            if st.state == "wait-for-jobs-required" and (prior is None or prior.state != st.state):
                entered_wait[node] = after.at
            if st.state in DRIVER_RESTARTED and st.gpu_pods:
                names = ", ".join(sorted(str(p.get("name")) for p in st.gpu_pods))
                problems.append(f"podDeletion: GPU pod(s) {names} still running on {node} in {st.state}")
            if prior is None or not prior.state or prior.state == st.state:
                continue
            if not auto and st.state in ORDER and prior.state in ORDER:
                problems.append(f"autoUpgrade=false: {node} moved {prior.state} → {st.state}")
            if prior.state == "wait-for-jobs-required" and wait_selector is not None:
                waited = after.at - entered_wait.get(node, after.at)
                matching = [p for p in prior.gpu_pods if wait_selector.matches(p.get("labels") or {})]
                if matching and (wait_timeout == 0 or waited < wait_timeout):
                    names = ", ".join(sorted(str(p.get("name")) for p in matching))
                    problems.append(
                        f"waitForCompletion: {node} left wait-for-jobs-required after {waited:.0f} s "
                        f"with {names} still running (timeoutSeconds={wait_timeout:.0f})"
                    )
    facts.update(most_upgrading_at_once=most_upgrading, most_cordoned_at_once=most_cordoned)
    if halt is not None:
        last, first_after = halt
        unfinished = {
            n: st.state
            for n, st in sorted(last.nodes.items())
            if st.state in UPGRADING | {"upgrade-required"}
        }
        cordoned = sorted(
            n
            for n, st in last.nodes.items()
            if st.state in UPGRADING and first_after.nodes.get(n, st).unschedulable
        )
        facts.update(halted_at=first_after.at, unfinished=unfinished, left_cordoned=cordoned)
    if problems:
        unique = list(dict.fromkeys(problems))
        facts["problems"] = unique
        more = f" (and {len(unique) - 3} more)" if len(unique) > 3 else ""
        return verdict(Result.FAIL, "; ".join(unique[:3]) + more)
    if halt is not None:
        named = ", ".join(f"{n} ({state})" for n, state in facts["unfinished"].items()) or "none"
        return verdict(
            Result.INCONCLUSIVE,
            f"rollout halted at t={halt[1].at - snapshots[0].at:g} s: the operator removed {STATE_LABEL} "
            f"(autoUpgrade=false, or its upgrade controller otherwise disabled); unfinished: {named}; "
            f"left cordoned: {', '.join(facts['left_cordoned']) or 'none'}; within {policy_source}'s "
            "policy until then",
            HALTED_ACTION,
        )
    return verdict(
        Result.PASS,
        f"{len(seen)} node(s) upgraded within {policy_source}'s policy: at most {most_upgrading} "
        f"upgrading and {most_cordoned} cordoned at once, no GPU pod running through a driver restart "
        f"(sampled every {interval_s:g} s)",
    )
