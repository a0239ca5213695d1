"""Xid remediation (D-DEV-02, D-DEV-05, D-DEV-06): Xid lines → decision table → cordon → DCGM r3
→ return to service or quarantine, within a circuit breaker, with time-to-cordon recorded.

Flow, one function per step of the `xid_remediation` DAG (steps 1–3 are inbox persistence, in
`fleetval.store.xid_inbox`; 4–5 are here):

1. `receive_lines` — a source appends kernel lines to the `xid_inbox` (the raw evidence; never
   deleted). Sources: the simulator, or node-problem-detector Events on a cluster.
2. `dispatch_pending` — the trigger reserves undispatched rows for one DAG run, and
   `cordon_on_read` (in the triggerer, before the event fires) judges them and cordons every
   `cordon` decision at once, within the breaker: the cordon never waits for a DAG run, a task
   slot or the remediation work of earlier bursts.
3. `claim` — the run takes its rows (or, run by hand, everything pending), grouped per node.
4. `decide_and_cordon` — per node: raw lines stored as an `xid` probe, parsed, judged (D-DEV-06);
   a `cordon` decision cordons the node and taints it for maintenance unless the breaker is open
   (F-SAFE-01 alert instead) — or, when `cordon_on_read` did so already, records what it did.
   Time from the first Xid to the cordon is a D-DEV-05 verdict. Lines with no readable log are an
   inconclusive verdict; a failure while judging one node's lines is an `error` verdict for that
   node, and the other nodes are judged and cordoned as usual.
5. `r3_probes` → (the DAG runs one DCGM r3 probe pod per node once it runs no workload GPU pods:
   the job that hit the Xid ends first) → `judge_r3` through the post-xid gate: Pass → uncordon,
   Fail → quarantine (D-DEV-02). A node whose GPU the device plugin withdrew cannot run r3 on
   every GPU: `quarantine_withdrawn` quarantines it on that evidence.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from fleetval.dcgm import steps as dcgm_steps
from fleetval.dcgm.probe import dcgm_diag_probe
from fleetval.errors import ParseError
from fleetval.nodes import MAINTENANCE_TAINT, Cluster, NodeActions, NodeInfo
from fleetval.policy import node_health as nh
from fleetval.policy.blast_radius import ActionBudget
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result, Verdict
from fleetval.remediation import PlannedAction, apply_actions
from fleetval.store import xid_inbox
from fleetval.store.repository import ProbeIn, Store
from fleetval.xid.judge import CRITERION, XidJudgement, judge_xid
from fleetval.xid.parser import XidEvent, parse_xid
from fleetval.xid.table import XID_TABLE_VERSION, NodeAction

REMEDIATION_LABEL: Final = "fleetval.io/xid-remediation"
PENDING_R3: Final[dict[str, str | None]] = {REMEDIATION_LABEL: "pending-r3"}  # cordoned, r3 to come
GATE: Final = "post-xid"
LEVEL: Final = 3
R3_CRITERION: Final = nh.GATE_CRITERION[GATE]
NODE_GONE: Final = "the node is gone"  # r3_probes' reason for a node the cluster no longer has
# Node events of `cordon_on_read` are keyed by the dispatch (no DAG run exists yet).
ON_READ_KEY: Final = "xid-on-read"
ON_READ_WORKERS: Final = 16  # cordons of one burst in flight at once (two API calls each)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class XidBreaker:
    """Circuit breaker for Xid cordons: at most this share of the fleet (and of a rack) cordoned
    by Xid remediation within `window` (NVSentinel's default: 50 % in 5 min; ours is tighter)."""

    max_fleet_fraction: float = 0.10
    max_rack_fraction: float = 0.50
    window: dt.timedelta = dt.timedelta(minutes=5)

    def budget(self) -> ActionBudget:
        return ActionBudget(self.max_fleet_fraction, self.max_rack_fraction)

    @classmethod
    def from_params(cls, params: Mapping[str, Any], override: Mapping[str, Any] | None = None) -> XidBreaker:
        """The DAG's breaker params, any of them overridden (Variable `fleetval_xid_breaker`)."""
        merged = {**params, **(override or {})}
        return cls(
            float(merged["max_fleet_fraction"]),
            float(merged["max_rack_fraction"]),
            dt.timedelta(seconds=float(merged["breaker_window_s"])),
        )


@dataclass(frozen=True, slots=True)
class CordonOutcome:
    node: str
    node_action: str
    cordoned: bool
    withheld: bool
    time_to_cordon_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "node_action": self.node_action,
            "cordoned": self.cordoned,
            "withheld": self.withheld,
            "time_to_cordon_s": self.time_to_cordon_s,
        }


