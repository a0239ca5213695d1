"""The weekly judge step against the real PostgreSQL store: one read and one write transaction,
and the same verdicts, node events and patches as the step-by-step path (record the missing
probes, judge and attach, act and record each event, add the alerts) for a wave with failing
nodes, a probe that stored nothing and an action budget that withholds; a crash between the
patches and the write is retried to the same rows."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from fleetval.dcgm import steps as dcgm_steps
from fleetval.dcgm import weekly
from fleetval.fleet.spec import load_fleet_spec
from fleetval.nodes import NodeInfo
from fleetval.policy.blast_radius import ActionBudget, DiagnosisBudget
from fleetval.probes import outputs as probe_outputs
from fleetval.remediation import apply_actions
from fleetval.sim.images import dcgm_report
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.models import Measurement, Probe
from fleetval.store.repository import Store
from tests.paths import DEMO_FLEET

FLEET = load_fleet_spec(DEMO_FLEET.read_text())
AS_OF = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
RUN_KEY = "weekly_health_sweep/scheduled__judge"
MISSING = "r02-n07"  # its probe task failed before the pod completed: nothing stored
VERDICT_COLUMNS = ("criterion", "subject", "node", "result", "action", "rule_id", "reason")
BUDGET = ActionBudget(0.05, 0.25)  # 16 GPU nodes: one disruptive action, the others withheld


class Nodes:
    """Records the node patches, in order."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, ...]] = []

    def cordon(self, node: str) -> None:
        self.ops.append(("cordon", node))

    def uncordon(self, node: str) -> None:
        self.ops.append(("uncordon", node))

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self.ops.append(("label", node, *sorted(f"{k}={v}" for k, v in labels.items())))

    def add_taint(self, node: str, key: str, value: str, effect: str) -> None:
        self.ops.append(("taint", node, key, value, effect))

    def remove_taint(self, node: str, key: str) -> None:
        self.ops.append(("untaint", node, key))

    def cordon_and_taint(
        self, node: str, *, key: str, value: str, effect: str, labels: dict[str, str | None] | None = None
    ) -> None:  # pragma: no cover - not a judge step's operation
        raise AssertionError("the weekly judge patches one operation at a time")


@pytest.fixture
def stores(pg_server_url: str) -> Iterator[Any]:
    """`make()`: a store in a fresh PostgreSQL database, dropped after the test."""
    admin = sa.create_engine(pg_server_url, isolation_level="AUTOCOMMIT")
    made: list[tuple[str, sa.Engine]] = []

    def make() -> Store:
        name = f"fleetval_test_{uuid.uuid4().hex[:10]}"
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        engine = make_engine(sa.make_url(pg_server_url).set(database=name).render_as_string(False))
        upgrade(engine)
        made.append((name, engine))
        return Store(engine)

    yield make
    for name, engine in made:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def plan() -> weekly.SweepPlan:
    nodes = [
        NodeInfo(name, rack=rack.name, profile=rack.profile, gpus=FLEET.profile_of(name).gpus)
        for name, rack in FLEET.nodes()
    ]
    return weekly.plan_sweep(nodes, DiagnosisBudget(1.0, 1.0), max_waves=16, max_wave_size=16)


def probed_run(store: Store, sweep: weekly.SweepPlan) -> int:
    """The run with every probe's raw output stored (what each probe task does), but MISSING's."""
    run_id = store.ensure_run(RUN_KEY, suite="weekly", backend="kubernetes")
    outputs = [
        probe_outputs.probe_output(
            spec, dcgm_report(FLEET, spec.node, 2), exit_code=0, error=None, finished_at=AS_OF.timestamp()
        )
        for spec in weekly.wave_probes(sweep, 0, run_key=RUN_KEY)
        if spec.node != MISSING
    ]
    probe_outputs.store_probe_outputs(store, run_id, outputs)
    return run_id


def judge_new(
    store: Store, nodes: Nodes, run_id: int, sweep: weekly.SweepPlan, dry_run: bool
) -> dict[str, Any]:
    return weekly.judge_wave(
        store,
        nodes,
        run_id=run_id,
        run_key=RUN_KEY,
        plan=sweep,
        wave_index=0,
        action_budget=BUDGET,
        dry_run=dry_run,
        as_of=AS_OF,
    )


def judge_step_by_step(
    store: Store, nodes: Nodes, run_id: int, sweep: weekly.SweepPlan, dry_run: bool
) -> None:
    """The judge step as separate store visits: each public step on its own."""
    specs = weekly.wave_probes(sweep, 0, run_key=RUN_KEY)
    probe_outputs.record_missing_probes(store, run_id, specs)
    decisions = dcgm_steps.judge_stored_dcgm(
        store, run_id, [s.probe_key for s in specs], gate=weekly.GATE, level=weekly.LEVEL
    )
    alerts = apply_actions(
        dcgm_steps.planned_actions(decisions, sweep.rack_of),
        nodes=nodes,
        store=store,
        run_id=run_id,
        run_key=RUN_KEY,
        budget=BUDGET,
        fleet_size=sweep.fleet_size,
        rack_sizes=sweep.rack_sizes,
        dry_run=dry_run,
        as_of=AS_OF,
    )
    store.add_verdicts(run_id, alerts)


