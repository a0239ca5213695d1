"""Network-layer suite (layer 4, communication): NCCL sweeps judged against measured baselines, fault
isolation, the post-upgrade gate, and baseline establishment.

probe → raw stored → parse → judge → verdicts stored → gate → act, as in the device suite:

1. **Plan** (`plan_sweep`): every sweepable node gets an intra-node all_reduce over all its GPUs,
   `repeats` times (3: D-NET-NCCL-04 needs three); nodes of one hardware profile are paired so
   every node is in at least one pair (node i with node i + ⌊n/2⌋ of the rack-ordered list, so
   pairs cross racks; an odd node out is paired with the first node), each pair `repeats` times.
   Work is cut into batches so that the number of batches — Airflow's mapped tasks — stays under
   `max_map_length` however large the fleet.
2. **Probe and judge** (`sweep_groups`): raw output stored before parsing; each repeat judged
   against the *promoted* baseline of (profile, `nccl.busbw`, scope) — scope `intra-<gpus>` or
   `inter-2x<gpus>` — and combined per criterion over the repeats (one measured failure fails
   the subject; otherwise the worst result); D-NET-NCCL-04 over the complete repeats. No
   promoted baseline → D-NET-NCCL-01/02 are `inconclusive`, naming the missing profile/scope.
   Measurement rows (one per message size, metric `nccl.busbw`) carry the NCCL version,
   transports, networks, NCCL_* environment, repeat and scope, so baselines can be derived and
   results re-judged from the store alone.
3. **Isolate** (`isolate_failures`): when pairs fail, `planning.nccl_pairs.locate_bad_nodes`
   finds the bad node(s) by group testing. What the sweep already showed is reused instead of
   re-probed: a group made only of nodes from passing pairs is healthy, a group containing a
   whole failing pair is not. A located node gets a D-NET-NCCL-02 `fail` verdict under its own
   name (the pair verdicts stay on the pairs); nodes that cannot be told apart get
   `inconclusive`. Groups of more than two nodes are judged against the pair baseline — busbw is
   normalised for rank count, which is what makes it comparable across group sizes.
4. **Gate** (`decide_gate`, `apply_gate`): any `fail` → the gate fails and the rollout is halted;
   otherwise any `inconclusive`/`error` → `inconclusive` (no automatic halt: rerun or establish a
   baseline); else `pass`. Every judged node is labelled `fleetval.io/nccl-gate=pass|fail|
   inconclusive` through the backend. Halting the rollout on Kubernetes means pausing the GPU
   Operator's driver upgrade controller: ClusterPolicy `spec.driver.upgradePolicy.autoUpgrade=
   false` (the whole state machine pauses; nodes not yet upgraded stay on the old driver) — done
   by the Airflow adapter (`fleetval_airflow.k8s_gate`), recorded here as a node event.
5. **Mark swept** (`mark_swept`): each swept node gets `fleetval.io/nccl-swept-driver=<driver
   version>` so the upgrade trigger does not fire for it again until its driver changes.

Baselines are never taken from spec sheets: `establish_baseline` computes one from a run's stored
measurements on reference nodes (pandas, `fleetval.baselines.nccl`) and stores it as a *candidate*;
promotion is a separate, explicit step (`Store.promote_baseline`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pandas as pd

from fleetval import criteria
from fleetval.backends import Backend, DeclaresFabrics, NodeActions, NodeInfo
from fleetval.baselines.nccl import REQUIRED_COLUMNS, BaselineError, BaselineStats, compute_baseline
from fleetval.errors import ParseError
from fleetval.judges.nccl import ACTIONS, NcclBaseline, judge_nccl_repeats, judge_nccl_run
from fleetval.k8s.specs import ProbeSpec, nccl_probe, nccl_subject
from fleetval.parsers.nccl import NcclRun, parse_nccl
from fleetval.planning.nccl_pairs import IsolationResult, locate_bad_nodes
from fleetval.records import Result, Verdict, worst
from fleetval.store import nccl_queries
from fleetval.store.repository import MeasurementIn, Store
from fleetval.suites import device

SUITE: Final = "post_upgrade_nccl"
METRIC: Final = nccl_queries.METRIC
UNIT: Final = "GB/s"
DEFAULT_REPEATS: Final = 3
NODES_PER_BATCH: Final = 16
PAIRS_PER_BATCH: Final = 8

GATE_LABEL: Final = "fleetval.io/nccl-gate"
SWEPT_LABEL: Final = "fleetval.io/nccl-swept-driver"
FABRIC_LABEL: Final = "fleetval.io/fabric"
UPGRADE_STATE_LABEL: Final = "nvidia.com/gpu-driver-upgrade-state"
UPGRADE_DONE: Final = "upgrade-done"
DRIVER_VERSION_LABEL: Final = "nvidia.com/cuda.driver-version.full"
ROLLOUT_HALT_MECHANISM: Final = (
    "GPU Operator ClusterPolicy spec.driver.upgradePolicy.autoUpgrade=false (pauses the driver upgrade "
    "state machine); nodes labelled fleetval.io/nccl-gate=fail"
)

SINGLE_RUN_CRITERIA: Final = ("D-NET-NCCL-03", "D-NET-NCCL-TRANSPORT")
_LABEL_VALUE: Final = re.compile(r"[^A-Za-z0-9._-]")


def intra_scope(gpus: int) -> str:
    return f"intra-{gpus}"


def inter_scope(gpus: int) -> str:
    return f"inter-2x{gpus}"


def busbw_criterion(nodes: Sequence[str]) -> str:
    return "D-NET-NCCL-02" if len(nodes) > 1 else "D-NET-NCCL-01"


def label_value(text: str) -> str:
    """A valid Kubernetes label value (≤ 63 chars of [A-Za-z0-9._-], alphanumeric at both ends)."""
    value = _LABEL_VALUE.sub("-", text)[:63].strip("-_.")
    return value or "unknown"


def driver_generation(node: NodeInfo) -> str:
    """What an upgrade changed on the node: its driver version (GPU feature discovery's label)."""
    return label_value(node.labels.get(DRIVER_VERSION_LABEL, "unknown"))


def pending_upgrade_nodes(nodes: Iterable[NodeInfo]) -> dict[str, str]:
    """Nodes whose driver upgrade is done (`nvidia.com/gpu-driver-upgrade-state=upgrade-done`)
    and that have not been swept on that driver yet: {node: driver generation}."""
    return {
        n.name: gen
        for n in nodes
        if n.labels.get(UPGRADE_STATE_LABEL) == UPGRADE_DONE
        and n.labels.get(SWEPT_LABEL) != (gen := driver_generation(n))
    }


def expected_fabric(backend: object, node: NodeInfo) -> str | None:
    """The fabric a node's profile declares: the `fleetval.io/fabric` label, else what a backend
    that declares fabrics (the simulator) says for the profile; None when nobody declared it (the
    transport verdict is then inconclusive)."""
    label = node.labels.get(FABRIC_LABEL)
    if label in ("ib", "roce"):
        return label
    if isinstance(backend, DeclaresFabrics):
        return backend.declared_fabric(node.profile)
    return None


def why_not_sweepable(node: NodeInfo) -> str | None:
    if not node.is_gpu_node:
        return "no GPUs"
    if node.quarantined:
        return "quarantined"
    if node.gpu_pods:
        return f"busy ({node.gpu_pods} GPU pods)"
    return None


# --- plan --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeFacts:
    profile: str
    gpus: int
    rack: str
    fabric: str | None
    generation: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class NcclPlan:
    nodes: dict[str, NodeFacts]
    intra_batches: list[list[str]]
    pair_batches: list[list[list[str]]]
    skipped: dict[str, str]
    repeats: int

    @property
    def pairs(self) -> list[list[str]]:
        return [p for batch in self.pair_batches for p in batch]

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": {n: f.to_json() for n, f in self.nodes.items()},
            "intra_batches": self.intra_batches,
            "pair_batches": self.pair_batches,
            "skipped": self.skipped,
            "repeats": self.repeats,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NcclPlan:
        return cls(
            nodes={n: NodeFacts(**f) for n, f in data["nodes"].items()},
            intra_batches=[list(b) for b in data["intra_batches"]],
            pair_batches=[[list(p) for p in b] for b in data["pair_batches"]],
            skipped=dict(data["skipped"]),
            repeats=int(data["repeats"]),
        )


def pair_nodes(names: Sequence[str]) -> list[list[str]]:
    """Every node in at least one pair: i with i + ⌊n/2⌋ (disjoint pairs, far apart in the
    rack-ordered list); an odd node out is paired with the first node."""
    n = len(names)
    if n < 2:
        return []
    half = n // 2
    pairs = [[names[i], names[i + half]] for i in range(half)]
    if n % 2:
        pairs.append([names[-1], names[0]])
    return pairs


def _chunks(items: Sequence[Any], size: int, max_chunks: int) -> list[list[Any]]:
    size = max(size, math.ceil(len(items) / max(1, max_chunks)))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def plan_sweep(
    nodes: Sequence[NodeInfo],
    *,
    repeats: int = DEFAULT_REPEATS,
    fabric_of: Callable[[NodeInfo], str | None] = lambda _n: None,
    only: Sequence[str] | None = None,
    max_batches: int = 1024,
    nodes_per_batch: int = NODES_PER_BATCH,
    pairs_per_batch: int = PAIRS_PER_BATCH,
) -> NcclPlan:
    """Intra-node batches and pair batches for the sweepable nodes (of `only`, when given)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    by_name = {n.name: n for n in nodes}
    skipped: dict[str, str] = {}
    if only is not None:
        wanted = list(dict.fromkeys(only))
        skipped.update({name: "unknown node" for name in wanted if name not in by_name})
        candidates = [by_name[name] for name in wanted if name in by_name]
    else:
        candidates = list(nodes)
    chosen: list[NodeInfo] = []
    for node in candidates:
        reason = why_not_sweepable(node)
        if reason is None:
            chosen.append(node)
        else:
            skipped[node.name] = reason
    chosen.sort(key=lambda n: (n.rack, n.name))
    facts = {n.name: NodeFacts(n.profile, n.gpus, n.rack, fabric_of(n), driver_generation(n)) for n in chosen}
    groups: dict[tuple[str, int], list[str]] = defaultdict(list)
    for n in chosen:
        groups[(n.profile, n.gpus)].append(n.name)
    disjoint: list[list[str]] = []
    odd: list[list[str]] = []
    for key in sorted(groups):
        pairs = pair_nodes(groups[key])
        if len(groups[key]) % 2 and pairs:
            odd.append(pairs.pop())  # shares a node with the first pair: its own batch
        disjoint.extend(pairs)
    pair_batches = _chunks(disjoint, pairs_per_batch, max_batches - len(odd)) + [[p] for p in odd]
    intra = _chunks([n.name for n in chosen], nodes_per_batch, max_batches)
    return NcclPlan(facts, intra, pair_batches, skipped, repeats)


def probe_specs(
    plan: NcclPlan, groups: Sequence[Sequence[str]], *, run_key: str, purpose: str
) -> list[ProbeSpec]:
    """`plan.repeats` NCCL probes for each node group (one node, or a pair/group of one profile)."""
    specs: list[ProbeSpec] = []
    for group in groups:
        facts = plan.nodes[group[0]]
        scope = intra_scope(facts.gpus) if len(group) == 1 else inter_scope(facts.gpus)
        specs.extend(
            nccl_probe(
                group,
                gpus_per_node=facts.gpus,
                repeat=r,
                run_key=run_key,
                profile=facts.profile,
                scope=scope,
                fabric=facts.fabric,
                purpose=purpose,
            )
            for r in range(plan.repeats)
        )
    return specs


# --- store raw ---------------------------------------------------------------------------------


# --- judge -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BaselineRef:
    """The baseline a subject is judged against (None: no promoted baseline) and its store id."""

    profile: str
    scope: str
    baseline: NcclBaseline | None = None
    row_id: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> BaselineRef:
        source = row.get("source") or {}
        return cls(
            profile=str(row["profile"]),
            scope=str(row["scope"]),
            baseline=NcclBaseline(
                baseline_id=str(row["id"]),
                version=int(row["version"]),
                profile=str(row["profile"]),
                scope=str(row["scope"]),
                busbw_gbps=float(row["value"]),
                collective=str(source.get("collective", "all_reduce")),
            ),
            row_id=int(row["id"]),
        )


BaselineLookup = Callable[[str, str], BaselineRef]


def promoted_lookup(store: Store) -> BaselineLookup:
    """(profile, scope) → the promoted `nccl.busbw` baseline, read once per pair of keys."""
    cache: dict[tuple[str, str], BaselineRef] = {}

    def lookup(profile: str, scope: str) -> BaselineRef:
        key = (profile, scope)
        if key not in cache:
            row = store.promoted_baseline(profile=profile, metric=METRIC, scope=scope)
            cache[key] = BaselineRef.from_row(row) if row else BaselineRef(profile, scope)
        return cache[key]

    return lookup


@dataclass(frozen=True, slots=True)
class Repeat:
    """One stored repeat: the parsed run, or why there is none (harness error / unparseable)."""

    probe_key: str
    probe_id: int | None
    repeat: int
    run: NcclRun | None
    harness_error: str | None = None
    parse_error: str | None = None


def repeat_from_probe(probe: Mapping[str, Any]) -> Repeat:
    spec = probe.get("spec") or {}
    params = spec.get("params") or {}
    harness = spec.get("harness_error")
    run: NcclRun | None = None
    parse_error: str | None = None
    if not harness:
        try:
            run = parse_nccl(probe["raw"])
        except ParseError as exc:
            parse_error = str(exc)
    return Repeat(
        probe_key=str(probe["probe_key"]),
        probe_id=int(probe["id"]) if probe.get("id") is not None else None,
        repeat=int(params.get("repeat", 0)),
        run=run,
        harness_error=str(harness) if harness else None,
        parse_error=parse_error,
    )


@dataclass(frozen=True, slots=True)
class SubjectOutcome:
    subject: str
    nodes: tuple[str, ...]
    profile: str
    scope: str
    result: Result
    failed: tuple[str, ...]
    verdicts: tuple[Verdict, ...] = ()
    measurements: dict[str, list[MeasurementIn]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "nodes": list(self.nodes),
            "profile": self.profile,
            "scope": self.scope,
            "result": self.result.value,
            "failed": list(self.failed),
        }


def _no_run_verdict(criterion: str, subject: str, rep: Repeat) -> Verdict:
    if rep.harness_error:
        return Verdict(
            criterion,
            subject,
            Result.ERROR,
            ACTIONS[Result.ERROR],
            "harness.probe_failed",
            "the probe did not run to completion",
            {"error": rep.harness_error, "probe_key": rep.probe_key},
            {"criteria_catalog": criteria.CATALOG_VERSION},
        )
    return Verdict(
        criterion,
        subject,
        Result.INCONCLUSIVE,
        ACTIONS[Result.INCONCLUSIVE],
        "nccl.unparseable",
        f"nothing recognisable in the output: {rep.parse_error}",
        {"probe_key": rep.probe_key},
        {"criteria_catalog": criteria.CATALOG_VERSION},
    )


def _name_baseline(v: Verdict, ref: BaselineRef) -> Verdict:
    """Busbw verdicts carry the baseline's store id (an int, so the row's FK is set), or say
    which profile/scope has no promoted baseline."""
    if v.rule_id == "nccl.busbw.no_baseline":
        return dataclasses.replace(
            v,
            reason=(
                f"no promoted {METRIC} baseline for profile {ref.profile!r} scope {ref.scope!r}: "
                "establish one from reference nodes and promote it"
            ),
            judged_against={**v.judged_against, "baseline": None, "profile": ref.profile, "scope": ref.scope},
        )
    if ref.row_id is not None and "baseline_id" in v.judged_against:
        return dataclasses.replace(v, judged_against={**v.judged_against, "baseline_id": ref.row_id})
    return v


def _combine(criterion: str, subject: str, per_repeat: Sequence[tuple[Repeat, Verdict]]) -> Verdict:
    """One verdict per criterion and subject: a measured failure in any repeat fails; otherwise
    the worst result. The representative repeat's rule, reason and baseline are kept."""
    results = [v.result for _, v in per_repeat]
    combined = Result.FAIL if Result.FAIL in results else worst(results)
    rep = next(v for _, v in per_repeat if v.result is combined)
    count = results.count(combined)
    reason = (
        rep.reason if len(results) == 1 else f"{count}/{len(results)} repeats {combined.value}: {rep.reason}"
    )
    evidence = {
        **rep.evidence,
        "repeats": [
            {
                "repeat": r.repeat,
                "probe_key": r.probe_key,
                "result": v.result.value,
                "rule_id": v.rule_id,
                **{k: v.evidence[k] for k in ("busbw_gbps", "ratio") if k in v.evidence},
            }
            for r, v in per_repeat
        ],
    }
    return Verdict(
        criterion, subject, combined, rep.action, rep.rule_id, reason, evidence, rep.judged_against
    )


