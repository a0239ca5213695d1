"""dcgm-exporter is paused on a wave's nodes within its budget, left alone where it is not ours to
touch, waited for, recorded, and restored to the value it had (also after a run that died)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from fleetval.dcgm import exporter_pause as ep
from fleetval.nodes import NodeInfo


def node(name: str, exporter: str | None = "true", **labels: str) -> NodeInfo:
    all_labels = dict(labels)
    if exporter is not None:
        all_labels[ep.EXPORTER_DEPLOY_LABEL] = exporter
    return NodeInfo(name=name, rack="r01", profile="H100", gpus=8, labels=all_labels)


class FakeCluster:
    """Nodes' labels, and a DaemonSet that removes the exporter pod `lag` polls after the label changes."""

    def __init__(self, nodes: list[NodeInfo], *, lag: int = 1, refuse: frozenset[str] = frozenset()) -> None:
        self.labels = {n.name: dict(n.labels) for n in nodes}
        self.lag = lag
        self.refuse = refuse
        self.patches: list[tuple[str, dict[str, str | None]]] = []
        self.polls = 0

    def node(self, name: str) -> NodeInfo | None:
        if name not in self.labels:
            return None
        return NodeInfo(name=name, rack="r01", profile="H100", gpus=8, labels=dict(self.labels[name]))

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        if node in self.refuse:
            raise ApiException(status=403, reason="Forbidden")
        self.patches.append((node, labels))
        for key, value in labels.items():
            if value is None:
                self.labels[node].pop(key, None)
            else:
                self.labels[node][key] = value

    def labelled_nodes(self, label_key: str) -> dict[str, dict[str, str]]:
        return {n: dict(labels) for n, labels in self.labels.items() if label_key in labels}

    def nodes_running_pods(self, label_selector: str) -> set[str]:
        assert label_selector == ep.EXPORTER_POD_SELECTOR
        self.polls += 1
        if self.polls <= self.lag:
            return set(self.labels)  # the DaemonSet has not caught up yet
        return {n for n, labels in self.labels.items() if labels.get(ep.EXPORTER_DEPLOY_LABEL) == "true"}


class Events:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def record_node_event(self, event_key: str, **row: Any) -> bool:
        if event_key in self.rows:
            return False
        self.rows[event_key] = row
        return True

    def kinds(self) -> list[tuple[str, str, bool]]:
        return sorted((r["node"], r["kind"], r["dry_run"]) for r in self.rows.values())


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def pause(cluster: FakeCluster, events: Events, nodes: list[str], clock: Clock, **kw: Any) -> ep.PauseOutcome:
    args: dict[str, Any] = {"fleet_size": 20, "policy": ep.PausePolicy(), "dry_run": False} | kw
    return ep.pause_exporters(
        nodes,
        cluster=cluster,
        events=events,
        run_id=1,
        run_key="weekly/run1",
        clock=clock,
        sleep=clock.sleep,
        **args,
    )


def restore(
    cluster: FakeCluster, events: Events, nodes: list[str], clock: Clock, **kw: Any
) -> ep.PauseOutcome:
    return ep.restore_exporters(
        nodes,
        cluster=cluster,
        events=events,
        run_id=1,
        run_key="weekly/run1",
        dry_run=kw.get("dry_run", False),
        policy=ep.PausePolicy(),
        clock=clock,
    )


def test_pause_waits_for_the_exporter_to_go_and_restore_gives_back_what_was_there() -> None:
    cluster = FakeCluster([node("a"), node("b"), node("c")], lag=2)
    events, clock = Events(), Clock()
    outcome = pause(cluster, events, ["a", "b"], clock)
    assert outcome.paused == ("a", "b") and outcome.still_running == () and not outcome.skipped
    assert cluster.labels["a"][ep.EXPORTER_DEPLOY_LABEL] == ep.PAUSED
    assert cluster.labels["a"][ep.WAS_LABEL] == "true"
    assert cluster.labels["c"] == {ep.EXPORTER_DEPLOY_LABEL: "true"}  # not in the wave
    assert cluster.polls == 3  # two polls found the pods still there

    restored = restore(cluster, events, ["a", "b"], clock)
    assert restored.restored == ("a", "b")
    assert cluster.labels["a"] == {ep.EXPORTER_DEPLOY_LABEL: "true"}  # bookkeeping gone too
    assert events.kinds() == [
        ("a", "pause_exporter", False),
        ("a", "restore_exporter", False),
        ("b", "pause_exporter", False),
        ("b", "restore_exporter", False),
    ]


def test_exporters_that_are_off_paused_by_others_or_unmanaged_are_left_alone() -> None:
    wave = [node("off", "false"), node("mig", "paused-for-mig-change"), node("bare", None), node("on")]
    decisions = ep.plan_pause(
        [(n.name, n.labels) for n in wave], paused_elsewhere=0, fleet_size=100, policy=ep.PausePolicy()
    )
    assert [(d.node, d.action) for d in decisions] == [
        ("off", ep.SKIP),
        ("mig", ep.SKIP),
        ("bare", ep.SKIP),
        ("on", ep.PAUSE),
    ]
    assert "paused-for-mig-change" in decisions[1].reason
    cluster = FakeCluster(wave)
    events, clock = Events(), Clock()
    pause(cluster, events, [n.name for n in wave], clock)
    assert [n for n, _ in cluster.patches] == ["on"]
    restore(cluster, events, [n.name for n in wave], clock)
    assert cluster.labels["mig"] == {
        ep.EXPORTER_DEPLOY_LABEL: "paused-for-mig-change"
    }  # still the MIG manager's
    assert cluster.labels["off"] == {ep.EXPORTER_DEPLOY_LABEL: "false"}