def rows(store: Store, run_id: int) -> dict[str, Any]:
    return {
        "verdicts": sorted(
            (*(v[c] for c in VERDICT_COLUMNS), repr(v["evidence"]), v["probe_id"] is None)
            for v in store.verdicts(run_id)
        ),
        "node_events": [
            (e["event_key"], e["node"], e["kind"], e["reason"], e["dry_run"], e["details"], e["at"])
            for e in store.node_events(run_id=run_id)
        ],
        "probes": sorted(
            (p["probe_key"], p["nodes"], p["exit_code"], p["raw"], p["spec"]) for p in store.probes(run_id)
        ),
        "measurements": store.count(Measurement),
    }


class RoundTrips:
    """Connections checked out of the engine's pool, transactions begun and committed."""

    def __init__(self, engine: sa.Engine) -> None:
        self.checkouts = self.begins = self.commits = 0
        self.engine = engine
        self._hooks = [
            (engine.pool, "checkout", self._checkout),
            (engine, "begin", self._begin),
            (engine, "commit", self._commit),
        ]

    def _checkout(self, *_: Any) -> None:
        self.checkouts += 1

    def _begin(self, *_: Any) -> None:
        self.begins += 1

    def _commit(self, *_: Any) -> None:
        self.commits += 1

    def __enter__(self) -> RoundTrips:
        for target, name, fn in self._hooks:
            sa.event.listen(target, name, fn)
        return self

    def __exit__(self, *_: object) -> None:
        for target, name, fn in self._hooks:
            sa.event.remove(target, name, fn)


@pytest.mark.parametrize("dry_run", [False, True], ids=["act", "dry_run"])
def test_the_judge_step_reads_once_writes_once_and_matches_the_step_by_step_path(
    stores: Any, dry_run: bool
) -> None:
    sweep = plan()
    assert MISSING in sweep.waves[0]

    old_store, old_nodes = stores(), Nodes()
    old_run = probed_run(old_store, sweep)
    with RoundTrips(old_store.engine) as old_trips:
        judge_step_by_step(old_store, old_nodes, old_run, sweep, dry_run)

    new_store, new_nodes = stores(), Nodes()
    new_run = probed_run(new_store, sweep)
    with RoundTrips(new_store.engine) as trips:
        summary = judge_new(new_store, new_nodes, new_run, sweep, dry_run)

    # One read transaction (no commit) and one write transaction; the counter sees the old path's many.
    assert (trips.checkouts, trips.begins, trips.commits) == (2, 2, 1)
    assert old_trips.checkouts > 2

    expected = rows(old_store, old_run)
    assert rows(new_store, new_run) == expected
    assert new_nodes.ops == old_nodes.ops
    # The wave had what the comparison is for: failures acted on and withheld, a missing probe.
    assert summary["results"]["fail"] >= 2 and summary["results"]["error"] == 1
    assert len(summary["withheld"]) == summary["results"]["fail"] - 1
    kinds = {e[2] for e in expected["node_events"]}
    assert {"cordon", "taint", "withheld"} <= kinds
    assert any(v[1] == MISSING and v[5] == "harness.probe_failed" for v in expected["verdicts"])
    assert any(p[1] == [MISSING] and p[4]["harness_error"] for p in expected["probes"])
    assert bool(new_nodes.ops) is not dry_run


@pytest.mark.parametrize("dry_run", [False, True], ids=["act", "dry_run"])
def test_a_crash_between_the_patches_and_the_write_is_retried_to_the_same_rows(
    stores: Any, dry_run: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = plan()
    clean_store, clean_nodes = stores(), Nodes()
    clean_run = probed_run(clean_store, sweep)
    judge_new(clean_store, clean_nodes, clean_run, sweep, dry_run)

    store, nodes = stores(), Nodes()
    run_id = probed_run(store, sweep)
    before = rows(store, run_id)

    def crash(*_: Any, **__: Any) -> None:
        raise ConnectionError("the worker died")

    monkeypatch.setattr(store, "record_judgement", crash)
    with pytest.raises(ConnectionError):
        judge_new(store, nodes, run_id, sweep, dry_run)
    assert rows(store, run_id) == before  # nothing of the judgement stored
    patched = list(nodes.ops)
    monkeypatch.undo()

    judge_new(store, nodes, run_id, sweep, dry_run)  # the retry
    assert nodes.ops == patched * 2  # the same patches again, in the same order
    assert nodes.ops[len(patched) :] == clean_nodes.ops
    assert rows(store, run_id) == rows(clean_store, clean_run)
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(Probe)).scalar_one() == len(sweep.waves[0])