def measurement_rows(
    run: NcclRun, *, subject: str, repeat: int, profile: str, scope: str, usable: bool
) -> list[MeasurementIn]:
    """One `nccl.busbw` row per message size, with what must be recorded with every result."""
    common = {
        "repeat": repeat,
        "profile": profile,
        "scope": scope,
        "collective": run.collective,
        "nranks": run.nranks,
        "nnodes": run.nnodes,
        "nccl_version": run.nccl_version,
        "transports": list(run.transports),
        "networks": list(run.networks),
        "nccl_env": dict(run.nccl_env),
        "in_network_reduction": run.in_network_reduction,
        "complete": run.complete,
        "usable": usable,
    }
    return [
        MeasurementIn(
            node=subject,
            metric=METRIC,
            value=row.busbw_oop,
            unit=UNIT,
            attrs={
                **common,
                "size": row.size,
                "algbw_gbps": row.algbw_oop,
                "time_us": row.time_oop,
                "busbw_ip_gbps": row.busbw_ip,
            },
        )
        for row in run.rows
        if row.busbw_oop is not None
    ]


def evaluate_subject(
    nodes: Sequence[str],
    repeats: Sequence[Repeat],
    *,
    ref: BaselineRef,
    expected_fabric: str | None,
) -> SubjectOutcome:
    """All NCCL verdicts of one node or group over its repeats (pure; see module doc)."""
    subject = nccl_subject(nodes)
    reps = sorted(repeats, key=lambda r: r.repeat)
    busbw_crit = busbw_criterion(nodes)
    per_crit: dict[str, list[tuple[Repeat, Verdict]]] = defaultdict(list)
    measurements: dict[str, list[MeasurementIn]] = {}
    for rep in reps:
        if rep.run is None:
            for crit in (busbw_crit, *SINGLE_RUN_CRITERIA):
                per_crit[crit].append((rep, _no_run_verdict(crit, subject, rep)))
            measurements[rep.probe_key] = []
            continue
        verdicts = judge_nccl_run(
            rep.run,
            subject=subject,
            baseline=ref.baseline,
            expected_fabric=expected_fabric,
            criterion=busbw_crit,
        )
        for v in verdicts:
            per_crit[v.criterion].append((rep, _name_baseline(v, ref)))
        usable = rep.run.complete and all(
            v.result is Result.PASS for v in verdicts if v.criterion in SINGLE_RUN_CRITERIA
        )
        measurements[rep.probe_key] = measurement_rows(
            rep.run, subject=subject, repeat=rep.repeat, profile=ref.profile, scope=ref.scope, usable=usable
        )
    combined = [_combine(c, subject, per_crit[c]) for c in (busbw_crit, *SINGLE_RUN_CRITERIA) if per_crit[c]]
    complete = [r.run for r in reps if r.run is not None and r.run.complete]
    stability = judge_nccl_repeats(complete, subject=subject)
    stability = dataclasses.replace(
        stability,
        evidence={**stability.evidence, "repeats_run": len(reps), "probe_keys": [r.probe_key for r in reps]},
    )
    if len(nodes) > 2:  # a group's subject may be a digest: name its members
        combined = [dataclasses.replace(v, evidence={**v.evidence, "nodes": list(nodes)}) for v in combined]
    final = (*combined, stability)
    results = [v.result for v in final]
    return SubjectOutcome(
        subject=subject,
        nodes=tuple(nodes),
        profile=ref.profile,
        scope=ref.scope,
        result=Result.FAIL if Result.FAIL in results else worst(results),
        failed=tuple(v.criterion for v in final if v.result is Result.FAIL),
        verdicts=final,
        measurements=measurements,
    )


