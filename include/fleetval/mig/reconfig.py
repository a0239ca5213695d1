"""D-GPU-MIG-01, -02, -05 and -06: what a node does when its MIG layout is changed through its
`nvidia.com/mig.config` label, judged from snapshots of the Node object (pure).

A snapshot is what the API said at one instant: the MIG manager's state label, the strategy, GFD's
labels and the device plugin's capacity and allocatable (`node_snapshot`). The judges read a series
of them taken from the moment the label was set:

- **D-GPU-MIG-01** (`judge_advertised_in_time`): the resources the layout makes (`expected_resources`:
  `nvidia.com/mig-<profile>` per profile with the mixed strategy, `nvidia.com/gpu` per MIG device
  with the single one) are in capacity and allocatable, with the state `success`, within the
  criterion's N minutes of the label. The time measured is the first snapshot where they are; it
  is stored with the verdict. A `failed` state for a layout the catalog allows fails.
- **D-GPU-MIG-02** (`judge_refused`): a layout the catalog refuses ends `failed` on the node's
  `nvidia.com/mig.config.state` label (the MIG manager writes no Event and no reason on the node;
  the catalog's reason is the verdict's), and the node still advertises what it did before. A
  `success`, or a node that never says `failed`, fails.
- **D-GPU-MIG-05** (`judge_sold_as_profile`, the node's share; Kueue quota is the x-06-mig-profiles
  scenario's): once a MIG layout is advertised, each instance is sold as its profile: with the
  mixed strategy as `nvidia.com/mig-<profile>` with GFD's `-MIG-<profile>` product; with the single
  strategy as `nvidia.com/gpu` whose product label is `<product>-MIG-<profile>`. An instance
  advertised as `nvidia.com/gpu` under the whole GPU's product is billed and queued as a whole GPU.
- **D-GPU-MIG-06** (`judge_busy_reconfig`): a layout change while a pod holds a MIG instance (with
  a CUDA context on it) is refused (`failed`) or waits (`pending`); the pod keeps running, its
  restart count unchanged. A pod gone, restarted or ended, or a `success` with it running, fails.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.criteria import get as criterion
from fleetval.records import Result, Verdict

CRITERION_ADVERTISE: Final = "D-GPU-MIG-01"
CRITERION_REFUSE: Final = "D-GPU-MIG-02"
CRITERION_BILLING: Final = "D-GPU-MIG-05"
CRITERION_BUSY: Final = "D-GPU-MIG-06"
RULE_ADVERTISE: Final = "mig-advertised-within-n-minutes-v1"
RULE_REFUSE: Final = "mig-refused-layout-failed-label-v1"
RULE_BILLING: Final = "mig-instance-sold-as-profile-v1"
RULE_BUSY: Final = "mig-reconfig-spares-running-work-v1"
CONFIG_LABEL: Final = "nvidia.com/mig.config"
STATE_LABEL: Final = "nvidia.com/mig.config.state"
STRATEGY_LABEL: Final = "nvidia.com/mig.strategy"
PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU: Final = "nvidia.com/gpu"
MIG_RESOURCE: Final = "nvidia.com/mig-"
ACTIONS: Final = {
    Result.PASS: "none",
    Result.FAIL: "fix the GPU Operator's MIG manager / device plugin config",
    Result.INCONCLUSIVE: "rerun mig_validation on this node; check its evidence",
    Result.ERROR: "fix the harness (the step did not run)",
}
_MIG_PRODUCT: Final = re.compile(r"-MIG-(\S+)$")


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """A Node's MIG state at one instant (seconds since the epoch)."""

    at: float
    labels: dict[str, str]
    capacity: dict[str, str]
    allocatable: dict[str, str]
    unschedulable: bool = False

    @property
    def state(self) -> str:
        return self.labels.get(STATE_LABEL, "")

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "labels": self.labels,
            "capacity": self.capacity,
            "allocatable": self.allocatable,
            "unschedulable": self.unschedulable,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeSnapshot:
        return cls(
            float(data["at"]),
            dict(data.get("labels") or {}),
            dict(data.get("capacity") or {}),
            dict(data.get("allocatable") or {}),
            bool(data.get("unschedulable")),
        )