# --- decide and cordon ----------------------------------------------------------------------
def decide_and_cordon(
    store: Store,
    cluster: Cluster,
    *,
    run_id: int,
    run_key: str,
    claimed: Mapping[str, Sequence[str]],
    breaker: XidBreaker,
    dry_run: bool,
    now: dt.datetime,
    dispatch_ids: Sequence[str] = (),
) -> list[CordonOutcome]:
    """Judge each node's Xid lines and cordon where the table says so, within the breaker.

    A node `cordon_on_read` already cordoned (or withheld) for one of `dispatch_ids` is not acted
    on again: its time-to-cordon (or F-SAFE-01 alert) is the one recorded then."""
    early_cordons = _on_read_events(store, dispatch_ids, "cordon")
    early_withheld = _on_read_events(store, dispatch_ids, "withheld")
    inventory = {n.name: n for n in cluster.list_nodes()}
    racks = Counter(n.rack for n in inventory.values())
    received = xid_inbox.first_received(store.engine, run_id)
    store.ingest(
        run_id,
        [
            ProbeIn(f"{run_key}/xid/{node}", "xid", "\n".join(lines) + "\n", (node,))
            for node, lines in sorted(claimed.items())
        ],
    )
    taken = _recent_xid_cordons(store, now=now, window=breaker.window, inventory=inventory)
    outcomes: list[CordonOutcome] = []
    results: list[tuple[str, Sequence[Any], Sequence[Verdict], str | None]] = []
    for node, lines in sorted(claimed.items()):
        try:
            events, judgement, verdicts = _judge_node(node, lines, now)
        except Exception as exc:  # one node's lines must never abort the other nodes
            results.append((f"{run_key}/xid/{node}", [], [_judge_error_verdict(node, exc, len(lines))], node))
            outcomes.append(CordonOutcome(node, Result.ERROR.value, False, False, None))
            continue
        rack = inventory[node].rack if node in inventory else ""
        cordon = judgement.node_action is NodeAction.CORDON
        cordoned = withheld = False
        ttc: float | None = None
        first = _first_xid_time(events) or received.get(node, now).timestamp()
        early = early_cordons.get(node)
        if early is not None:  # cordoned as the trigger read the lines: it is, whatever this judgement
            taken[node] = rack
            cordoned = True
            ttc = max(0.0, _aware(early["at"]).timestamp() - first)
            rule_id = str((early["details"] or {}).get("rule_id") or judgement.node_rule_id)
            verdicts.append(_time_to_cordon_verdict(node, ttc, rule_id, bool(early["dry_run"])))
        elif cordon and node in early_withheld:
            withheld = True
            details = early_withheld[node]["details"] or {}
            verdicts.append(
                _breaker_alert(
                    node,
                    rack,
                    int(details.get("already_cordoned", len(taken))),
                    int(details.get("fleet_size", len(inventory))),
                    breaker,
                )
            )
        elif cordon:
            if breaker.budget().allows(node, rack, taken=taken, fleet_size=len(inventory), rack_sizes=racks):
                taken[node] = rack
                cordon_at = _cordon(
                    store, cluster, node, rack, run_id, run_key, judgement.node_rule_id, dry_run
                )
                cordoned = True
                ttc = max(0.0, cordon_at.timestamp() - first)
                verdicts.append(_time_to_cordon_verdict(node, ttc, judgement.node_rule_id, dry_run))
            else:
                withheld = True
                verdicts.append(_breaker_alert(node, rack, len(taken), len(inventory), breaker))
                store.record_node_event(
                    f"{run_key}/{node}/withheld",
                    node=node,
                    kind="withheld",
                    reason="xid cordon withheld by the circuit breaker",
                    dry_run=dry_run,
                    run_id=run_id,
                    details={"rack": rack, "source": "xid"},
                    at=now,
                )
        results.append((f"{run_key}/xid/{node}", [], verdicts, node))
        outcomes.append(CordonOutcome(node, judgement.node_action.value, cordoned, withheld, ttc))
    store.attach_results(run_id, results)
    return outcomes


def _judge_node(
    node: str, lines: Sequence[str], now: dt.datetime
) -> tuple[tuple[XidEvent, ...], XidJudgement, list[Verdict]]:
    """Parse and judge one node's lines; no readable log is the judge's inconclusive decision."""
    events: tuple[XidEvent, ...] | ParseError
    try:
        events = parse_xid("\n".join(lines) + "\n")
    except ParseError as exc:
        events = exc
    judgement = judge_xid(events, node=node, as_of=now.timestamp())
    return (events if isinstance(events, tuple) else ()), judgement, list(judgement.verdicts_for_store())