def group_probes(probes: Iterable[Mapping[str, Any]]) -> dict[tuple[str, ...], list[Mapping[str, Any]]]:
    """Stored probes by their node group (the repeats of one subject)."""
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for p in probes:
        params = (p.get("spec") or {}).get("params") or {}
        nodes = tuple(params.get("nodes") or p["nodes"])
        groups[nodes].append(p)
    return groups


def probe_context(probe: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(profile, scope, expected fabric) recorded in a stored probe's spec."""
    params = (probe.get("spec") or {}).get("params") or {}
    return str(params.get("profile", "")), str(params.get("scope", "")), params.get("fabric")


def judge_stored_nccl(
    store: Store, run_id: int, probe_keys: Sequence[str], *, lookup: BaselineLookup
) -> list[SubjectOutcome]:
    """Parse and judge stored NCCL probes of a run; store measurements and one verdict per
    criterion and subject. Re-judging the same probes replaces, never duplicates."""
    outcomes: list[SubjectOutcome] = []
    attach: list[tuple[str, Sequence[MeasurementIn], Sequence[Verdict], str | None]] = []
    for nodes, probes in group_probes(store.probes(run_id, probe_keys)).items():
        profile, scope, fabric = probe_context(probes[0])
        outcome = evaluate_subject(
            nodes, [repeat_from_probe(p) for p in probes], ref=lookup(profile, scope), expected_fabric=fabric
        )
        node = nodes[0] if len(nodes) == 1 else None
        attach.extend((key, rows, (), node) for key, rows in outcome.measurements.items())
        outcomes.append(outcome)
    store.attach_results(run_id, attach)
    for outcome in outcomes:
        store.add_verdicts(
            run_id, outcome.verdicts, node=outcome.nodes[0] if len(outcome.nodes) == 1 else None
        )
    return outcomes


def sweep_groups(
    store: Store,
    backend: Backend,
    *,
    run_id: int,
    run_key: str,
    plan: NcclPlan,
    groups: Sequence[Sequence[str]],
    lookup: BaselineLookup,
    purpose: str = "sweep",
) -> list[SubjectOutcome]:
    """Probe node groups (`plan.repeats` each), store raw, judge, store verdicts."""
    if not groups:
        return []
    specs = probe_specs(plan, groups, run_key=run_key, purpose=purpose)
    keys: list[str] = []
    for repeat in range(plan.repeats):  # repeats one after another: a node never races itself
        outputs = backend.run_probes([s for s in specs if s.params["repeat"] == repeat])
        keys.extend(device.store_probe_outputs(store, run_id, outputs))
    return judge_stored_nccl(store, run_id, keys, lookup=lookup)


def summarize(outcomes: Sequence[SubjectOutcome]) -> dict[str, Any]:
    return {
        "subjects": len(outcomes),
        "results": dict(Counter(o.result.value for o in outcomes)),
        "failed": {o.subject: list(o.failed) for o in outcomes if o.failed},
    }


# --- isolate -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IsolationReport:
    failed_pairs: list[list[str]]
    bad: list[str]
    undetermined: list[str]
    probes_used: int
    nodes_considered: int
    groups: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def subject_results(rows: Iterable[Mapping[str, Any]]) -> dict[str, Result]:
    """Per subject of a run's verdict rows: fail if any verdict failed, else the worst result."""
    by_subject: dict[str, list[Result]] = defaultdict(list)
    for r in rows:
        by_subject[str(r["subject"])].append(Result(r["result"]))
    return {s: Result.FAIL if Result.FAIL in results else worst(results) for s, results in by_subject.items()}


def isolate_failures(
    store: Store,
    backend: Backend,
    *,
    run_id: int,
    run_key: str,
    plan: NcclPlan,
    lookup: BaselineLookup,
) -> IsolationReport:
    """Locate the node(s) behind failing pairs (see module doc, step 3); stores the group
    probes, their verdicts and one verdict per located or undetermined node."""
    results = subject_results(store.verdicts(run_id))
    pairs = plan.pairs
    failed = [p for p in pairs if results.get(nccl_subject(p)) is Result.FAIL]
    if not failed:
        return IsolationReport([], [], [], 0, 0)
    good = {
        n for p in pairs if results.get(nccl_subject(p)) not in (Result.FAIL, Result.ERROR, None) for n in p
    }
    failed_sets = [frozenset(p) for p in failed]
    bad: list[str] = []
    undetermined: list[str] = []
    groups: list[dict[str, Any]] = []
    considered = 0
    by_profile: dict[tuple[str, int], list[str]] = defaultdict(list)
    for n in sorted({n for p in failed for n in p} - good, key=lambda n: (plan.nodes[n].rack, n)):
        by_profile[(plan.nodes[n].profile, plan.nodes[n].gpus)].append(n)
    for (profile, gpus), suspects in sorted(by_profile.items()):
        partners = [n for n in sorted(good) if (plan.nodes[n].profile, plan.nodes[n].gpus) == (profile, gpus)]
        order = suspects + partners
        considered += len(order)

        def probe(group: tuple[str, ...]) -> bool:
            members = frozenset(group)
            if members <= good:
                return True  # every member passed in a sweep pair
            if any(f <= members for f in failed_sets):
                return False  # contains a pair that failed in the sweep
            (outcome,) = sweep_groups(
                store,
                backend,
                run_id=run_id,
                run_key=f"{run_key}/isolate",
                plan=plan,
                groups=[list(group)],
                lookup=lookup,
                purpose="isolation",
            )
            groups.append(outcome.to_json())
            return outcome.result not in (Result.FAIL, Result.ERROR)

        found: IsolationResult = locate_bad_nodes(order, probe)
        bad.extend(found.bad)
        undetermined.extend(found.undetermined)
    # Only real probes count: answers the sweep already gave are free.
    report = IsolationReport([list(p) for p in failed], bad, undetermined, len(groups), considered, groups)
    store.add_verdicts(run_id, isolation_verdicts(report), node=None)
    return report


def isolation_verdicts(report: IsolationReport) -> list[Verdict]:
    """D-NET-NCCL-02 under the node's own name for each located (fail) or undetermined node."""
    against = {"criteria_catalog": criteria.CATALOG_VERSION, "method": "adaptive group testing"}
    out: list[Verdict] = []
    for node, result in [(n, Result.FAIL) for n in report.bad] + [
        (n, Result.INCONCLUSIVE) for n in report.undetermined
    ]:
        pairs = [p for p in report.failed_pairs if node in p]
        groups = [g for g in report.groups if node in g["nodes"]]
        # What this node broke: failures of groups in which it was the only located bad node.
        alone = [g for g in groups if not (set(g["nodes"]) - {node}) & set(report.bad)]
        failed_criteria = sorted({c for g in alone or groups for c in g["failed"]})
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
        else:
            reason = f"{node} could not be told apart from its pair partner (no known-good partner)"
            rule = "nccl.isolation.undetermined"
        out.append(Verdict("D-NET-NCCL-02", node, result, ACTIONS[result], rule, reason, evidence, against))
    return out


# --- gate --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GateDecision:
    result: Result
    halt_rollout: bool
    node_labels: dict[str, str]
    failed_subjects: list[str]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "result": self.result.value,
            "halt_rollout": self.halt_rollout,
            "node_labels": self.node_labels,
            "failed_subjects": self.failed_subjects,
            "reason": self.reason,
        }