def node_snapshot(node: Mapping[str, Any], at: float) -> NodeSnapshot:
    """What the judges read of a Node object (a dict as the API returns it)."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}

    def nvidia(values: Mapping[str, Any] | None) -> dict[str, str]:
        return {str(k): str(v) for k, v in (values or {}).items() if str(k).startswith("nvidia.com/")}

    return NodeSnapshot(
        at,
        nvidia(meta.get("labels")),
        nvidia(status.get("capacity")),
        nvidia(status.get("allocatable")),
        bool((node.get("spec") or {}).get("unschedulable")),
    )


def resource_of(profile: str) -> str:
    return MIG_RESOURCE + profile.replace("+", ".")


def expected_resources(layouts: Sequence[Mapping[str, int]], strategy: str) -> dict[str, int] | None:
    """What the device plugin advertises for a node whose GPUs hold `layouts`; None when the
    strategy cannot advertise it (single with different profiles, or MIG beside whole GPUs)."""
    counts: dict[str, int] = {}
    for layout in layouts:
        for profile, count in layout.items():
            if count:
                counts[profile] = counts.get(profile, 0) + count
    whole = sum(1 for layout in layouts if not any(layout.values()))
    if strategy == "mixed":
        return {GPU: whole, **{resource_of(p): c for p, c in sorted(counts.items())}}
    if not counts:
        return {GPU: whole}
    if len(counts) != 1 or whole:
        return None
    return {GPU: sum(counts.values())}


def _count(value: str | None) -> int | None:
    return int(value) if value is not None and value.isascii() and value.isdigit() else None


def advertises(snap: NodeSnapshot, expected: Mapping[str, int]) -> bool:
    """Capacity and allocatable hold exactly `expected` (other MIG resources at 0 or absent)."""
    for section in (snap.capacity, snap.allocatable):
        for key in {*expected, *(k for k in section if k.startswith(MIG_RESOURCE))}:
            if _count(section.get(key, "0")) != expected.get(key, 0):
                return False
    return True


def advertised(snap: NodeSnapshot) -> dict[str, str]:
    return {k: v for k, v in snap.allocatable.items() if k == GPU or k.startswith(MIG_RESOURCE)}


def _verdict(
    criterion: str,
    rule: str,
    subject: str,
    result: Result,
    reason: str,
    evidence: dict[str, Any],
    **judged_against: Any,
) -> Verdict:
    return Verdict(
        criterion,
        subject,
        result,
        ACTIONS[result],
        rule,
        reason,
        evidence,
        {"rule_id": rule, **judged_against},
    )


def _states(snapshots: Sequence[NodeSnapshot], t0: float) -> list[dict[str, Any]]:
    """The state label's changes, with seconds since the label was set."""
    seen: list[dict[str, Any]] = []
    for snap in snapshots:
        if not seen or seen[-1]["state"] != snap.state:
            seen.append({"s": round(snap.at - t0, 3), "state": snap.state})
    return seen


@dataclass(frozen=True, slots=True)
class Change:
    """One layout change fleetval made: the config asked for, when, and what the node said since."""

    node: str
    config: str
    requested_at: float
    snapshots: tuple[NodeSnapshot, ...]
    before: NodeSnapshot
    expected: dict[str, int] | None = None  # what it should advertise (None: cannot be known)
    refused_reasons: tuple[str, ...] = ()  # the catalog's, for a layout it refuses
    watch_s: float = 0.0

    def evidence(self) -> dict[str, Any]:
        last = self.snapshots[-1] if self.snapshots else self.before
        return {
            "config": self.config,
            "states": _states(self.snapshots, self.requested_at),
            "expected": self.expected,
            "before": advertised(self.before),
            "after": advertised(last),
            "watched_s": round(self.watch_s, 3),
        }