def _judge_error_verdict(node: str, exc: Exception, lines: int) -> Verdict:
    return Verdict(
        CRITERION,
        node,
        Result.ERROR,
        "investigate",
        "xid.judge.error",
        f"judging the node's Xid lines failed ({type(exc).__name__}): no decision, the node left as it is",
        {"node": node, "error": f"{type(exc).__name__}: {exc}"[:500], "lines": lines},
        {"xid_table_version": XID_TABLE_VERSION},
    )


def _first_xid_time(events: Sequence[Any]) -> float | None:
    times = [e.epoch_s for e in events if e.epoch_s is not None]
    return min(times) if times else None


def _recent_xid_cordons(
    store: Store, *, now: dt.datetime, window: dt.timedelta, inventory: Mapping[str, NodeInfo | str]
) -> dict[str, str]:
    """node → rack of every node cordoned for Xids within `window` (inventory: node → its
    NodeInfo, or its rack)."""
    since = now - window
    taken: dict[str, str] = {}
    for e in store.node_events(kind="cordon"):
        if (e["details"] or {}).get("source") == "xid" and _aware(e["at"]) >= since:
            known = inventory.get(e["node"], "")
            taken[e["node"]] = known if isinstance(known, str) else known.rack
    return taken


def _aware(at: dt.datetime) -> dt.datetime:
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)  # SQLite returns naive datetimes


def _on_read_key(dispatch_id: str, node: str, kind: str) -> str:
    return f"{ON_READ_KEY}/{dispatch_id}/{node}/{kind}"


def _on_read_events(store: Store, dispatch_ids: Sequence[str], kind: str) -> dict[str, dict[str, Any]]:
    """node → the `kind` event `cordon_on_read` recorded for one of `dispatch_ids`."""
    if not dispatch_ids:
        return {}
    prefixes = tuple(f"{ON_READ_KEY}/{d}/" for d in dispatch_ids)
    return {e["node"]: e for e in store.node_events(kind=kind) if e["event_key"].startswith(prefixes)}


def _cordon(
    store: Store,
    nodes: NodeActions,
    node: str,
    rack: str,
    run_id: int,
    run_key: str,
    rule_id: str,
    dry_run: bool,
) -> dt.datetime:
    at = dt.datetime.now(dt.UTC)
    details = {"rack": rack, "source": "xid", "rule_id": rule_id}
    fresh = {
        kind
        for kind in ("cordon", "taint", "label")
        if store.record_node_event(
            f"{run_key}/{node}/{kind}",
            node=node,
            kind=kind,
            reason=f"Xid decision {rule_id}",
            dry_run=dry_run,
            run_id=run_id,
            details=details,
            at=at,
        )
    }
    if dry_run:
        return at
    if fresh == {"cordon", "taint", "label"}:
        nodes.cordon_and_taint(
            node, key=MAINTENANCE_TAINT, value="xid", effect="NoSchedule", labels=PENDING_R3
        )
        return at
    if "cordon" in fresh:
        nodes.cordon(node)
    if "taint" in fresh:
        nodes.add_taint(node, MAINTENANCE_TAINT, "xid", "NoSchedule")
    if "label" in fresh:
        nodes.set_labels(node, dict(PENDING_R3))
    return at