def decide_gate(rows: Iterable[Mapping[str, Any]], plan: NcclPlan) -> GateDecision:
    """The post-upgrade gate from a run's verdicts (see module doc, step 4)."""
    results = subject_results(rows)
    failed_subjects = sorted(s for s, r in results.items() if r is Result.FAIL)
    labels: dict[str, str] = {}
    for node in plan.nodes:
        mine = results.get(node)  # the node's own subject: intra-node and isolation verdicts
        if mine is Result.FAIL:
            labels[node] = "fail"
        elif mine is Result.PASS:
            labels[node] = "pass"
        else:
            labels[node] = "inconclusive"
    if not results:
        result = Result.INCONCLUSIVE
    else:
        result = Result.FAIL if failed_subjects else worst(list(results.values()))
    if result is Result.FAIL:
        reason = f"{len(failed_subjects)} subject(s) failed: {', '.join(failed_subjects[:10])}"
    elif result is Result.PASS:
        reason = f"all {len(results)} subjects passed"
    else:
        reason = f"no failure, but not every subject passed (worst: {result.value})"
    return GateDecision(result, result is Result.FAIL, labels, failed_subjects, reason)


def apply_gate(
    store: Store,
    nodes: NodeActions,
    *,
    run_id: int,
    run_key: str,
    decision: GateDecision,
    dry_run: bool,
) -> list[str]:
    """Label every judged node with the gate's word on it and record the rollout halt; in dry-run
    nothing is touched and the events say so. Returns the nodes labelled `fail`."""
    for node, value in sorted(decision.node_labels.items()):
        if not dry_run:
            nodes.set_labels(node, {GATE_LABEL: value})
        store.record_node_event(
            f"{run_key}/nccl-gate/{node}",
            node=node,
            kind="label",
            reason=f"{GATE_LABEL}={value}",
            dry_run=dry_run,
            run_id=run_id,
            details={"label": GATE_LABEL, "value": value, "gate": decision.result.value},
        )
    if decision.halt_rollout:
        store.record_node_event(
            f"{run_key}/nccl-rollout-halt",
            node="cluster",
            kind="rollout_halt",
            reason=decision.reason,
            dry_run=dry_run,
            run_id=run_id,
            details={"mechanism": ROLLOUT_HALT_MECHANISM, "failed_subjects": decision.failed_subjects[:50]},
        )
    return sorted(n for n, v in decision.node_labels.items() if v == "fail")


