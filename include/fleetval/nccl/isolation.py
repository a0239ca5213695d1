"""Post-upgrade NCCL sweep, step 3 — isolation: when pairs fail, find the bad node(s) behind them.

`fleetval.nccl.isolation_search` finds bad nodes by adaptive group testing, one group probe after another.
What the sweep already showed is reused instead of re-probed: a group made only of nodes from
passing pairs is healthy, a group containing a whole failing pair is not. Nodes are searched per
hardware profile (a group never mixes profiles), so the searches share no node and their next
probes run together: one **round** is the next probe of every unfinished search, one repeat at a
time (a group's repeats never run at once on the same GPUs).

`isolation_step` is stateless: it replays the searches over the group probes already in the store
(judging the groups whose repeats are all in) and returns the probes to run next, or the final
report once every search is over. Whoever runs the probes (the DAG's isolation task: MPIJobs)
stores their raw output and calls it again; a retried task resumes where the last one stopped.

A group whose probe hit a harness error (an MPIJob never admitted, a launcher that could not
start) says nothing about its nodes: its search stops, and the suspects it had not told apart are
`inconclusive` (never blamed on a probe that did not run). A located node gets a D-NET-NCCL-02
`fail` verdict under its own name (the pair verdicts stay on the pairs); nodes that cannot be
told apart get `inconclusive`.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval import criteria
from fleetval.nccl.isolation_search import SearchProgress, resume_search
from fleetval.nccl.judge import ACTIONS
from fleetval.nccl.judge_stored import BaselineLookup, SubjectOutcome, judge_stored_nccl, subject_results
from fleetval.nccl.plan import NcclPlan, probe_specs
from fleetval.nccl.probe import nccl_subject
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result, Verdict
from fleetval.store.repository import Store

PURPOSE: Final = "isolation"


def isolation_run_key(run_key: str) -> str:
    """The key prefix of the isolation group probes of a sweep run."""
    return f"{run_key}/isolate"


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
    progress: SearchProgress | None = None
    errored: str | None = None  # subject of the group whose probe hit a harness error


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
    group probes that are complete (idempotent); on the final step stores one verdict per
    located or undetermined node."""
    rows = store.verdicts(run_id)
    results = subject_results(rows)
    pairs = plan.pairs
    failed = [p for p in pairs if results.get(nccl_subject(p)) is Result.FAIL]
    if not failed:
        return IsolationStep([], IsolationReport([], [], [], 0, 0))
    failed_subjects = {nccl_subject(p) for p in failed}
    pair_failures: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        if row["subject"] in failed_subjects and row["result"] == Result.FAIL.value:
            pair_failures[row["subject"]].add(str(row["criterion"]))
    good = {
        n for p in pairs if results.get(nccl_subject(p)) not in (Result.FAIL, Result.ERROR, None) for n in p
    }
    failed_sets = [frozenset(p) for p in failed]
    by_profile: dict[tuple[str, int], list[str]] = defaultdict(list)
    for n in sorted({n for p in failed for n in p} - good, key=lambda n: (plan.nodes[n].rack, n)):
        by_profile[(plan.nodes[n].profile, plan.nodes[n].gpus)].append(n)
    searches: list[_Search] = []
    for key, suspects in sorted(by_profile.items()):
        partners = [n for n in sorted(good) if (plan.nodes[n].profile, plan.nodes[n].gpus) == key]
        searches.append(_Search(suspects + partners, suspects))

    iso_key = isolation_run_key(run_key)
    probed: dict[frozenset[str], SubjectOutcome] = {}  # groups probed, in the order first asked
    to_run: list[ProbeSpec] = []

    def answer(group: tuple[str, ...]) -> bool | None:
        members = frozenset(group)
        if members <= good:
            return True  # every member passed in a sweep pair
        if any(f <= members for f in failed_sets):
            return False  # contains a pair that failed in the sweep
        outcome = probed.get(members)
        if outcome is None or outcome.result is Result.ERROR:
            return None
        return outcome.result is not Result.FAIL

    for search in searches:
        while True:
            search.progress = resume_search(search.order, answer)
            group = search.progress.next_group
            if group is None:
                break
            members = frozenset(group)
            if members in probed:  # asked again after a harness error: the search stops here
                search.errored = probed[members].subject
                break
            specs = probe_specs(plan, [list(group)], run_key=iso_key, purpose=PURPOSE, image=image)
            stored = {
                p["probe_key"] for p in store.probes(run_id, [s.probe_key for s in specs], with_raw=False)
            }
            missing = [s for s in specs if s.probe_key not in stored]
            if missing:
                to_run.append(min(missing, key=lambda s: int(s.params["repeat"])))
                break
            (probed[members],) = judge_stored_nccl(store, run_id, [s.probe_key for s in specs], lookup=lookup)
    if to_run:
        return IsolationStep(to_run)

    bad: list[str] = []
    undetermined: list[str] = []
    interrupted: list[str] = []
    for search in searches:
        assert search.progress is not None
        found = search.progress.result
        bad.extend(found.bad)
        undetermined.extend(found.undetermined)
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
        probes_used=len(probed),
        nodes_considered=sum(len(s.order) for s in searches),
        groups=[o.to_json() for o in probed.values()],
        interrupted=interrupted,
        harness_errors=[o.subject for o in probed.values() if o.result is Result.ERROR],
        pair_failures={subject: sorted(criteria) for subject, criteria in sorted(pair_failures.items())},
    )
    store.add_verdicts(run_id, isolation_verdicts(report), node=None)
    return IsolationStep([], report)


def isolation_verdicts(report: IsolationReport) -> list[Verdict]:
    """D-NET-NCCL-02 under the node's own name for each located (fail) or undetermined node."""
    against = {"criteria_catalog": criteria.CATALOG_VERSION, "method": "adaptive group testing"}
    out: list[Verdict] = []
    for node, result in [(n, Result.FAIL) for n in report.bad] + [
        (n, Result.INCONCLUSIVE) for n in report.undetermined
    ]:
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
            "isolation_groups": [{"subject": g["subject"], "result": g["result"]} for g in groups],
            "failed_criteria": failed_criteria,
            "probes_used": report.probes_used,
            "nodes_considered": report.nodes_considered,
        }
        if result is Result.FAIL:
            what = ", ".join(failed_criteria) or "pair"
            reason = (
                f"located by group testing: groups with {node} failed ({what}), groups without it "
                f"passed; {report.probes_used} extra probes for {report.nodes_considered} nodes"
            )
            rule = "nccl.isolation.located"
        elif node in report.interrupted:
            reason = (
                f"isolation stopped before {node} was told apart: a group probe hit a harness error "
                f"({', '.join(report.harness_errors[:3])}); rerun the sweep"
            )
            rule = "nccl.isolation.interrupted"
        else:
            reason = f"{node} could not be told apart from its pair partner (no known-good partner)"
            rule = "nccl.isolation.undetermined"
        out.append(Verdict("D-NET-NCCL-02", node, result, ACTIONS[result], rule, reason, evidence, against))
    return out
