"""Judge Xid events against the Xid decision table (D-DEV-06): per event, per GPU, per node.

Input is what `fleetval.xid.parser` read, e.g. (fixture `xid13-xid109-...-gpud-pr46.log`):

    [Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, ...
    [Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, ...
    [Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, ...

which judges to: the 13s → application / restart_app / none (one decision for both lines, warn);
the 109 → device / reset_gpu / cordon (fail); node → cordon by `xid.109.ctxsw_timeout`.

The rules (the table module states them with their sources):
1. Each event is looked up by its root cause: an Xid 45 `caused by previous Xid N` is judged as
   Xid N (only 45: `REROOTED_XIDS`, as NVIDIA's catalog and driver have it); an Xid 154 by the
   recovery action its line names (text it cannot read names no known action: inconclusive); an
   unreadable line by `xid.unreadable`. Where the parser hit a bound (a line of too many records,
   a log of too many events) its unreadable event says what was not read: the decision quotes it.
2. Events are grouped per GPU (UUID when any line names it, else node/PCI) and rule; a group is
   one decision per `dedup_window_s`, so a storm of hundreds of lines is one decision.
3. Repeat rules count bursts (lines closer than `burst_gap_s` are one burst) on one GPU; the
   `min_bursts`-th burst whose start is within `window_s` (inclusive) of the first escalates.
   When no clock shows enough bursts but lines on other clocks or with no time could make them
   up, the rule's undecided decision is inconclusive: we cannot tell, so we say so.
4. With `as_of`, events with a wall-clock time older than `as_of - lookback_s` are stale: listed,
   never acted on. Events without a wall-clock time cannot be shown to be old, so they count.
5. The node is cordoned when any decision cordons; the earliest such decision names the rule.
6. No readable log (`judge_xid` given the parser's `ParseError` in place of the events) is one
   inconclusive decision, `xid.log.unreadable`, naming the reason: never "no Xid events".

Times: an event's time is on the wall clock (`epoch_s`) when its line has one, else on its host's
kernel uptime (`uptime_s`); untimed otherwise. Events are ordered only against events on the
same clock: windows and bursts are formed per clock, untimed events are one window of their own.
One line on another clock no longer makes a whole group untimed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetval.errors import ParseError
from fleetval.records import Result, Verdict
from fleetval.xid.parser import NOT_READ, XidEvent
from fleetval.xid.table import XID_TABLE, NodeAction, RepeatRule, XidClass, XidRule, XidTable

CRITERION = "D-DEV-06"
_EVIDENCE_LINES = 20  # line numbers quoted per decision; the count says how many there were


@dataclass(frozen=True, slots=True)
class XidEventDecision:
    """What the table says about one event, and what the judgement did with it."""

    event: XidEvent
    subject: str
    judged_xid: int | None
    xid_class: XidClass
    resolution: str
    node_action: NodeAction
    rule_id: str
    result: Result
    stale: bool = False
    escalated_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.event.to_json(),
            "class": self.xid_class.value,
            "action": self.resolution,
            "node_action": self.node_action.value,
            "rule_id": self.rule_id,
            "judged_xid": self.judged_xid,
            "subject": self.subject,
            "result": self.result.value,
            "stale": self.stale,
            "escalated_by": self.escalated_by,
        }


@dataclass(frozen=True, slots=True)
class XidDecision:
    """One decision per (GPU, rule, window): what the pipeline acts on and records."""

    subject: str
    rule_id: str
    judged_xid: int | None
    xid_class: XidClass
    resolution: str
    node_action: NodeAction
    result: Result
    reason: str
    count: int
    line_nos: tuple[int, ...]
    first_time: float | None
    last_time: float | None
    pci: str | None
    gpu_uuid: str | None
    logged_xids: tuple[int, ...]
    detail: Mapping[str, Any] = field(default_factory=dict)  # e.g. the parse error of an unreadable log

    def evidence(self) -> dict[str, Any]:
        return {
            **self.detail,
            "xid": self.judged_xid,
            "logged_xids": list(self.logged_xids),
            "class": self.xid_class.value,
            "resolution": self.resolution,
            "node_action": self.node_action.value,
            "count": self.count,
            "line_nos": list(self.line_nos[:_EVIDENCE_LINES]),
            "first_time": self.first_time,
            "last_time": self.last_time,
            "pci": self.pci,
            "gpu_uuid": self.gpu_uuid,
        }

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "rule_id": self.rule_id, "result": self.result.value,
                "reason": self.reason, **self.evidence()}  # fmt: skip


@dataclass(frozen=True, slots=True)
class XidJudgement:
    node: str
    table_version: str
    events: tuple[XidEventDecision, ...]
    decisions: tuple[XidDecision, ...]
    node_action: NodeAction
    node_rule_id: str
    node_reason: str
    node_evidence: dict[str, Any] = field(default_factory=dict)

    def to_verdicts(self) -> tuple[Verdict, ...]:
        """One D-DEV-06 verdict per decision; a single pass for the node when nothing is live."""
        against = {"xid_table_version": self.table_version}
        if not self.decisions:
            return (
                Verdict(
                    criterion=CRITERION,
                    subject=self.node,
                    result=Result.PASS,
                    action=NodeAction.NONE.value,
                    rule_id=self.node_rule_id,
                    reason=self.node_reason,
                    evidence=dict(self.node_evidence),
                    judged_against=against,
                ),
            )
        return tuple(
            Verdict(
                criterion=CRITERION,
                subject=d.subject,
                result=d.result,
                action=d.node_action.value if d.node_action is NodeAction.CORDON else d.resolution,
                rule_id=d.rule_id,
                reason=d.reason,
                evidence={"node": self.node, **d.evidence()},
                judged_against=against,
            )
            for d in self.decisions
        )

    def verdicts_for_store(self) -> tuple[Verdict, ...]:
        """`to_verdicts` with one subject per verdict, as the store keys them (criterion, subject)."""
        verdicts = self.to_verdicts()
        if not self.decisions:
            return verdicts
        return tuple(
            dataclasses.replace(v, subject=s)
            for v, s in zip(verdicts, _distinct_subjects(self.decisions), strict=True)
        )


def _distinct_subjects(decisions: Sequence[XidDecision]) -> list[str]:
    """A verdict is stored per (criterion, subject): a GPU with several decisions (two rules, or
    the same rule in two windows) gets `<uuid>#<rule_id>`, then a running number."""
    seen: dict[str, int] = {}
    out = []
    for d in decisions:
        subject = d.subject if d.subject not in seen else f"{d.subject}#{d.rule_id}"
        if subject in seen:
            subject = f"{subject}#{seen[subject] + 1}"
        seen[d.subject] = seen.get(d.subject, 0) + 1
        seen[subject] = seen.get(subject, 0) + 1
        out.append(subject)
    return out


def judge_xid_to_json(judgement: XidJudgement) -> dict[str, Any]:
    """The `fleetval judge xid` document (the CLI contract plus additive fields)."""
    return {
        "node": judgement.node,
        "xid_table_version": judgement.table_version,
        "events": [e.to_json() for e in judgement.events],
        "decisions": [d.to_json() for d in judgement.decisions],
        "node_action": judgement.node_action.value,
        "node_rule_id": judgement.node_rule_id,
        "node_reason": judgement.node_reason,
        "node_evidence": judgement.node_evidence,
        "verdicts": [v.to_json() for v in judgement.to_verdicts()],
    }


def _result(rule: XidRule, table: XidTable) -> Result:
    if rule.node_action is NodeAction.CORDON:
        return Result.FAIL
    if rule in (table.unknown, table.unreadable, table.unreadable_log, table.recovery_unknown):
        return Result.INCONCLUSIVE
    return Result.WARN


def _rerooted(event: XidEvent, table: XidTable) -> bool:
    return event.caused_by is not None and event.xid in table.rerooted_xids


def _rule_for(event: XidEvent, table: XidTable) -> tuple[int | None, XidRule]:
    if event.xid is None:
        return None, table.unreadable
    root = event.caused_by if event.caused_by is not None and _rerooted(event, table) else event.xid
    if root == 154:
        # The 154 line itself names the action; a caused-by-154 line has no action text of its own.
        action = event.recovery_action if event.xid == 154 else None
        return root, table.recovery_rule(action) if action is not None else table.rule_for(154)
    return root, table.rule_for(root)


# A clock: the wall clock, or one host's kernel uptime (uptimes of two hosts cannot be compared).
Clock = tuple[str, str | None]


def _time(event: XidEvent) -> tuple[Clock, float] | None:
    if event.epoch_s is not None and math.isfinite(event.epoch_s):
        return ("wall", None), event.epoch_s
    if event.uptime_s is not None and math.isfinite(event.uptime_s):
        return ("uptime", event.host), event.uptime_s
    return None


def _by_clock(idx: list[int], events: Sequence[XidEvent]) -> tuple[dict[Clock, list[int]], list[int]]:
    """Event indices per clock, and the untimed ones."""
    per_clock: dict[Clock, list[int]] = {}
    untimed: list[int] = []
    for i in idx:
        timed = _time(events[i])
        if timed is None:
            untimed.append(i)
        else:
            per_clock.setdefault(timed[0], []).append(i)
    return per_clock, untimed


def _times(events: Sequence[XidEvent]) -> dict[int, float | None]:
    """Each event's time on its own clock (None: untimed)."""
    return {i: (timed[1] if (timed := _time(e)) is not None else None) for i, e in enumerate(events)}