# --- cordon as the lines are read (the triggerer) -------------------------------------------
def cordon_on_read(
    store: Store,
    cluster: Cluster,
    *,
    dispatch_id: str,
    breaker: XidBreaker,
    dry_run: bool,
    now: dt.datetime,
    workers: int = ON_READ_WORKERS,
) -> list[CordonOutcome]:
    """Judge the lines `dispatch_id` reserved and cordon every `cordon` decision now, within the
    breaker, before any DAG run exists (the trigger calls this before it fires the event).

    The same decision table and breaker as `decide_and_cordon`, which then records the verdicts
    and starts r3. The raw lines are already stored (the inbox); the cordons of a burst run in
    parallel, one patch each (`cordon_and_taint`). Each node event is recorded after its patch
    succeeded (as `apply_actions` does): a node whose patch failed, or that this step never
    reached, has no event, and `decide_and_cordon` cordons it in the DAG run as before."""
    lines = xid_inbox.dispatched_lines(store.engine, dispatch_id)
    if not lines:
        return []
    rack_of = cluster.node_racks()  # not list_nodes: its pod counts cost seconds, unused here
    racks = Counter(rack_of.values())
    taken = _recent_xid_cordons(store, now=now, window=breaker.window, inventory=rack_of)
    to_cordon: list[tuple[str, str, str, float | None]] = []
    outcomes: list[CordonOutcome] = []
    for node, node_lines in sorted(lines.items()):
        try:
            events, judgement, _ = _judge_node(node, node_lines, now)
        except Exception:  # decide_and_cordon records the error verdict for this node
            log.exception("judging the Xid lines of %s failed; the DAG run decides it", node)
            continue
        if judgement.node_action is not NodeAction.CORDON:
            continue
        rack = rack_of.get(node, "")
        if breaker.budget().allows(node, rack, taken=taken, fleet_size=len(rack_of), rack_sizes=racks):
            taken[node] = rack
            to_cordon.append((node, rack, judgement.node_rule_id, _first_xid_time(events)))
            continue
        store.record_node_event(
            _on_read_key(dispatch_id, node, "withheld"),
            node=node,
            kind="withheld",
            reason="xid cordon withheld by the circuit breaker",
            dry_run=dry_run,
            details={
                "rack": rack,
                "source": "xid",
                "dispatch_id": dispatch_id,
                "already_cordoned": len(taken),
                "fleet_size": len(rack_of),
            },
            at=now,
        )
        outcomes.append(CordonOutcome(node, NodeAction.CORDON.value, False, True, None))

    def patch(item: tuple[str, str, str, float | None]) -> dt.datetime | None:
        node = item[0]
        try:
            if not dry_run:
                cluster.cordon_and_taint(
                    node, key=MAINTENANCE_TAINT, value="xid", effect="NoSchedule", labels=PENDING_R3
                )
        except Exception:
            log.exception("cordoning %s as its Xid was read failed; the DAG run cordons it", node)
            return None
        return dt.datetime.now(dt.UTC)

    def record(item: tuple[str, str, str, float | None], at: dt.datetime | None) -> CordonOutcome:
        node, rack, rule_id, first = item
        if at is None:
            return CordonOutcome(node, NodeAction.CORDON.value, False, False, None)
        details = {"rack": rack, "source": "xid", "rule_id": rule_id, "dispatch_id": dispatch_id}
        for kind in ("cordon", "taint", "label"):
            store.record_node_event(
                _on_read_key(dispatch_id, node, kind),
                node=node,
                kind=kind,
                reason=f"Xid decision {rule_id}",
                dry_run=dry_run,
                details=details,
                at=at,
            )
        ttc = max(0.0, at.timestamp() - first) if first is not None else None
        return CordonOutcome(node, NodeAction.CORDON.value, True, False, ttc)

    if to_cordon:
        # Every patch first, then the records: no cordon waits behind another node's bookkeeping.
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(to_cordon)))) as pool:
            applied = list(pool.map(patch, to_cordon))
            outcomes.extend(pool.map(record, to_cordon, applied))
    return outcomes


def _time_to_cordon_verdict(node: str, seconds: float, rule_id: str, dry_run: bool) -> Verdict:
    target = 15.0
    return Verdict(
        "D-DEV-05",
        node,
        Result.PASS if seconds <= target else Result.WARN,
        "none",
        "xid.time_to_cordon",
        f"cordoned {seconds:.1f}s after the first Xid" + (" (shadow mode: not applied)" if dry_run else ""),
        {"time_to_cordon_s": round(seconds, 3), "decided_by": rule_id, "dry_run": dry_run},
        {"target_p90_s": target, "xid_table_version": XID_TABLE_VERSION},
    )


def _breaker_alert(node: str, rack: str, taken: int, fleet: int, breaker: XidBreaker) -> Verdict:
    return Verdict(
        "F-SAFE-01",
        node,
        Result.FAIL,
        "alert_operator",
        "safety.xid_breaker.open",
        f"Xid cordon of {node} withheld: {taken} of {fleet} nodes already cordoned for Xids within "
        f"{breaker.window.total_seconds():.0f}s",
        {"rack": rack, "already_cordoned": taken, "fleet_size": fleet},
        {
            "breaker": {
                "max_fleet_fraction": breaker.max_fleet_fraction,
                "max_rack_fraction": breaker.max_rack_fraction,
                "window_s": breaker.window.total_seconds(),
            }
        },
    )