def judge_advertised_in_time(change: Change, *, max_s: float | None = None) -> Verdict:
    """D-GPU-MIG-01 for one layout change (`max_s` defaults to the criterion's N minutes)."""
    limit = (
        max_s if max_s is not None else 60.0 * float(criterion(CRITERION_ADVERTISE).parameters["max_minutes"])
    )
    c, r, node = CRITERION_ADVERTISE, RULE_ADVERTISE, change.node
    evidence = change.evidence()
    if change.expected is None:
        reason = f"{change.config}: the node's MIG strategy cannot advertise this layout; nothing to time"
        return _verdict(c, r, node, Result.INCONCLUSIVE, reason, evidence, max_s=limit)
    if not change.snapshots:
        return _verdict(
            c, r, node, Result.ERROR, "the node was never read after the change", evidence, max_s=limit
        )
    appeared = next(
        (s for s in change.snapshots if s.state == "success" and advertises(s, change.expected)), None
    )
    wanted = ", ".join(f"{k.removeprefix('nvidia.com/')}={v}" for k, v in change.expected.items())
    if appeared is not None:
        seconds = round(appeared.at - change.requested_at, 3)
        evidence["seconds"] = seconds
        if seconds <= limit:
            reason = (
                f"{change.config}: {wanted} advertised {seconds:.1f} s after the label (limit {limit:g} s)"
            )
            return _verdict(c, r, node, Result.PASS, reason, evidence, max_s=limit)
        reason = (
            f"{change.config}: {wanted} advertised only {seconds:.1f} s after the label (limit {limit:g} s)"
        )
        return _verdict(c, r, node, Result.FAIL, reason, evidence, max_s=limit)
    last = change.snapshots[-1]
    if last.state == "failed":
        reason = f"{change.config}: the MIG manager says failed for a layout the GPU can hold"
        return _verdict(c, r, node, Result.FAIL, reason, evidence, max_s=limit)
    got = ", ".join(f"{k.removeprefix('nvidia.com/')}={v}" for k, v in sorted(advertised(last).items()))
    reason = (
        f"{change.config}: {wanted} not advertised within {change.watch_s:.0f} s "
        f"(state {last.state or 'none'}; advertising {got or 'nothing'})"
    )
    result = Result.FAIL if change.watch_s >= limit else Result.INCONCLUSIVE
    return _verdict(c, r, node, result, reason, evidence, max_s=limit)


def judge_refused(change: Change) -> Verdict:
    """D-GPU-MIG-02 for a layout change the catalog refuses."""
    c, r, node = CRITERION_REFUSE, RULE_REFUSE, change.node
    evidence = {**change.evidence(), "catalog_reasons": list(change.refused_reasons)}
    why = "; ".join(change.refused_reasons) or "refused by the catalog"
    if not change.snapshots:
        return _verdict(c, r, node, Result.ERROR, "the node was never read after the change", evidence)
    states = [s.state for s in change.snapshots]
    last = change.snapshots[-1]
    if "failed" in states:
        failed = next(s for s in change.snapshots if s.state == "failed")
        if advertised(last) != advertised(change.before) and last.state == "failed":
            reason = (
                f"{change.config}: refused (state failed), but the node now advertises {advertised(last)}"
            )
            return _verdict(c, r, node, Result.FAIL, reason, evidence)
        reason = (
            f"{change.config} refused: {STATE_LABEL}=failed after {failed.at - change.requested_at:.1f} s, "
            f"the old instances kept; why: {why}"
        )
        return _verdict(c, r, node, Result.PASS, reason, evidence)
    if last.state == "success" and ("pending" in states or advertised(last) != advertised(change.before)):
        reason = f"{change.config} reported applied (state success) though the GPU cannot hold it: {why}"
        return _verdict(c, r, node, Result.FAIL, reason, evidence)
    reason = (
        f"{change.config}: never refused within {change.watch_s:.0f} s (state {last.state or 'none'}); "
        f"the node does not say the layout is impossible: {why}"
    )
    return _verdict(c, r, node, Result.FAIL, reason, evidence)