def _windows(idx: list[int], times: Mapping[int, float | None], width: float) -> list[list[int]]:
    """Split event indices (of one clock, in time order) into windows [t0, t0 + width)."""
    ordered = sorted(idx, key=lambda i: (times[i] or 0.0, i))
    out: list[list[int]] = []
    start: float | None = None
    for i in ordered:
        t = times[i] or 0.0
        if start is None or t - start >= width:
            out.append([])
            start = t
        out[-1].append(i)
    return out


def _bursts(idx: list[int], times: Mapping[int, float | None], gap: float) -> list[list[int]]:
    """Split event indices (of one clock) into bursts: consecutive events at most `gap` apart."""
    ordered = sorted(idx, key=lambda i: (times[i] or 0.0, i))
    out: list[list[int]] = []
    last: float | None = None
    for i in ordered:
        t = times[i] or 0.0
        if last is None or t - last > gap:
            out.append([])
        out[-1].append(i)
        last = t
    return out


def _burst_starts(bursts: list[list[int]], times: Mapping[int, float | None]) -> list[float]:
    return [times[b[0]] or 0.0 for b in bursts]


def _escalations(
    bursts: list[list[int]], times: Mapping[int, float | None], rule: RepeatRule
) -> list[list[list[int]]]:
    """Non-overlapping runs of >= min_bursts bursts whose starts lie within window_s of the first."""
    starts = _burst_starts(bursts, times)
    out: list[list[list[int]]] = []
    i = 0
    while i < len(bursts):
        j = i
        while j + 1 < len(bursts) and starts[j + 1] - starts[i] <= rule.window_s:
            j += 1
        if j - i + 1 >= rule.min_bursts:
            out.append(bursts[i : j + 1])
            i = j + 1
        else:
            i += 1
    return out


