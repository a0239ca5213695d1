"""The first rack of a new hardware profile: NCCL baseline candidates, promoted only by a human.

Without a promoted baseline a busbw verdict is inconclusive (never a pass), so a rack of a profile
fleetval has never measured cannot pass NCCL on its own. When the request allows it, each
(profile, scope) the run measured with no promoted baseline gets a candidate from this run's
usable measurements (`fleetval.nccl.baselines.establish_baseline`: median over runs, reference
outliers below D-NET-NCCL-01's ratio left out). A human then promotes the ones they trust (the
default on timeout: none); promoted, the NCCL stages are judged again against them before the gate.
A candidate left unpromoted stays in the store as a candidate.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from fleetval.nccl.baseline_stats import BaselineError
from fleetval.nccl.baselines import establish_baseline
from fleetval.nccl.judge_stored import METRIC
from fleetval.onboarding.gate import PENDING_BASELINE_RULES
from fleetval.store.repository import Store

PROMOTE_NONE: Final = "Promote none (keep them as candidates)"


@dataclass(frozen=True, slots=True)
class Candidate:
    baseline_id: int
    version: int
    profile: str
    scope: str
    busbw_gbps: float
    subjects: tuple[str, ...]
    excluded: tuple[str, ...]
    cv: float | None

    @property
    def label(self) -> str:
        """The option a human picks (unique: the store id leads)."""
        return (
            f"#{self.baseline_id} {self.profile} {self.scope}: {self.busbw_gbps:.1f} GB/s (v{self.version})"
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "subjects": list(self.subjects), "excluded": list(self.excluded)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Candidate:
        return cls(
            int(data["baseline_id"]),
            int(data["version"]),
            str(data["profile"]),
            str(data["scope"]),
            float(data["busbw_gbps"]),
            tuple(data["subjects"]),
            tuple(data["excluded"]),
            None if data.get("cv") is None else float(data["cv"]),
        )


def missing_baselines(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(profile, scope) of every busbw verdict judged without a promoted baseline."""
    missing: set[tuple[str, str]] = set()
    for row in rows:
        if row["rule_id"] in PENDING_BASELINE_RULES:
            against = row.get("judged_against") or {}
            if against.get("profile") and against.get("scope"):
                missing.add((str(against["profile"]), str(against["scope"])))
    return sorted(missing)


def propose(
    store: Store, run_id: int, missing: Sequence[tuple[str, str]]
) -> tuple[list[Candidate], dict[str, str]]:
    """A candidate per (profile, scope) from this run's measurements; (candidates, {"profile
    scope": why none} for the ones the measurements cannot give)."""
    candidates: list[Candidate] = []
    refused: dict[str, str] = {}
    for profile, scope in missing:
        try:
            made = establish_baseline(store, run_id, profile, scope)
        except BaselineError as exc:
            refused[f"{profile} {scope}"] = str(exc)
            continue
        headline = made.stats.get("headline") or {}
        candidates.append(
            Candidate(
                made.baseline_id,
                made.version,
                profile,
                scope,
                made.value,
                tuple(made.source["reference_subjects"]),
                tuple(made.source["excluded_outliers"]),
                headline.get("cv"),
            )
        )
    return candidates, refused


def question(
    candidates: Sequence[Candidate],
    *,
    rack: str,
    timeout_minutes: float,
    refused: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """The HITLOperator arguments asking which candidates to promote (None without candidates)."""
    if not candidates:
        return None
    body = [
        f"### Rack `{rack}`: NCCL baselines for a profile fleetval has not measured",
        "",
        "No promoted baseline exists for these measurements, so their busbw verdicts are "
        "inconclusive. These candidates come from this rack's runs. **Promote a candidate only if "
        "this rack is known good**: this rack and every later node of the profile are judged "
        f"against it (≥ 90 % of it). Without an answer within {timeout_minutes / 60:g} h none is promoted "
        "and the rack's NCCL verdicts stay inconclusive (its nodes are held).",
        "",
        "| candidate | profile | scope | busbw | runs' CV | subjects | left out (outliers) |",
        "|---|---|---|---|---|---|---|",
    ]
    body += [
        f"| #{c.baseline_id} v{c.version} | {c.profile} | {c.scope} | {c.busbw_gbps:.2f} GB/s | "
        f"{'-' if c.cv is None else f'{c.cv:.2%}'} | {len(c.subjects)}: {', '.join(c.subjects[:8])} | "
        f"{', '.join(c.excluded) or '-'} |"
        for c in candidates
    ]
    if refused:
        body += ["", "No candidate for:", ""] + [f"- {k}: {v}" for k, v in sorted(refused.items())]
    return {
        "subject": f"Rack {rack}: promote {len(candidates)} NCCL baseline candidate(s)?",
        "body": "\n".join(body),
        "options": [*(c.label for c in candidates), PROMOTE_NONE],
        "defaults": [PROMOTE_NONE],
        "response_timeout": dt.timedelta(minutes=timeout_minutes),
    }


def chosen(candidates: Sequence[Candidate], answer: Mapping[str, Any] | None) -> list[Candidate]:
    """The candidates the answer promotes: none without an answer, on a timeout (nobody answered)
    or when `PROMOTE_NONE` is among the choices."""
    if not answer or answer.get("responded_by_user") is None:
        return []
    picked = {str(c) for c in answer.get("chosen_options") or ()}
    if PROMOTE_NONE in picked:
        return []
    return [c for c in candidates if c.label in picked]


def promote(store: Store, picked: Sequence[Candidate]) -> list[int]:
    """Promote the picked candidates (each retires its scope's previous baseline); their ids. A
    candidate promoted already (a retried task) is left as it is."""
    promoted = []
    for candidate in picked:
        try:
            store.promote_baseline(candidate.baseline_id)
        except ValueError:
            if store_status(store, candidate) != "promoted":
                raise
        promoted.append(candidate.baseline_id)
    return promoted


def store_status(store: Store, candidate: Candidate) -> str | None:
    row = store.promoted_baseline(profile=candidate.profile, metric=METRIC, scope=candidate.scope)
    return "promoted" if row is not None and int(row["id"]) == candidate.baseline_id else None
