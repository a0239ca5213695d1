"""Post-upgrade NCCL sweep, step 3 — isolation: when pairs fail, find the bad node(s) or link(s).

`fleetval.nccl.isolation_search` decides from pair probes with margins, so one noisy probe never
blames anything (pairs only: the pair baseline is the only inter-node baseline measured; see its
module doc). The sweep's pairs are its prior evidence (`SWEPT_POLICY`), not re-probed unless a
failing one needs re-probing as a link question. Nodes are searched per hardware profile (a pair
never mixes profiles), so the searches share no node; one **round** is the next pairs of every
unfinished search, node-disjoint, one repeat at a time (a pair's repeats never run at once on
the same GPUs).

A pair probe is `plan.repeats` nccl-tests runs. The judge stores its verdicts as usual (one
failing repeat fails a criterion); the search reads the probe **by majority**: a single-run
criterion (busbw, errors, transport) counts against the pair when it failed in most repeats,
D-NET-NCCL-04 (spread over the repeats) when it failed. That is what "repeat and use
confidence" means per probe; the search's margins do the same across probes.

`isolation_step` is stateless: it replays the searches over the pair probes already in the store
(judging those whose repeats are all in) and returns the probes to run next, or the final report
once every search is over. Whoever runs the probes (the DAG's isolation task: MPIJobs) stores
their raw output and calls it again; a retried task resumes where the last one stopped. The
`k`-th probe of the same pair in a run is stored under `<run_key>/isolate` (k = 0) or
`<run_key>/isolate/again-<k>`; only the first probe of a pair the sweep did not probe stores
verdicts (a verdict's subject is the pair: a re-probe would overwrite the sweep's or the first
probe's verdicts), the others are judged without storing and listed in the report's `groups`.

A pair whose probe hit a harness error (an MPIJob never admitted, a launcher that could not
start) says nothing about its nodes: its search stops, and the suspects it had not told apart are
`inconclusive` (never blamed on a probe that did not run). A located node gets a D-NET-NCCL-02
`fail` verdict under its own name (the pair verdicts stay on the pairs); nodes that cannot be
told apart get `inconclusive`; both members of a bad link get `warn` (each passes with other
nodes: the link between them — cable, port, switch path — needs a look). Bad links are in the
report (`bad_links`) and in the evidence of every isolation verdict.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval import criteria
from fleetval.nccl.isolation_search import SWEPT_POLICY, ProbeRecord, SearchProgress, resume_search
from fleetval.nccl.judge import ACTIONS
from fleetval.nccl.judge_stored import (
    SINGLE_RUN_CRITERIA,
    BaselineLookup,
    SubjectOutcome,
    evaluate_subject,
    failed_evaluation,
    judge_stored_nccl,
    probe_context,
    repeat_from_probe,
    subject_results,
)
from fleetval.nccl.plan import NcclPlan, probe_specs
from fleetval.nccl.probe import nccl_subject
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result, Verdict
from fleetval.store.repository import Store

PURPOSE: Final = "isolation"
POLICY: Final = SWEPT_POLICY
# Criteria read per repeat (majority of the repeats decides) and over the repeats (as judged).
PER_REPEAT_CRITERIA: Final = ("D-NET-NCCL-01", "D-NET-NCCL-02", *SINGLE_RUN_CRITERIA)
OVER_REPEATS_CRITERIA: Final = ("D-NET-NCCL-04",)


def isolation_run_key(run_key: str) -> str:
    """The key prefix of the isolation pair probes of a sweep run."""
    return f"{run_key}/isolate"


def observation_run_key(run_key: str, attempt: int) -> str:
    """The key prefix of the `attempt`-th isolation probe of one pair (0: the first)."""
    base = isolation_run_key(run_key)
    return base if attempt == 0 else f"{base}/again-{attempt}"


def majority_healthy(verdicts: Iterable[tuple[str, str, Mapping[str, Any]]]) -> bool:
    """How the search reads one probe from its (criterion, result, evidence) verdicts: unhealthy
    when a per-repeat criterion failed in most repeats, or an over-repeats criterion failed."""
    for criterion, result, evidence in verdicts:
        if criterion in OVER_REPEATS_CRITERIA and result == Result.FAIL.value:
            return False
        if criterion in PER_REPEAT_CRITERIA:
            repeats = evidence.get("repeats") or []
            if repeats:
                failing = sum(1 for r in repeats if r.get("result") == Result.FAIL.value)
                if 2 * failing > len(repeats):
                    return False
            elif result == Result.FAIL.value:
                return False
    return True


def _outcome_healthy(outcome: SubjectOutcome) -> bool:
    return majority_healthy((v.criterion, v.result.value, v.evidence) for v in outcome.verdicts)


@dataclass(frozen=True, slots=True)
class IsolationReport:
    failed_pairs: list[list[str]]
    bad: list[str]
    undetermined: list[str]
    probes_used: int
    nodes_considered: int
    groups: list[dict[str, Any]] = field(default_factory=list)
    # Nodes whose search a harness error stopped, and the groups whose probes errored.
    interrupted: list[str] = field(default_factory=list)
    harness_errors: list[str] = field(default_factory=list)
    pair_failures: dict[str, list[str]] = field(default_factory=dict)  # failing pair → criteria
    bad_links: list[list[str]] = field(default_factory=list)
    undetermined_links: list[list[str]] = field(default_factory=list)
    rounds: int = 0  # rounds of MPIJobs (one repeat of every pair of a search round each)
    policy: str = POLICY.policy_id

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class IsolationStep:
    """The probes to run now (node-disjoint; empty when done) or, when done, the report."""

    probes: list[ProbeSpec]
    report: IsolationReport | None = None


@dataclass(slots=True)
class _Search:
    order: list[str]  # suspects first, then known-good partners
    suspects: list[str]
    prior: list[ProbeRecord]
    progress: SearchProgress | None = None
    errored: str | None = None  # subject of the pair whose probe hit a harness error
    pending: list[ProbeSpec] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Observed:
    outcome: SubjectOutcome
    attempt: int
    healthy: bool

    def to_json(self) -> dict[str, Any]:
        return {**self.outcome.to_json(), "observation": self.attempt, "healthy": self.healthy}


def _judge_unstored(
    store: Store, run_id: int, group: Sequence[str], keys: Sequence[str], lookup: BaselineLookup
) -> SubjectOutcome:
    """A re-probe's outcome, judged like any probe but not stored as verdicts (see module doc)."""
    probes = store.probes(run_id, list(keys))
    repeats = [repeat_from_probe(p) for p in probes]
    profile, scope, fabric = probe_context(probes[0])
    ref = lookup(profile, scope)
    try:
        return evaluate_subject(group, repeats, ref=ref, expected_fabric=fabric)
    except Exception as exc:  # a judge bug: an error outcome, as judge_stored_nccl would give
        return failed_evaluation(group, repeats, ref=ref, error=f"{type(exc).__name__}: {exc}"[:500])


