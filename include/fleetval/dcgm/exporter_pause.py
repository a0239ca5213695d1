"""Pause dcgm-exporter on the nodes under a DCGM diagnostic, and restore it after.

A diagnostic's host engine and a dcgm-exporter collecting profiling (DCP) metrics on the same GPUs
compete for DCGM's profiling module: the diagnostic then fails with DCGM_ST_PROFILING_MULTI_PASS or
DCGM_ST_IN_USE, a result that looks like a node fault and is not (`fleetval.dcgm.parser.PROFILING_BUSY`
makes it `inconclusive`). Pausing the exporter removes the cause. It is done the way the GPU
Operator's MIG manager does it for a reconfiguration: the operator's DaemonSets select nodes with
`nvidia.com/gpu.deploy.<operand>=true`, so any other value takes the exporter pod off the node
(mig-parted's reconfigure script writes `paused-for-mig-change` and restores the value it found).
fleetval writes `paused-for-fleetval-diag`, keeps the value it found in `fleetval.io/dcgm-exporter-was`
and the time in `fleetval.io/dcgm-exporter-paused-at`, so a pause a killed run left behind is
found and undone.

Safety: only nodes of the running wave (already within the diagnosis budget) are paused, never
more than `max_fleet_fraction` of the fleet at once, counting pauses still in place; a node whose
exporter is off (`false`), paused by someone else (`paused-for-mig-change`), or not managed by the
operator is left alone. In a dry run nothing is patched; the store records what would be done.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kubernetes.client.exceptions import ApiException

from fleetval.errors import FleetvalError

EXPORTER_DEPLOY_LABEL: Final = "nvidia.com/gpu.deploy.dcgm-exporter"
DEPLOYED: Final = "true"
PAUSED: Final = "paused-for-fleetval-diag"
WAS_LABEL: Final = "fleetval.io/dcgm-exporter-was"
PAUSED_AT_LABEL: Final = "fleetval.io/dcgm-exporter-paused-at"
# The exporter's pods, as the GPU Operator labels them (assets/state-dcgm-exporter: app=nvidia-dcgm-exporter).
EXPORTER_POD_SELECTOR: Final = "app=nvidia-dcgm-exporter"

PAUSE: Final = "pause"
KEEP: Final = "keep"  # already paused by fleetval (a retried task): counted, not patched again
SKIP: Final = "skip"


@dataclass(frozen=True, slots=True)
class PausePolicy:
    """How much dcgm-exporter fleetval may take off the fleet at once, and for how long."""

    id: str = "dcgm.exporter_pause.v1"
    max_fleet_fraction: float = 0.10  # the diagnosis budget's default share of the fleet
    wait_s: float = 120.0  # for the exporter pods to go before the diagnostic starts anyway
    stale_after_s: float = 6 * 3600.0  # a pause older than this was left by a run that died

    def cap(self, fleet_size: int) -> int:
        return max(1, math.floor(fleet_size * self.max_fleet_fraction))


@dataclass(frozen=True, slots=True)
class PauseDecision:
    node: str
    action: str  # PAUSE, KEEP or SKIP
    reason: str
    was: str = ""  # the deploy label's value before the pause


def plan_pause(
    wave: Sequence[tuple[str, Mapping[str, str]]],
    *,
    paused_elsewhere: int,
    fleet_size: int,
    policy: PausePolicy,
) -> list[PauseDecision]:
    """What to do with each wave node's exporter (wave: name and labels per node);
    `paused_elsewhere`: fleetval pauses in place on nodes outside the wave (they count against the cap)."""
    room = policy.cap(fleet_size) - paused_elsewhere
    decisions = []
    for name, labels in wave:
        value = labels.get(EXPORTER_DEPLOY_LABEL)
        if value == PAUSED:
            room -= 1
            decisions.append(PauseDecision(name, KEEP, "already paused by fleetval"))
        elif value is None:
            decisions.append(
                PauseDecision(name, SKIP, f"no {EXPORTER_DEPLOY_LABEL} label: no operator exporter")
            )
        elif value != DEPLOYED:
            decisions.append(PauseDecision(name, SKIP, f"exporter not deployed here ({value})", value))
        elif room <= 0:
            decisions.append(
                PauseDecision(
                    name,
                    SKIP,
                    f"pause budget spent: {policy.cap(fleet_size)} of {fleet_size} nodes "
                    f"({policy.max_fleet_fraction:.0%}) already without an exporter",
                    value,
                )
            )
        else:
            room -= 1
            decisions.append(PauseDecision(name, PAUSE, "profiling metrics would compete", value))
    return decisions


def pause_labels(was: str, now: float) -> dict[str, str | None]:
    return {EXPORTER_DEPLOY_LABEL: PAUSED, WAS_LABEL: was or DEPLOYED, PAUSED_AT_LABEL: str(int(now))}


def restore_labels(labels: Mapping[str, str]) -> dict[str, str | None] | None:
    """The patch that undoes fleetval's pause on a node with `labels`, or None when not paused by it.
    A deploy label someone changed since (not PAUSED) is theirs: only the bookkeeping goes."""
    if EXPORTER_DEPLOY_LABEL not in labels and WAS_LABEL not in labels:
        return None
    if labels.get(EXPORTER_DEPLOY_LABEL) != PAUSED:
        if WAS_LABEL not in labels and PAUSED_AT_LABEL not in labels:
            return None
        return {WAS_LABEL: None, PAUSED_AT_LABEL: None}
    return {EXPORTER_DEPLOY_LABEL: labels.get(WAS_LABEL) or DEPLOYED, WAS_LABEL: None, PAUSED_AT_LABEL: None}


def paused_at(labels: Mapping[str, str]) -> float | None:
    try:
        return float(labels[PAUSED_AT_LABEL])
    except (KeyError, ValueError):
        return None


def stale_pauses(paused: Mapping[str, Mapping[str, str]], *, now: float, policy: PausePolicy) -> list[str]:
    """Nodes (name → labels) paused by fleetval longer than a run can take: left by a run that died.
    A pause without a readable time is stale too (its run cannot be told)."""
    stale = []
    for node, labels in sorted(paused.items()):
        since = paused_at(labels)
        if since is None or now - since > policy.stale_after_s:
            stale.append(node)
    return stale


def still_running(exporter_nodes: Iterable[str], paused: Iterable[str]) -> list[str]:
    """The paused nodes that still have an exporter pod (the DaemonSet has not removed it yet)."""
    wanted = set(paused)
    return sorted(wanted.intersection(exporter_nodes))


# --- carrying it out --------------------------------------------------------------------------


class ExporterRestoreError(FleetvalError):
    """A paused exporter the API would not restore."""


class ExporterCluster(Protocol):
    """What pausing needs of the cluster (fleetval.k8s.cluster.KubeCluster)."""

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None: ...
    def labelled_nodes(self, label_key: str) -> dict[str, dict[str, str]]: ...
    def nodes_running_pods(self, label_selector: str) -> set[str]: ...


class EventLog(Protocol):
    """Where node operations are recorded (fleetval.store.repository.Store)."""

    def record_node_event(
        self,
        event_key: str,
        *,
        node: str,
        kind: str,
        reason: str,
        dry_run: bool,
        run_id: int | None = None,
        details: Mapping[str, Any] | None = None,
        at: dt.datetime | None = None,
    ) -> bool: ...


@dataclass(frozen=True, slots=True)
class PauseOutcome:
    paused: tuple[str, ...]  # the exporter is (or, in a dry run, would be) off these nodes
    skipped: Mapping[str, str]  # node → why its exporter was left alone
    still_running: tuple[str, ...]  # paused, but the exporter pod had not gone by policy.wait_s
    restored: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "paused": list(self.paused),
            "skipped": dict(self.skipped),
            "still_running": list(self.still_running),
            "restored": list(self.restored),
        }


def pause_exporters(
    nodes: Sequence[str],
    *,
    cluster: ExporterCluster,
    events: EventLog,
    run_id: int,
    run_key: str,
    fleet_size: int,
    policy: PausePolicy,
    dry_run: bool,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> PauseOutcome:
    """Pause the exporter on `nodes` (a wave) within the policy, record each pause, and wait (up to
    policy.wait_s) for the exporter pods to leave. Idempotent: a retry keeps what the first did.
    A node the API refuses to label is skipped with the reason: the diagnostic still runs, and a
    busy-profiling result is judged `inconclusive`."""
    in_wave = set(nodes)
    elsewhere = sum(1 for name in cluster.labelled_nodes(WAS_LABEL) if name not in in_wave)
    # One filtered list of the nodes with an operator-managed exporter, not a read per wave node.
    deployed = cluster.labelled_nodes(EXPORTER_DEPLOY_LABEL)
    wave = [(name, deployed.get(name, {})) for name in nodes]
    decisions = plan_pause(wave, paused_elsewhere=elsewhere, fleet_size=fleet_size, policy=policy)
    paused: list[str] = []
    skipped: dict[str, str] = {}
    at = dt.datetime.fromtimestamp(clock(), dt.UTC)
    for decision in decisions:
        if decision.action == SKIP:
            skipped[decision.node] = decision.reason
            continue
        if decision.action == PAUSE and not dry_run:
            try:
                cluster.set_labels(decision.node, pause_labels(decision.was, clock()))
            except ApiException as exc:
                skipped[decision.node] = f"could not label the node: {exc.status} {exc.reason}"
                continue
        paused.append(decision.node)
        events.record_node_event(
            f"{run_key}/{decision.node}/pause_exporter",
            node=decision.node,
            kind="pause_exporter",
            reason=decision.reason,
            dry_run=dry_run,
            run_id=run_id,
            details={"label": EXPORTER_DEPLOY_LABEL, "was": decision.was, "policy": policy.id},
            at=at,
        )
    waiting: list[str] = [] if dry_run else list(paused)
    deadline = clock() + policy.wait_s
    while waiting:
        waiting = still_running(cluster.nodes_running_pods(EXPORTER_POD_SELECTOR), waiting)
        if not waiting or clock() >= deadline:
            break
        sleep(min(5.0, max(0.1, deadline - clock())))
    return PauseOutcome(tuple(paused), skipped, tuple(waiting))


def restore_exporters(
    nodes: Iterable[str],
    *,
    cluster: ExporterCluster,
    events: EventLog,
    run_id: int,
    run_key: str,
    dry_run: bool,
    policy: PausePolicy,
    clock: Callable[[], float] = time.time,
) -> PauseOutcome:
    """Undo fleetval's pause on `nodes` (the wave), and on any node whose pause is stale (left by
    a run that died): the deploy label gets back the value found before the pause."""
    wave = set(nodes)
    paused = cluster.labelled_nodes(WAS_LABEL)
    wanted = wave.intersection(paused) | set(stale_pauses(paused, now=clock(), policy=policy))
    restored: list[str] = []
    refused: list[str] = []
    at = dt.datetime.fromtimestamp(clock(), dt.UTC)
    for node in sorted(wanted):
        patch = restore_labels(paused[node])
        if patch is None:
            continue
        if not dry_run:
            try:
                cluster.set_labels(node, patch)
            except ApiException as exc:
                refused.append(f"{node} ({exc.status} {exc.reason})")
                continue
        restored.append(node)
        events.record_node_event(
            f"{run_key}/{node}/restore_exporter",
            node=node,
            kind="restore_exporter",
            reason="diagnostic over" if node in wave else "stale pause left by an earlier run",
            dry_run=dry_run,
            run_id=run_id,
            details={"label": EXPORTER_DEPLOY_LABEL, "value": patch.get(EXPORTER_DEPLOY_LABEL)},
            at=at,
        )
    if refused:
        # Every other node is restored first; the task fails so its retry tries these again.
        raise ExporterRestoreError(f"dcgm-exporter not restored on {', '.join(refused)}")
    return PauseOutcome((), {}, (), tuple(restored))