def mark_swept(nodes: NodeActions, plan: NcclPlan, swept: Iterable[str], *, dry_run: bool) -> dict[str, str]:
    """`fleetval.io/nccl-swept-driver=<driver generation>` on the swept nodes (not in dry-run)."""
    marked = {n: plan.nodes[n].generation for n in sorted(set(swept)) if n in plan.nodes}
    if not dry_run:
        for node, generation in marked.items():
            nodes.set_labels(node, {SWEPT_LABEL: generation})
    return marked


def swept_nodes(store: Store, run_id: int) -> list[str]:
    """Nodes with a stored intra-node probe in this run."""
    return sorted({p for p in store.probed_nodes(run_id) if "+" not in p})


# --- in-process run ----------------------------------------------------------------------------


def run_sweep(
    store: Store,
    backend: Backend,
    *,
    run_key: str,
    nodes: Sequence[str] | None,
    repeats: int = DEFAULT_REPEATS,
    dry_run: bool = False,
    fleet: str | None = None,
) -> int:
    """The whole post-upgrade sweep in-process (what the DAG does task by task). Returns the run id."""
    run_id = store.ensure_run(
        run_key, suite=SUITE, backend=backend.name, fleet=fleet, meta={"dry_run": dry_run}
    )
    plan = plan_sweep(
        backend.list_nodes(), repeats=repeats, fabric_of=lambda n: expected_fabric(backend, n), only=nodes
    )
    store.update_run_meta(run_id, plan=plan.to_json())
    lookup = promoted_lookup(store)
    for batch in plan.intra_batches:
        sweep_groups(
            store,
            backend,
            run_id=run_id,
            run_key=run_key,
            plan=plan,
            groups=[[n] for n in batch],
            lookup=lookup,
        )
    for pair_batch in plan.pair_batches:
        sweep_groups(
            store, backend, run_id=run_id, run_key=run_key, plan=plan, groups=pair_batch, lookup=lookup
        )
    report = isolate_failures(store, backend, run_id=run_id, run_key=run_key, plan=plan, lookup=lookup)
    decision = decide_gate(store.verdicts(run_id), plan)
    apply_gate(store, backend, run_id=run_id, run_key=run_key, decision=decision, dry_run=dry_run)
    marked = mark_swept(backend, plan, swept_nodes(store, run_id), dry_run=dry_run)
    store.update_run_meta(run_id, isolation=report.to_json(), gate=decision.to_json(), swept=marked)
    store.finish_run(run_id)
    return run_id