def isolation_step(
    store: Store,
    *,
    run_id: int,
    run_key: str,
    plan: NcclPlan,
    lookup: BaselineLookup,
    image: str | None = None,
) -> IsolationStep:
    """The next round of isolation probes, or the final report (see module doc). Judges the
    pair probes that are complete (idempotent); on the final step stores one verdict per
    located or undetermined node and per member of a bad link."""
    rows = store.verdicts(run_id)
    results = subject_results(rows)
    pairs = plan.pairs
    failed = [p for p in pairs if results.get(nccl_subject(p)) is Result.FAIL]
    if not failed:
        return IsolationStep([], IsolationReport([], [], [], 0, 0))
    failed_subjects = {nccl_subject(p) for p in failed}
    pair_failures: dict[str, set[str]] = defaultdict(set)
    by_subject: dict[str, list[tuple[str, str, Mapping[str, Any]]]] = defaultdict(list)
    for row in rows:
        if row["subject"] in failed_subjects:
            by_subject[row["subject"]].append(
                (str(row["criterion"]), str(row["result"]), row["evidence"] or {})
            )
            if row["result"] == Result.FAIL.value:
                pair_failures[row["subject"]].add(str(row["criterion"]))
    good = {
        n for p in pairs if results.get(nccl_subject(p)) not in (Result.FAIL, Result.ERROR, None) for n in p
    }
    # The sweep's answers, read like any isolation probe (majority of the repeats).
    sweep_answers: dict[frozenset[str], bool] = {}
    for p in pairs:
        result = results.get(nccl_subject(p))
        if result in (Result.ERROR, None):
            continue
        subject = nccl_subject(p)
        sweep_answers[frozenset(p)] = result is not Result.FAIL or majority_healthy(by_subject[subject])
    by_profile: dict[tuple[str, int], list[str]] = defaultdict(list)
    for n in sorted({n for p in failed for n in p} - good, key=lambda n: (plan.nodes[n].rack, n)):
        by_profile[(plan.nodes[n].profile, plan.nodes[n].gpus)].append(n)
    searches: list[_Search] = []
    for key, suspects in sorted(by_profile.items()):
        partners = [n for n in sorted(good) if (plan.nodes[n].profile, plan.nodes[n].gpus) == key]
        members = set(suspects) | set(partners)
        prior = [
            ProbeRecord(tuple(p), sweep_answers[frozenset(p)])
            for p in pairs
            if frozenset(p) in sweep_answers and set(p) <= members
        ]
        searches.append(_Search(suspects + partners, suspects, prior))

    observed: list[_Observed] = []

    for search in searches:

        def answer(group: tuple[str, ...], attempt: int, search: _Search = search) -> bool | None:
            specs = probe_specs(
                plan,
                [list(group)],
                run_key=observation_run_key(run_key, attempt),
                purpose=PURPOSE,
                image=image,
            )
            keys = [s.probe_key for s in specs]
            stored = {p["probe_key"] for p in store.probes(run_id, keys, with_raw=False)}
            missing = [s for s in specs if s.probe_key not in stored]
            if missing:
                search.pending.append(min(missing, key=lambda s: int(s.params["repeat"])))
                return None
            if attempt == 0 and frozenset(group) not in sweep_answers:
                (outcome,) = judge_stored_nccl(store, run_id, keys, lookup=lookup)
            else:
                outcome = _judge_unstored(store, run_id, group, keys, lookup)
            healthy = _outcome_healthy(outcome)
            observed.append(_Observed(outcome, attempt, healthy))
            if outcome.result is Result.ERROR:
                search.errored = search.errored or outcome.subject
                return None
            return healthy

        search.progress = resume_search(search.order, answer, prior=search.prior, policy=POLICY)
        if search.errored is not None:
            search.pending.clear()  # the search stops: its other pending probes say nothing now
    to_run = [spec for search in searches for spec in search.pending]
    if to_run:
        return IsolationStep(to_run)

    bad: list[str] = []
    undetermined: list[str] = []
    interrupted: list[str] = []
    bad_links: list[list[str]] = []
    undetermined_links: list[list[str]] = []
    rounds = 0
    for search in searches:
        assert search.progress is not None
        found = search.progress.result
        bad.extend(found.bad)
        undetermined.extend(found.undetermined)
        bad_links.extend(list(link) for link in found.bad_links)
        undetermined_links.extend(list(link) for link in found.undetermined_links)
        rounds = max(rounds, (found.rounds + (search.errored is not None)) * plan.repeats)
        if search.errored is not None:
            cleared = set(search.progress.cleared)
            left = [n for n in search.suspects if n not in cleared and n not in found.bad]
            left = [n for n in left if n not in found.undetermined]
            undetermined.extend(left)
            interrupted.extend(left)
    # Only real probes count: answers the sweep already gave are free.
    report = IsolationReport(
        failed_pairs=[list(p) for p in failed],
        bad=bad,
        undetermined=undetermined,
        probes_used=len(observed),
        nodes_considered=sum(len(s.order) for s in searches),
        groups=[o.to_json() for o in observed],
        interrupted=interrupted,
        harness_errors=[o.outcome.subject for o in observed if o.outcome.result is Result.ERROR],
        pair_failures={subject: sorted(criteria) for subject, criteria in sorted(pair_failures.items())},
        bad_links=bad_links,
        undetermined_links=undetermined_links,
        rounds=rounds,
    )
    store.add_verdicts(run_id, isolation_verdicts(report), node=None)
    return IsolationStep([], report)


