"""The store on the real PostgreSQL and on SQLite: migrations, idempotent writes, baselines."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest
import sqlalchemy as sa

from fleetval.records import Result, Verdict
from fleetval.store import migrations as store_migrations
from fleetval.store.engine import make_engine
from fleetval.store.migrate import current, upgrade
from fleetval.store.models import Measurement, NodeEvent, Probe, Run, VerdictRow
from fleetval.store.repository import MeasurementIn, ProbeIn, Store

VERDICT = Verdict(
    "D-DEV-03",
    "r01-n01",
    Result.FAIL,
    "cordon_quarantine_schedule_r3",
    "dev.weekly.fail",
    "r2 failed",
    {"findings": [{"test": "memory", "gpus": ["5"]}]},
    {"policy_version": "node-health/test"},
)


def _probe(key: str, node: str, raw: str = '{"DCGM Diagnostic": {}}\n', n_measurements: int = 3) -> ProbeIn:
    return ProbeIn(
        probe_key=key,
        tool="dcgm",
        raw=raw,
        nodes=(node,),
        measurements=tuple(
            MeasurementIn(node, "dcgm.test_result", float(i), gpu=str(i)) for i in range(n_measurements)
        ),
        verdicts=(dataclasses.replace(VERDICT, subject=node),),
    )


def test_migrations_are_idempotent_and_create_every_table(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade(engine)
    upgrade(engine)
    versions = pathlib.Path(store_migrations.__file__).parent / "versions"
    assert current(engine) == max(p.name[:4] for p in versions.glob("[0-9]*.py"))
    tables = set(sa.inspect(engine).get_table_names())
    assert {
        "runs",
        "probes",
        "measurements",
        "verdicts",
        "baselines",
        "node_events",
        "sim_fleets",
        "sim_objects",
        "xid_inbox",
    } <= tables
    assert "sim_nodes" not in tables  # the in-database simulator is gone (0004)


def test_ingest_twice_never_duplicates(store: Store) -> None:
    run_id = store.ensure_run("weekly/run-1", suite="weekly", backend="sim")
    assert store.ensure_run("weekly/run-1", suite="weekly", backend="sim") == run_id
    probes = [_probe(f"weekly/run-1/dcgm-r2/n{i}", f"n{i}") for i in range(700)]  # > COPY threshold
    store.ingest(run_id, probes)
    store.ingest(run_id, probes)
    assert store.count(Run) == 1
    assert store.count(Probe) == 700
    assert store.count(Measurement) == 2100
    assert store.count(VerdictRow) == 700


def test_raw_output_is_kept_verbatim_with_its_hash(store: Store) -> None:
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    raw = 'WARNING: not json\n{"a":\t"tab\\u00e9"}\r\nback\\slash\n'
    store.ingest(run_id, [_probe("r/p", "n1", raw=raw)])
    [row] = store.probes(run_id)
    assert store.probe_raw(row["id"]) == raw
    import hashlib

    assert row["raw_sha256"] == hashlib.sha256(raw.encode()).hexdigest()


def test_rejudging_a_probe_replaces_its_measurements_and_verdicts(store: Store) -> None:
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    store.ingest(run_id, [_probe("r/p", "n1", n_measurements=5)])
    passed = dataclasses.replace(VERDICT, subject="n1", result=Result.PASS, action="none")
    store.attach_results(run_id, [("r/p", [MeasurementIn("n1", "m", 1.0)], [passed], "n1")])
    assert store.count(Measurement) == 1
    [verdict] = store.verdicts(run_id)
    assert verdict["result"] == "pass"
    assert verdict["node"] == "n1"


def test_a_verdict_judged_again_to_the_same_outcome_keeps_its_first_judgement(store: Store) -> None:
    """A retried task rewrites nothing it already stored; a changed outcome replaces the row."""
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    store.ingest(run_id, [_probe("r/p", "n1")])
    [first] = store.verdicts(run_id)
    store.attach_results(run_id, [("r/p", [], [dataclasses.replace(VERDICT, subject="n1")], "n1")])
    assert store.verdicts(run_id) == [first]
    changed = dataclasses.replace(VERDICT, subject="n1", reason="r2 failed again")
    store.attach_results(run_id, [("r/p", [], [changed], "n1")])
    [again] = store.verdicts(run_id)
    assert (again["id"], again["reason"]) == (first["id"], "r2 failed again")
    assert again["judged_at"] > first["judged_at"]


def test_raw_output_stored_again_keeps_the_measurements_parsed_from_it(store: Store) -> None:
    """A probe task retried stores the same bytes with no results yet: what was parsed from them
    stays. Other bytes drop it (it was parsed from what they replace)."""
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    store.ingest(run_id, [_probe("r/p", "n1", n_measurements=3)])
    store.ingest(run_id, [_probe("r/p", "n1", n_measurements=0)])
    assert store.count(Measurement) == 3
    store.ingest(run_id, [_probe("r/p", "n1", raw="other bytes\n", n_measurements=0)])
    assert store.count(Measurement) == 0
    store.ingest(run_id, [_probe("r/p", "n1", raw="other bytes\n", n_measurements=2)])
    assert store.count(Measurement) == 2


def test_attach_to_unknown_probe_is_an_error(store: Store) -> None:
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    with pytest.raises(KeyError, match="probes not stored"):
        store.attach_results(run_id, [("r/missing", [], [VERDICT], "n1")])


def test_node_events_are_idempotent_per_key(store: Store) -> None:
    assert store.record_node_event("run/n1/cordon", node="n1", kind="cordon", reason="r2 fail", dry_run=False)
    assert not store.record_node_event(
        "run/n1/cordon", node="n1", kind="cordon", reason="r2 fail", dry_run=False
    )
    assert store.count(NodeEvent) == 1
    assert store.node_events("n1")[0]["kind"] == "cordon"


def test_baselines_version_and_promote_atomically(store: Store) -> None:
    kwargs = {
        "profile": "h100-sxm-ndr",
        "metric": "nccl.busbw",
        "scope": "intra-8",
        "unit": "GB/s",
        "stats": {"n": 3},
        "source": {"runs": [1]},
    }
    first, v1 = store.add_baseline_candidate(value=480.0, **kwargs)  # type: ignore[arg-type]
    assert store.promoted_baseline(profile="h100-sxm-ndr", metric="nccl.busbw", scope="intra-8") is None
    store.promote_baseline(first)
    second, v2 = store.add_baseline_candidate(value=470.0, **kwargs)  # type: ignore[arg-type]
    store.promote_baseline(second)
    promoted = store.promoted_baseline(profile="h100-sxm-ndr", metric="nccl.busbw", scope="intra-8")
    assert (v1, v2) == (1, 2)
    assert promoted is not None and promoted["id"] == second and promoted["value"] == 470.0
    with pytest.raises(ValueError, match="only a candidate"):
        store.promote_baseline(first)  # retired now


def test_run_meta_round_trips(store: Store) -> None:
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    store.update_run_meta(run_id, plan={"waves": [["a", "b"]]})
    store.update_run_meta(run_id, other=1)
    assert store.run_meta(run_id) == {"plan": {"waves": [["a", "b"]]}, "other": 1}