# --- baselines ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EstablishedBaseline:
    baseline_id: int
    version: int
    value: float
    stats: dict[str, Any]
    source: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def baseline_from_rows(
    rows: Sequence[Mapping[str, Any]], *, exclude_outliers: bool = True
) -> tuple[Any, list[str]]:
    """compute_baseline over measurement rows, dropping reference subjects that are outliers
    (below D-NET-NCCL-01's min_ratio of the others: a sick reference node must not set the bar)."""
    frame = pd.DataFrame.from_records(
        [{c: r[c] for c in REQUIRED_COLUMNS} for r in rows], columns=list(REQUIRED_COLUMNS)
    )
    stats = compute_baseline(frame)
    excluded: list[str] = []
    if exclude_outliers and stats.outlier_nodes and len(stats.outlier_nodes) < len(stats.per_node):
        excluded = list(stats.outlier_nodes)
        stats = compute_baseline(frame.loc[~frame["node"].isin(excluded)])
    return stats, excluded


def establish_baseline(
    store: Store,
    run_id: int,
    profile: str,
    scope: str,
    *,
    nodes: Sequence[str] | None = None,
    collective: str = "all_reduce",
) -> EstablishedBaseline:
    """A candidate `nccl.busbw` baseline for (profile, scope) from the usable measurements this
    run took on its reference nodes (all probed subjects, or `nodes`). Not promoted."""
    rows = nccl_queries.nccl_measurements(store, profile=profile, scope=scope, run_id=run_id, nodes=nodes)
    if not rows:
        raise BaselineError(
            f"run {run_id} has no usable {METRIC} measurements for profile {profile!r} scope {scope!r}"
        )
    stats, excluded = baseline_from_rows(rows)
    if stats.headline_busbw_gbps is None:
        raise BaselineError(f"no rows with size >= {stats.min_size_bytes} B: no headline busbw")
    source = {
        "method": "median over runs of each run's mean busbw at sizes >= 1 GiB (fleetval.baselines.nccl)",
        "run_ids": [run_id],
        "reference_subjects": sorted({str(r["node"]) for r in rows} - set(excluded)),
        "excluded_outliers": excluded,
        "collective": collective,
        "measurement_rows": len(rows),
    }
    baseline_id, version = save_candidate(store, profile=profile, scope=scope, stats=stats, source=source)
    return EstablishedBaseline(baseline_id, version, stats.headline_busbw_gbps, stats.to_json(), source)


def save_candidate(
    store: Store, *, profile: str, scope: str, stats: BaselineStats, source: dict[str, Any]
) -> tuple[int, int]:
    """Store `stats`' headline busbw as the next candidate version of (profile, scope)."""
    if stats.headline_busbw_gbps is None:
        raise BaselineError(f"no rows with size >= {stats.min_size_bytes} B: no headline busbw")
    return store.add_baseline_candidate(
        profile=profile,
        metric=METRIC,
        scope=scope,
        value=stats.headline_busbw_gbps,
        unit=UNIT,
        stats=stats.to_json(),
        source=source,
    )