def isolation_verdicts(report: IsolationReport) -> list[Verdict]:
    """D-NET-NCCL-02 under the node's own name for each located (fail) or undetermined
    (inconclusive) node, and each member of a bad link (warn)."""
    against = {
        "criteria_catalog": criteria.CATALOG_VERSION,
        "method": "pair testing",
        "policy": report.policy,
    }
    out: list[Verdict] = []
    entries: list[tuple[str, Result, list[str]]] = [
        *((n, Result.FAIL, []) for n in report.bad),
        *((n, Result.INCONCLUSIVE, []) for n in report.undetermined),
        *((n, Result.WARN, link) for link in report.bad_links for n in link),
    ]
    for node, result, link in entries:
        pairs = [p for p in report.failed_pairs if node in p]
        groups = [g for g in report.groups if node in g["nodes"]]
        # What this node broke: failures of groups (else of sweep pairs) in which it was the only
        # located bad node — a node can be located without a group of its own failing.
        alone = [g for g in groups if not (set(g["nodes"]) - {node}) & set(report.bad)]
        pairs_alone = [p for p in pairs if not (set(p) - {node}) & set(report.bad)]
        failed_criteria = sorted(
            {c for g in alone or groups for c in g["failed"]}
            or {c for p in pairs_alone or pairs for c in report.pair_failures.get(nccl_subject(p), [])}
        )
        evidence = {
            "failed_pairs": pairs,
            "isolation_groups": [
                {"subject": g["subject"], "result": g["result"], "healthy": g.get("healthy")} for g in groups
            ],
            "failed_criteria": failed_criteria,
            "probes_used": report.probes_used,
            "nodes_considered": report.nodes_considered,
            "bad_links": [link for link in report.bad_links if node in link],
        }
        if result is Result.FAIL:
            what = ", ".join(failed_criteria) or "pair"
            reason = (
                f"located by pair testing: {node} failed ({what}) with several known-good partners, "
                f"by the margins of {report.policy}; {report.probes_used} extra probes for "
                f"{report.nodes_considered} nodes"
            )
            rule = "nccl.isolation.located"
        elif result is Result.WARN:
            (other,) = set(link) - {node}
            reason = (
                f"{node} passes with other nodes but fails with {other}: the link between them (cable, "
                f"port, switch path) is bad, by the margins of {report.policy}"
            )
            rule = "nccl.isolation.bad_link"
        elif node in report.interrupted:
            reason = (
                f"isolation stopped before {node} was told apart: a group probe hit a harness error "
                f"({', '.join(report.harness_errors[:3])}); rerun the sweep"
            )
            rule = "nccl.isolation.interrupted"
        else:
            reason = (
                f"{node} could not be told apart: its failures are short of the margins of {report.policy} "
                "(no known-good partner left, or its probes disagree)"
            )
            rule = "nccl.isolation.undetermined"
        out.append(Verdict("D-NET-NCCL-02", node, result, ACTIONS[result], rule, reason, evidence, against))
    return out