def _most_in_one_window(bursts: list[list[int]], times: Mapping[int, float | None], window_s: float) -> int:
    starts = _burst_starts(bursts, times)
    most, j = 0, 0
    for i in range(len(starts)):
        j = max(j, i)
        while j + 1 < len(starts) and starts[j + 1] - starts[i] <= window_s:
            j += 1
        most = max(most, j - i + 1)
    return most


def _bursts_possible(
    per_clock_bursts: Mapping[Clock, list[list[int]]],
    untimed: int,
    times: Mapping[int, float | None],
    rule: RepeatRule,
) -> int:
    """The most bursts one window could hold: the best window on one clock, plus every burst on
    the other clocks and every untimed line (none of them can be placed against that window)."""
    total = sum(len(b) for b in per_clock_bursts.values())
    best = max(
        (_most_in_one_window(b, times, rule.window_s) + total - len(b) for b in per_clock_bursts.values()),
        default=0,
    )
    return best + untimed


def _subjects(events: Sequence[XidEvent], node: str) -> list[str]:
    """GPU UUID when any line names it for this PCI (per host), else node/PCI, else the node."""
    uuid_of: dict[tuple[str | None, str], str] = {}
    for e in events:
        if e.pci is not None and e.gpu_uuid is not None:
            uuid_of.setdefault((e.host, e.pci), e.gpu_uuid)
    out = []
    for e in events:
        if e.gpu_uuid is not None:
            out.append(e.gpu_uuid)
        elif e.pci is not None and (e.host, e.pci) in uuid_of:
            out.append(uuid_of[(e.host, e.pci)])
        elif e.pci is not None:
            out.append(f"{node}/PCI:{e.pci}")
        else:
            out.append(node)
    return out


