"""The steps that change the taken nodes: `take` (cordon), the layout checks (`apply_layouts`:
D-GPU-MIG-01, -05; `refused_layout`: -02; `busy_reconfig`: -06) and `restore` (the original layout,
then uncordon). Each layout change is a `nvidia.com/mig.config` label the nodes are watched after,
stored as raw evidence (the Node snapshots the judges read) before it is judged."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from kubernetes.client.exceptions import ApiException

from fleetval.k8s.cluster import PAGE, gpu_pods_per_node, paged
from fleetval.mig import catalog as mig_catalog
from fleetval.mig import reconfig
from fleetval.mig.suite_pods import delete_pod, fill_pod, start_pods
from fleetval.mig.suite_run import ACTIONS, MigRun
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result, Verdict
from fleetval.store.repository import MeasurementIn

VALIDATION_LABEL: Final = "fleetval.io/mig-validation"
TOOL_CHANGE: Final = "mig-reconfig"
PATCH_WORKERS: Final = 16


# --- taking nodes -----------------------------------------------------------------------------------------


def take(run: MigRun) -> list[str]:
    """Cordon each planned node that is still idle and uncordoned; returns the ones taken."""
    pods = gpu_pods_per_node(run.core)
    taken = []
    for planned in run.plan.nodes:
        node = run.core.api_client.sanitize_for_serialization(run.core.read_node(planned.node))
        labels = (node.get("metadata") or {}).get("labels") or {}
        why = (
            "cordoned meanwhile"
            if (node.get("spec") or {}).get("unschedulable")
            else f"busy meanwhile ({pods[planned.node]} GPU pods)"
            if pods.get(planned.node)
            else None
            if labels.get(reconfig.STATE_LABEL) == "success"
            and labels.get(reconfig.CONFIG_LABEL) == planned.original
            else "its MIG layout changed meanwhile"
        )
        if why is not None:
            run.store.add_verdicts(
                run.run_id, [_not_run(planned.node, f"not taken: {why}")], node=planned.node
            )
            continue
        run.actions.cordon(planned.node)
        run.actions.set_labels(planned.node, {VALIDATION_LABEL: "running"})
        run.store.record_node_event(
            f"{run.run_key}/mig/{planned.node}/cordon",
            node=planned.node,
            kind="cordon",
            reason="mig_validation: MIG layouts are changed on this node",
            dry_run=False,
            run_id=run.run_id,
            details={"original": planned.original},
        )
        taken.append(planned.node)
    return taken


def _not_run(node: str, reason: str) -> Verdict:
    return Verdict(
        "D-GPU-MIG-01",
        node,
        Result.INCONCLUSIVE,
        ACTIONS[Result.INCONCLUSIVE],
        "mig-validation-node-not-taken-v1",
        reason,
    )


# --- changing a layout and watching the node ------------------------------------------------------------


# done(node, its snapshot now, every one since the change, the one before it): stop watching it?
Done = Callable[[str, reconfig.NodeSnapshot, list[reconfig.NodeSnapshot], reconfig.NodeSnapshot], bool]


def _moved(
    snap: reconfig.NodeSnapshot, seen: list[reconfig.NodeSnapshot], before: reconfig.NodeSnapshot
) -> bool:
    """The MIG manager acted on the change: it said pending, or the node advertises something else.
    (`success` alone may still be the old layout's, before the manager saw the new label.)"""
    return "pending" in {s.state for s in seen} or reconfig.advertised(snap) != reconfig.advertised(before)


def _snapshot(run: MigRun, node: str) -> reconfig.NodeSnapshot:
    body = run.core.api_client.sanitize_for_serialization(run.core.read_node(node))
    return reconfig.node_snapshot(body, run.clock())


def _snapshots(run: MigRun, nodes: Iterable[str]) -> dict[str, reconfig.NodeSnapshot]:
    """The nodes now: one list of the nodes this suite holds (its label), not a read per node."""
    wanted = set(nodes)
    listed = paged(
        lambda token: run.core.list_node(
            label_selector=f"{VALIDATION_LABEL}=running", limit=PAGE, _continue=token
        )
    )
    at = run.clock()
    found = {}
    for node in listed:
        body = run.core.api_client.sanitize_for_serialization(node)
        if body["metadata"]["name"] in wanted:
            found[body["metadata"]["name"]] = reconfig.node_snapshot(body, at)
    for name in wanted - set(found):  # not (or no longer) labelled: read it
        found[name] = _snapshot(run, name)
    return found


def change_layouts(
    run: MigRun,
    targets: Mapping[str, str],
    *,
    done: Done,
    expected: Mapping[str, dict[str, int] | None] | None = None,
    refused_reasons: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, reconfig.Change]:
    """Set each node's `nvidia.com/mig.config` to its target and read the nodes every `poll_s`
    until `done` says so for each, or `watch_s` has passed."""
    before = _snapshots(run, targets)
    started: dict[str, float] = {}

    def label(node: str) -> None:
        started[node] = run.clock()
        run.actions.set_labels(node, {reconfig.CONFIG_LABEL: targets[node]})

    # All at once (16 in flight), so that no node's clock runs while the others are being labelled.
    with ThreadPoolExecutor(max_workers=PATCH_WORKERS) as pool:
        list(pool.map(label, sorted(targets)))
    seen: dict[str, list[reconfig.NodeSnapshot]] = {node: [] for node in targets}
    open_nodes = set(targets)
    begin = run.clock()
    while open_nodes:
        for node, snap in sorted(_snapshots(run, open_nodes).items()):
            seen[node].append(snap)
            if done(node, snap, seen[node], before[node]):
                open_nodes.discard(node)
        if not open_nodes or run.clock() - begin >= run.watch_s:
            break
        run.sleep(run.poll_s)
    return {
        node: reconfig.Change(
            node=node,
            config=config,
            requested_at=started[node],
            snapshots=tuple(seen[node]),
            before=before[node],
            expected=(expected or {}).get(node),
            refused_reasons=(refused_reasons or {}).get(node, ()),
            watch_s=min(run.watch_s, run.clock() - started[node]),
        )
        for node, config in targets.items()
    }


def _store_change(
    run: MigRun,
    change: reconfig.Change,
    *,
    step: str,
    verdicts: Sequence[Verdict],
    timed: Verdict | None = None,
) -> None:
    """The change's snapshots as the probe's raw output, then its verdicts and, from `timed` (its
    D-GPU-MIG-01 judgement), the advertise time as a measurement."""
    raw = json.dumps(
        {
            "config": change.config,
            "requested_at": change.requested_at,
            "before": change.before.to_json(),
            "snapshots": [s.to_json() for s in change.snapshots],
        },
        sort_keys=True,
    )
    spec = ProbeSpec(
        probe_key=f"{run.run_key}/{TOOL_CHANGE}/{step}/{change.node}",
        tool=TOOL_CHANGE,
        node=change.node,
        image="",
        command=(),
        params={"source": "PATCH and GET /api/v1/nodes", "config": change.config, "step": step},
    )
    now = time.time()
    probe_outputs.store_probe_outputs(
        run.store,
        run.run_id,
        [probe_outputs.probe_output(spec, raw, exit_code=0, error=None, finished_at=now)],
    )
    measurements = []
    if timed is not None and "seconds" in timed.evidence:
        seconds = float(timed.evidence["seconds"])
        measurements.append(
            MeasurementIn(
                change.node, "mig_advertise_seconds", seconds, unit="s", attrs={"config": change.config}
            )
        )
    run.store.attach_results(run.run_id, [(spec.probe_key, measurements, verdicts, change.node)])


def _combined(node: str, verdicts: Sequence[Verdict]) -> Verdict:
    """One D-GPU-MIG-01 verdict per node: the worst of its layout changes, each one's reason kept."""
    if len(verdicts) == 1:
        return verdicts[0]
    worst = max(verdicts, key=lambda v: v.result.severity)
    return Verdict(
        worst.criterion,
        node,
        worst.result,
        worst.action,
        worst.rule_id,
        "; ".join(v.reason for v in verdicts),
        {"changes": [v.evidence for v in verdicts]},
        worst.judged_against,
    )


def _layouts_on(run: MigRun, node: str, config_name: str) -> list[dict[str, int]]:
    planned = run.plan.node(node)
    return mig_catalog.node_layouts(
        run.mig_config, config_name, mig_catalog.catalog()[planned.gpu], planned.gpus
    )


def _expected(run: MigRun, targets: Mapping[str, str]) -> dict[str, dict[str, int] | None]:
    """What each node must advertise once it holds its target (None: its strategy cannot say)."""
    return {
        n: reconfig.expected_resources(_layouts_on(run, n, cfg), run.plan.node(n).strategy)
        for n, cfg in targets.items()
    }


def _settled(expected: Mapping[str, dict[str, int] | None]) -> Done:
    def done(
        node: str,
        snap: reconfig.NodeSnapshot,
        _seen: list[reconfig.NodeSnapshot],
        _before: reconfig.NodeSnapshot,
    ) -> bool:
        want = expected.get(node)
        if snap.state == "failed":
            return True
        return snap.state == "success" and want is not None and reconfig.advertises(snap, want)

    return done


# --- the layout checks ------------------------------------------------------------------------------------


def apply_layouts(run: MigRun, *, max_s: float | None) -> list[Verdict]:
    """D-GPU-MIG-01 for every layout of each taken node (all nodes step together; `max_s`: its
    advertise limit, None for the criterion's), and D-GPU-MIG-05 once each node holds its last layout."""
    verdicts: list[Verdict] = []
    timed: dict[str, list[Verdict]] = {n: [] for n in run.taken}
    steps = max((len(run.plan.node(n).layouts) for n in run.taken), default=0)
    for index in range(steps):
        targets = {
            n: run.plan.node(n).layouts[index] for n in run.taken if index < len(run.plan.node(n).layouts)
        }
        expected = _expected(run, targets)
        changes = change_layouts(run, targets, done=_settled(expected), expected=expected)
        for node, change in changes.items():
            v01 = reconfig.judge_advertised_in_time(change, max_s=max_s)
            timed[node].append(v01)
            judged = []
            if index == len(run.plan.node(node).layouts) - 1 and change.snapshots:
                layouts = _layouts_on(run, node, change.config)
                if any(layout for layout in layouts):
                    judged.append(reconfig.judge_sold_as_profile(node, change.snapshots[-1], layouts))
            _store_change(run, change, step=f"apply-{index}", verdicts=judged, timed=v01)
            verdicts += judged
    for node, judged_01 in timed.items():
        if judged_01:
            combined = _combined(node, judged_01)
            run.store.add_verdicts(run.run_id, [combined], node=node)
            verdicts.append(combined)
    return verdicts


def refused_layout(run: MigRun) -> list[Verdict]:
    """D-GPU-MIG-02: each taken node is asked for a layout the catalog refuses on its GPU."""
    verdicts = []
    targets = {n: p.refused for n in run.taken if (p := run.plan.node(n)).refused}
    for node in run.taken:
        if node not in targets:
            why = "the mig-parted config has no layout this GPU cannot hold: nothing to refuse"
            verdict = Verdict(
                reconfig.CRITERION_REFUSE,
                node,
                Result.INCONCLUSIVE,
                ACTIONS[Result.INCONCLUSIVE],
                reconfig.RULE_REFUSE,
                why,
            )
            run.store.add_verdicts(run.run_id, [verdict], node=node)
            verdicts.append(verdict)

    def done(
        node: str,
        snap: reconfig.NodeSnapshot,
        seen: list[reconfig.NodeSnapshot],
        before: reconfig.NodeSnapshot,
    ) -> bool:
        return snap.state == "failed" or (snap.state == "success" and _moved(snap, seen, before))

    changes = change_layouts(
        run,
        {n: str(t) for n, t in targets.items()},
        done=done,
        refused_reasons={n: run.plan.node(n).refused_reasons for n in targets},
    )
    for change in changes.values():
        judged = [reconfig.judge_refused(change)]
        _store_change(run, change, step="refused", verdicts=judged)
        verdicts += judged
    return verdicts


def busy_reconfig(run: MigRun, *, not_probed: Mapping[str, str] | None = None) -> list[Verdict]:
    """D-GPU-MIG-06: a pod holding one instance (a CUDA context and its memory), then a layout change;
    not on the nodes in `not_probed` (they do not advertise the instances the pod asks for)."""
    verdicts: list[Verdict] = []
    skip = {n: why for n, why in (not_probed or {}).items() if why}
    able = [n for n in run.taken if run.plan.node(n).probe_profile and n not in skip]
    for node in sorted(set(run.taken) - set(able)):
        why = skip.get(node) or "the node holds no MIG instance to run work on"
        verdict = Verdict(
            reconfig.CRITERION_BUSY,
            node,
            Result.INCONCLUSIVE,
            ACTIONS[Result.INCONCLUSIVE],
            reconfig.RULE_BUSY,
            why,
        )
        run.store.add_verdicts(run.run_id, [verdict], node=node)
        verdicts.append(verdict)
    pods = {n: fill_pod(run, n, str(run.plan.node(n).probe_profile), 1, what="work") for n in able}
    names = start_pods(run, pods)
    samples: dict[str, list[reconfig.PodSample]] = {n: [] for n in names}

    def sample(node: str) -> reconfig.PodSample:
        try:
            pod = run.core.api_client.sanitize_for_serialization(
                run.core.read_namespaced_pod(names[node], run.pod_namespace)
            )
        except ApiException as exc:
            if exc.status == 404:
                return reconfig.PodSample(run.clock(), None)
            raise
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
        return reconfig.PodSample(run.clock(), (pod.get("status") or {}).get("phase"), restarts)

    for node in names:
        samples[node].append(sample(node))

    def done(
        node: str,
        snap: reconfig.NodeSnapshot,
        seen: list[reconfig.NodeSnapshot],
        before: reconfig.NodeSnapshot,
    ) -> bool:
        samples[node].append(sample(node))
        if samples[node][-1].phase != "Running" or snap.state == "failed":
            return True
        return snap.state == "success" and _moved(snap, seen, before)

    changes = change_layouts(run, {n: run.plan.node(n).busy_target for n in names}, done=done)
    for node, change in changes.items():
        samples[node].append(sample(node))
        judged = [
            reconfig.judge_busy_reconfig(reconfig.BusyChange(change, names[node], tuple(samples[node])))
        ]
        _store_change(run, change, step="busy", verdicts=judged)
        verdicts += judged
    for name in names.values():
        delete_pod(run, name)
    return verdicts


# --- giving nodes back ------------------------------------------------------------------------------------


def restore(run: MigRun) -> dict[str, bool]:
    """Each taken node back on its original layout, then uncordoned; a node that does not come back
    stays cordoned with an `error` verdict."""
    targets = {n: run.plan.node(n).original for n in run.taken}
    expected = _expected(run, targets)
    changes = change_layouts(run, targets, done=_settled(expected), expected=expected)
    back = {}
    for node, change in changes.items():
        last = change.snapshots[-1] if change.snapshots else change.before
        want = expected[node]
        ok = last.state == "success" and want is not None and reconfig.advertises(last, want)
        back[node] = ok
        if ok:
            run.actions.uncordon(node)
            run.actions.set_labels(node, {VALIDATION_LABEL: None})
            run.store.record_node_event(
                f"{run.run_key}/mig/{node}/uncordon",
                node=node,
                kind="uncordon",
                reason=f"mig_validation: restored {change.config}",
                dry_run=False,
                run_id=run.run_id,
            )
            judged: list[Verdict] = []
        else:
            run.actions.set_labels(node, {VALIDATION_LABEL: "restore-failed"})
            reason = (
                f"could not restore {change.config} within {run.watch_s:.0f} s "
                f"(state {last.state or 'none'}): the node stays cordoned for a person to look at"
            )
            judged = [
                Verdict(
                    "D-GPU-MIG-01",
                    f"{node}/restore",
                    Result.ERROR,
                    ACTIONS[Result.ERROR],
                    "mig-validation-restore-v1",
                    reason,
                    change.evidence(),
                )
            ]
        _store_change(run, change, step="restore", verdicts=judged)
    return back
