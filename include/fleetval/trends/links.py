"""A node's or pair's busbw history from the NCCL sweeps' stored verdicts, for the link trend judge
(D-NET-NCCL-TREND-01). Pure: the rows come from `fleetval.store.nccl_queries.busbw_history`.

Each post-upgrade sweep stores one D-NET-NCCL-01 verdict per node (intra-node) and one
D-NET-NCCL-02 per pair, with each repeat's headline busbw and the promoted baseline it was judged
against (`judged_against.baseline_busbw_gbps`). One sweep's point is the median of its repeats
that were measured and believed (`nccl.busbw.ok` or `.below_baseline`: not an implausible,
incomplete or damaged run); a sweep with none is a point without a number, which the judge does
not read. Sweeps are numbered per subject (its own sweeps, oldest first): the sweep is event-driven
(a driver upgrade), so "per sweep" means per time the subject was measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any, Final

from fleetval.records import Verdict
from fleetval.trends.history import BusbwPoint
from fleetval.trends.judge import judge_link_trend
from fleetval.trends.rules import LINK_RULES
from fleetval.trends.stats import finite

NODE_CRITERION: Final = "D-NET-NCCL-01"
PAIR_CRITERION: Final = "D-NET-NCCL-02"
BUSBW_CRITERIA: Final = (NODE_CRITERION, PAIR_CRITERION)
# The busbw rules whose number is a believed measurement (fleetval.nccl.judge.judge_busbw).
MEASURED_RULES: Final = ("nccl.busbw.ok", "nccl.busbw.below_baseline")
# Sweeps of history the link rule reads (older ones are never looked at).
LINK_LOOKBACK: Final = int(LINK_RULES[0].params["recent"] + LINK_RULES[0].params["reference"])


def busbw_criterion_of(subject: str) -> str:
    """A pair's subject is `nodeA+nodeB` (fleetval.nccl.probe.nccl_subject); a node's is its name."""
    return PAIR_CRITERION if "+" in subject else NODE_CRITERION


def sweep_busbw(evidence: Mapping[str, Any]) -> float | None:
    """One sweep's busbw (GB/s): the median of its measured repeats, or None."""
    measured = [
        value
        for r in evidence.get("repeats") or []
        if isinstance(r, Mapping)
        and r.get("rule_id") in MEASURED_RULES
        and (value := finite(r.get("busbw_gbps"))) is not None
    ]
    return statistics.median(measured) if measured else None


def busbw_histories(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[BusbwPoint]]:
    """Stored busbw verdict rows (criterion, subject, evidence, judged_against; oldest first) →
    subject → its points. A subject's rows of the other busbw criterion (a node blamed by pair
    isolation carries a D-NET-NCCL-02 verdict) are not its series."""
    out: dict[str, list[BusbwPoint]] = {}
    for row in rows:
        subject = str(row["subject"])
        if row["criterion"] != busbw_criterion_of(subject):
            continue
        points = out.setdefault(subject, [])
        baseline = (row.get("judged_against") or {}).get("baseline_busbw_gbps")
        points.append(BusbwPoint(len(points), sweep_busbw(row.get("evidence") or {}), baseline))
    return out


def judge_link_histories(subjects: Iterable[str], histories: Mapping[str, list[BusbwPoint]]) -> list[Verdict]:
    """D-NET-NCCL-TREND-01 for each subject, against its own busbw criterion's `min_ratio`."""
    return [
        judge_link_trend(s, histories.get(s, []), busbw_criterion=busbw_criterion_of(s))
        for s in sorted(set(subjects))
    ]