def _decision(
    idx: list[int],
    events: Sequence[XidEvent],
    times: Mapping[int, float | None],
    *,
    subject: str,
    rule_id: str,
    judged_xid: int | None,
    xid_class: XidClass,
    resolution: str,
    node_action: NodeAction,
    result: Result,
    reason: str,
) -> XidDecision:
    chosen = sorted(idx, key=lambda i: events[i].line_no)
    timed = [t for t in (times[i] for i in chosen) if t is not None]
    pcis = sorted({p for p in (events[i].pci for i in chosen) if p is not None})
    uuids = sorted({u for u in (events[i].gpu_uuid for i in chosen) if u is not None})
    return XidDecision(
        subject=subject,
        rule_id=rule_id,
        judged_xid=judged_xid,
        xid_class=xid_class,
        resolution=resolution,
        node_action=node_action,
        result=result,
        reason=reason,
        count=len(chosen),
        line_nos=tuple(events[i].line_no for i in chosen),
        first_time=min(timed) if timed else None,
        last_time=max(timed) if timed else None,
        pci=pcis[0] if pcis else None,
        gpu_uuid=uuids[0] if uuids else None,
        logged_xids=tuple(sorted({x for x in (events[i].xid for i in chosen) if x is not None})),
    )


def judge_xid(
    events: Sequence[XidEvent] | ParseError,
    *,
    node: str,
    table: XidTable = XID_TABLE,
    as_of: float | None = None,
) -> XidJudgement:
    """Decide per event, per (GPU, rule, window) and for the node. Pure: no clock, no I/O.

    `events` may be the parser's `ParseError` (no readable log): one inconclusive decision."""
    if isinstance(events, ParseError):
        return _unreadable_log(events, node, table)
    subjects = _subjects(events, node)
    looked_up = [_rule_for(e, table) for e in events]
    times = _times(events)
    stale = [
        as_of is not None and e.epoch_s is not None and e.epoch_s < as_of - table.lookback_s for e in events
    ]
    live = [i for i in range(len(events)) if not stale[i]]

    # Group live events by (GPU, rule); within a group, windows are formed per clock.
    groups: dict[tuple[str, str], list[int]] = {}
    for i in live:
        groups.setdefault((subjects[i], looked_up[i][1].rule_id), []).append(i)

    decisions: list[XidDecision] = []
    for (subject, rule_id), idx in groups.items():
        judged_xid, rule = looked_up[idx[0]]
        per_clock, untimed = _by_clock(idx, events)
        windows = [w for ix in per_clock.values() for w in _windows(ix, times, table.dedup_window_s)]
        for window in [*windows, untimed] if untimed else windows:
            what = f"Xid {judged_xid}" if judged_xid is not None else "unreadable Xid line"
            rerooted = any(_rerooted(events[i], table) for i in window)
            via = f" (logged as caused by previous Xid {judged_xid})" if rerooted else ""
            not_read = _not_read(events, window) if judged_xid is None else ""
            decisions.append(
                _decision(
                    window,
                    events,
                    times,
                    subject=subject,
                    rule_id=rule_id,
                    judged_xid=judged_xid,
                    xid_class=rule.xid_class,
                    resolution=rule.resolution,
                    node_action=rule.node_action,
                    result=_result(rule, table),
                    reason=f"{what}{via} ×{len(window)}: {rule.xid_class.value} → {rule.resolution}, "
                    f"node {rule.node_action.value} ({rule.rule_id}){not_read}",
                )
            )

    # Repeat rules, per GPU, bursts per clock.
    escalated: dict[int, str] = {}
    for rep in table.repeat_rules:
        per_gpu: dict[str, list[int]] = {}
        for i in live:
            if looked_up[i][0] in rep.xids:
                per_gpu.setdefault(subjects[i], []).append(i)
        for subject, idx in per_gpu.items():
            per_clock, untimed = _by_clock(idx, events)
            per_clock_bursts = {c: _bursts(ix, times, rep.burst_gap_s) for c, ix in per_clock.items()}
            runs = [run for b in per_clock_bursts.values() for run in _escalations(b, times, rep)]
            for run in runs:
                members = [i for b in run for i in b]
                for i in members:
                    escalated.setdefault(i, rep.rule_id)
                decisions.append(
                    _decision(
                        members,
                        events,
                        times,
                        subject=subject,
                        rule_id=rep.rule_id,
                        judged_xid=None,
                        xid_class=XidClass.DEVICE,
                        resolution=rep.resolution,
                        node_action=rep.node_action,
                        result=Result.FAIL if rep.node_action is NodeAction.CORDON else Result.WARN,
                        reason=f"{len(run)} bursts of Xid {sorted(rep.xids)} within {rep.window_s:g} s "
                        f"(>= {rep.min_bursts}): {rep.reason}",
                    )
                )
            possible = _bursts_possible(per_clock_bursts, len(untimed), times, rep)
            if not runs and possible >= rep.min_bursts:
                decisions.append(
                    _decision(
                        idx,
                        events,
                        dict.fromkeys(idx),  # no common clock: no first or last time
                        subject=subject,
                        rule_id=rep.undecided_rule_id,
                        judged_xid=None,
                        xid_class=XidClass.DEVICE,
                        resolution=rep.resolution,
                        node_action=NodeAction.NONE,
                        result=Result.INCONCLUSIVE,
                        reason=f"{len(idx)} lines of Xid {sorted(rep.xids)} on {len(per_clock)} clock(s), "
                        f"{len(untimed)} without a time: up to {possible} bursts within {rep.window_s:g} s "
                        f"(>= {rep.min_bursts} escalates) cannot be ruled out nor shown: {rep.reason}",
                    )
                )

    decisions.sort(key=lambda d: (d.line_nos[0] if d.line_nos else 0, d.rule_id))
    event_decisions = tuple(
        _event_decision(e, subjects[i], looked_up[i], stale[i], escalated.get(i), table)
        for i, e in enumerate(events)
    )
    return _node_judgement(node, table, event_decisions, tuple(decisions), len(events))