# --- remediate ------------------------------------------------------------------------------
def r3_probes(
    cluster: Cluster, nodes: Sequence[str], *, run_key: str, image: str | None = None
) -> tuple[list[ProbeSpec], dict[str, str]]:
    """DCGM r3 probes for the cordoned `nodes`, and why the others get none.

    r3 must see every GPU of the node, so its pod requests the node's capacity. A node where the
    device plugin has withdrawn a GPU (allocatable below capacity, e.g. after Xid 48 or 79) could
    never schedule that pod, and a pod on the remaining GPUs would pass without the bad one: such
    a node is quarantined on the device plugin's evidence instead (`quarantine_withdrawn`)."""
    extra = {"image": image} if image else {}
    specs: list[ProbeSpec] = []
    without: dict[str, str] = {}
    for name in nodes:
        info = cluster.node(name)
        if info is None:
            without[name] = NODE_GONE
        elif info.allocatable_gpus is not None and info.allocatable_gpus < info.gpus:
            without[name] = (
                f"the device plugin withdrew {info.gpus - info.allocatable_gpus} of {info.gpus} GPUs "
                f"(allocatable {info.allocatable_gpus})"
            )
        else:
            specs.append(dcgm_diag_probe(name, level=LEVEL, gpus=info.gpus, run_key=run_key, **extra))
    return specs, without


def quarantine_withdrawn(
    store: Store,
    cluster: Cluster,
    *,
    run_id: int,
    run_key: str,
    withdrawn: Mapping[str, str],
    dry_run: bool,
    now: dt.datetime,
) -> list[Verdict]:
    """Quarantine nodes whose GPUs the device plugin withdrew (see `r3_probes`); a node that is
    gone gets an `error` verdict and no action."""
    verdicts: list[Verdict] = []
    planned: list[PlannedAction] = []
    for node, why in sorted(withdrawn.items()):
        gone = why == NODE_GONE
        verdict = Verdict(
            R3_CRITERION,
            node,
            Result.ERROR if gone else Result.FAIL,
            nh.RERUN if gone else nh.QUARANTINE,
            "post_xid.node_gone" if gone else "post_xid.gpu_withdrawn",
            f"no r3: {why}",
            {"node": node, "why": why},
            {"policy_version": nh.NODE_HEALTH_POLICY_VERSION, "gate": GATE},
        )
        verdicts.append(verdict)
        if not gone:
            planned.append(PlannedAction(node, "", nh.QUARANTINE, verdict.reason, verdict.rule_id))
    store.add_verdicts(run_id, verdicts)
    _act(store, cluster, planned, run_id=run_id, run_key=run_key, dry_run=dry_run, now=now)
    return verdicts


def judge_r3(
    store: Store,
    cluster: NodeActions,
    *,
    run_id: int,
    run_key: str,
    spec: ProbeSpec,
    dry_run: bool,
    now: dt.datetime,
) -> dict[str, Any]:
    """Judge a node's stored r3 output: Pass returns it to service, Fail quarantines it, a
    harness failure leaves it cordoned with an `error` verdict."""
    probe_outputs.record_missing_probes(store, run_id, [spec])
    decisions = dcgm_steps.judge_stored_dcgm(store, run_id, [spec.probe_key], gate=GATE, level=LEVEL)
    planned = [PlannedAction(d.node, "", d.action, d.reason, d.rule_id) for d in decisions]
    _act(store, cluster, planned, run_id=run_id, run_key=run_key, dry_run=dry_run, now=now)
    return {"node": spec.node, **decisions[0].to_json()} if decisions else {"node": spec.node}


def _act(
    store: Store,
    cluster: NodeActions,
    planned: Sequence[PlannedAction],
    *,
    run_id: int,
    run_key: str,
    dry_run: bool,
    now: dt.datetime,
) -> None:
    # The cordon was this run's disruptive act (within the breaker); quarantining the same node
    # is not a second one, so the budget here is the whole fleet.
    apply_actions(
        planned,
        nodes=cluster,
        store=store,
        run_id=run_id,
        run_key=run_key,
        budget=ActionBudget(1.0, 1.0),
        fleet_size=max(1, len(planned)),
        rack_sizes={"": max(1, len(planned))},
        dry_run=dry_run,
        as_of=now,
    )
    for action in planned:
        if dry_run or action.action not in (nh.RETURN_TO_SERVICE, nh.QUARANTINE):
            continue
        outcome = "done" if action.action == nh.RETURN_TO_SERVICE else "quarantined"
        cluster.set_labels(action.node, {REMEDIATION_LABEL: outcome})