def judge_sold_as_profile(node: str, snap: NodeSnapshot, layouts: Sequence[Mapping[str, int]]) -> Verdict:
    """D-GPU-MIG-05 on a node holding a MIG layout, once it is advertised."""
    c, r = CRITERION_BILLING, RULE_BILLING
    counts: dict[str, int] = {}
    for layout in layouts:
        for profile, count in layout.items():
            if count:
                counts[profile] = counts.get(profile, 0) + count
    evidence = {"layout_counts": counts, **snap.to_json()}
    if not counts:
        return _verdict(
            c, r, node, Result.INCONCLUSIVE, "no MIG instance on the node: nothing sold", evidence
        )
    strategy = snap.labels.get(STRATEGY_LABEL, "")
    product = snap.labels.get(PRODUCT_LABEL, "")
    wrong = []
    if strategy == "mixed":
        for profile, count in sorted(counts.items()):
            resource = resource_of(profile)
            label = snap.labels.get(f"{resource}.product", "")
            if _count(snap.capacity.get(resource)) != count:
                wrong.append(f"{profile}: {resource} is {snap.capacity.get(resource, 'absent')}, not {count}")
            elif not label.endswith(f"-MIG-{profile}"):
                wrong.append(f"{profile}: its product label is {label or 'absent'}")
        if _count(snap.capacity.get(GPU, "0")) not in (None, sum(1 for x in layouts if not x)):
            wrong.append(
                f"{GPU} is {snap.capacity.get(GPU)} for {sum(1 for x in layouts if not x)} GPUs without MIG"
            )
    elif strategy == "single":
        m = _MIG_PRODUCT.search(product)
        if m is None or m.group(1) not in counts:
            wrong.append(
                f"{sum(counts.values())} MIG instances ({', '.join(counts)}) advertised as {GPU}="
                f"{snap.capacity.get(GPU)} under the whole GPU's product {product or 'none'}"
                f" and memory {snap.labels.get('nvidia.com/gpu.memory', '?')} MiB"
            )
    else:
        wrong.append(f"MIG strategy {strategy or 'absent'}: the node does not say how its instances are sold")
    if wrong:
        reason = "a MIG instance is sold as a whole GPU (quota and billing count it as one): " + "; ".join(
            wrong
        )
        return _verdict(c, r, node, Result.FAIL, reason, evidence)
    listed = ", ".join(f"{c}x {p}" for p, c in sorted(counts.items()))
    return _verdict(
        c, r, node, Result.PASS, f"each instance advertised as its profile ({strategy}: {listed})", evidence
    )


@dataclass(frozen=True, slots=True)
class PodSample:
    """A work pod at one instant: None phase when it is gone."""

    at: float
    phase: str | None
    restarts: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "phase": self.phase, "restarts": self.restarts}


@dataclass(frozen=True, slots=True)
class BusyChange:
    change: Change
    pod: str
    samples: tuple[PodSample, ...] = field(default_factory=tuple)


def judge_busy_reconfig(busy: BusyChange) -> Verdict:
    """D-GPU-MIG-06 for a layout change made while `busy.pod` held a MIG instance."""
    c, r = CRITERION_BUSY, RULE_BUSY
    change = busy.change
    node = change.node
    evidence = {**change.evidence(), "pod": busy.pod, "pod_samples": [s.to_json() for s in busy.samples]}
    if not busy.samples or busy.samples[0].phase != "Running":
        return _verdict(
            c, r, node, Result.INCONCLUSIVE, "the work pod was not running when the change began", evidence
        )
    first = busy.samples[0]
    hurt = next((s for s in busy.samples if s.phase != "Running" or s.restarts > first.restarts), None)
    states = [s.state for s in change.snapshots]
    if hurt is not None:
        what = (
            "deleted" if hurt.phase is None else (f"{hurt.phase}" if hurt.phase != "Running" else "restarted")
        )
        seen = " -> ".join(s for s in dict.fromkeys(states) if s)
        reason = (
            f"{change.config} while {busy.pod} ran: the work was {what} "
            f"{hurt.at - change.requested_at:.1f} s after the label (states {seen})"
        )
        return _verdict(c, r, node, Result.FAIL, reason, evidence)
    last = change.snapshots[-1] if change.snapshots else change.before
    if last.state == "success" and advertised(last) != advertised(change.before):
        reason = f"{change.config} applied (state success) under running work {busy.pod}"
        return _verdict(c, r, node, Result.FAIL, reason, evidence)
    if "failed" in states:
        reason = f"{change.config} refused while {busy.pod} ran ({STATE_LABEL}=failed); the work kept running"
        return _verdict(c, r, node, Result.PASS, reason, evidence)
    if last.state == "pending":
        reason = f"{change.config} waits (pending) while {busy.pod} runs; the work kept running"
        return _verdict(c, r, node, Result.PASS, reason, evidence)
    reason = (
        f"{change.config}: the MIG manager neither refused nor waited visibly (state {last.state or 'none'})"
    )
    return _verdict(c, r, node, Result.INCONCLUSIVE, reason, evidence)