def _not_read(events: Sequence[XidEvent], window: list[int]) -> str:
    """The note of a parser bound hit inside the window ("; not read: ..."), else "" (no bound)."""
    notes = [
        events[i].message for i in window if events[i].xid is None and events[i].message.startswith(NOT_READ)
    ]
    return f"; {notes[0]}" if notes else ""


def _unreadable_log(error: ParseError, node: str, table: XidTable) -> XidJudgement:
    rule = table.unreadable_log
    reason = f"no readable Xid evidence ({error.reason}): {rule.resolution} ({rule.rule_id})"
    detail = {"parse_error": error.reason, "excerpt": error.excerpt}
    decision = XidDecision(
        subject=node,
        rule_id=rule.rule_id,
        judged_xid=None,
        xid_class=rule.xid_class,
        resolution=rule.resolution,
        node_action=rule.node_action,
        result=_result(rule, table),
        reason=reason,
        count=0,
        line_nos=(),
        first_time=None,
        last_time=None,
        pci=None,
        gpu_uuid=None,
        logged_xids=(),
        detail=detail,
    )
    return XidJudgement(
        node=node,
        table_version=table.version,
        events=(),
        decisions=(decision,),
        node_action=NodeAction.NONE,
        node_rule_id=rule.rule_id,
        node_reason=reason,
        node_evidence={"events": 0, "decisions": 1, **detail},
    )


def _event_decision(
    event: XidEvent,
    subject: str,
    looked_up: tuple[int | None, XidRule],
    stale: bool,
    escalated_by: str | None,
    table: XidTable,
) -> XidEventDecision:
    judged_xid, rule = looked_up
    node_action = rule.node_action
    if escalated_by is not None:
        node_action = NodeAction.CORDON
    if stale:
        node_action = NodeAction.NONE
    return XidEventDecision(
        event=event,
        subject=subject,
        judged_xid=judged_xid,
        xid_class=rule.xid_class,
        resolution=rule.resolution,
        node_action=node_action,
        rule_id=rule.rule_id,
        result=_result(rule, table),
        stale=stale,
        escalated_by=escalated_by,
    )


def _node_judgement(
    node: str,
    table: XidTable,
    events: tuple[XidEventDecision, ...],
    decisions: tuple[XidDecision, ...],
    n_events: int,
) -> XidJudgement:
    cordons = [d for d in decisions if d.node_action is NodeAction.CORDON]
    if cordons:
        first = cordons[0]
        return XidJudgement(
            node=node,
            table_version=table.version,
            events=events,
            decisions=decisions,
            node_action=NodeAction.CORDON,
            node_rule_id=first.rule_id,
            node_reason=f"{first.subject}: {first.reason}",
            node_evidence={
                "cordon_decisions": [
                    {
                        "subject": d.subject,
                        "rule_id": d.rule_id,
                        "xid": d.judged_xid,
                        "count": d.count,
                        "first_line": d.line_nos[0] if d.line_nos else None,
                    }
                    for d in cordons
                ],
                "events": n_events,
            },
        )
    if decisions:
        rule_id, reason = "xid.node.no_cordon", f"{len(decisions)} decision(s), none cordons"
    elif n_events:
        rule_id, reason = "xid.node.only_stale", f"{n_events} event(s), all older than the lookback"
    else:
        rule_id, reason = "xid.node.no_events", "no Xid events"
    return XidJudgement(
        node=node,
        table_version=table.version,
        events=events,
        decisions=decisions,
        node_action=NodeAction.NONE,
        node_rule_id=rule_id,
        node_reason=reason,
        node_evidence={"events": n_events, "decisions": len(decisions)},
    )