def test_the_pause_budget_counts_pauses_already_in_place() -> None:
    # 20 nodes at 10 %: at most 2 without an exporter; one is still paused from elsewhere.
    cluster = FakeCluster([node(f"n{i}") for i in range(5)])
    cluster.labels["n4"].update(ep.pause_labels("true", 1_000_000.0))
    cluster.labels["n4"][ep.EXPORTER_DEPLOY_LABEL] = ep.PAUSED
    outcome = pause(cluster, Events(), ["n0", "n1", "n2"], Clock())
    assert outcome.paused == ("n0",)
    assert set(outcome.skipped) == {"n1", "n2"} and "budget" in outcome.skipped["n1"]
    # A retried task keeps its own pauses without counting them twice or patching again.
    again = pause(cluster, Events(), ["n0", "n1", "n2"], Clock())
    assert again.paused == ("n0",) and [n for n, _ in cluster.patches] == ["n0"]


def test_a_dry_run_records_and_touches_nothing() -> None:
    cluster = FakeCluster([node("a"), node("b")])
    events, clock = Events(), Clock()
    outcome = pause(cluster, events, ["a", "b"], clock, dry_run=True)
    assert outcome.paused == ("a", "b") and cluster.patches == [] and cluster.polls == 0
    assert events.kinds() == [("a", "pause_exporter", True), ("b", "pause_exporter", True)]


def test_an_exporter_that_does_not_go_is_reported_and_the_diagnostic_goes_ahead() -> None:
    cluster = FakeCluster([node("a")], lag=10_000)
    clock = Clock()
    outcome = pause(cluster, Events(), ["a"], clock, policy=ep.PausePolicy(wait_s=30))
    assert outcome.still_running == ("a",) and outcome.paused == ("a",)
    assert 30 <= clock.now - 1_000_000.0 < 36  # waited its time, no longer


def test_a_node_the_api_refuses_to_label_is_skipped_with_the_reason() -> None:
    cluster = FakeCluster([node("a"), node("b")], refuse=frozenset({"a"}))
    outcome = pause(cluster, Events(), ["a", "b"], Clock())
    assert outcome.paused == ("b",) and outcome.skipped["a"].startswith("could not label the node: 403")


def test_restore_undoes_a_stale_pause_left_by_a_dead_run_but_not_a_fresh_one() -> None:
    clock = Clock()
    cluster = FakeCluster([node("old"), node("fresh"), node("mine")])
    for name, age in (("old", 7 * 3600), ("fresh", 600)):
        cluster.labels[name].update(ep.pause_labels("true", clock.now - age))
        cluster.labels[name][ep.EXPORTER_DEPLOY_LABEL] = ep.PAUSED
    pause(cluster, Events(), ["mine"], clock, fleet_size=40)  # stale pauses count: room for 4
    outcome = restore(cluster, Events(), ["mine"], clock)
    assert outcome.restored == ("mine", "old")
    assert cluster.labels["fresh"][ep.EXPORTER_DEPLOY_LABEL] == ep.PAUSED  # another run is diagnosing it


def test_restore_keeps_a_value_someone_set_during_the_pause() -> None:
    cluster = FakeCluster([node("a")])
    clock = Clock()
    pause(cluster, Events(), ["a"], clock)
    cluster.labels["a"][ep.EXPORTER_DEPLOY_LABEL] = "false"  # the platform team turned it off meanwhile
    restore(cluster, Events(), ["a"], clock)
    assert cluster.labels["a"] == {ep.EXPORTER_DEPLOY_LABEL: "false"}


def test_a_restore_the_api_refuses_fails_after_restoring_the_rest() -> None:
    cluster = FakeCluster([node("a"), node("b")])
    clock = Clock()
    pause(cluster, Events(), ["a", "b"], clock)
    cluster.refuse = frozenset({"a"})
    with pytest.raises(ep.ExporterRestoreError, match="a \\(403"):
        restore(cluster, Events(), ["a", "b"], clock)
    assert cluster.labels["b"][ep.EXPORTER_DEPLOY_LABEL] == "true"


@pytest.mark.parametrize("labels", [{}, {ep.PAUSED_AT_LABEL: "yesterday"}])
def test_a_pause_without_a_readable_time_is_stale(labels: dict[str, str]) -> None:
    paused = {"x": {ep.EXPORTER_DEPLOY_LABEL: ep.PAUSED, ep.WAS_LABEL: "true", **labels}}
    assert ep.stale_pauses(paused, now=dt.datetime.now(dt.UTC).timestamp(), policy=ep.PausePolicy()) == ["x"]
