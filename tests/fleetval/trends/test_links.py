"""D-NET-NCCL-TREND-01 from what the NCCL sweeps stored: the busbw history query (one per 1,000
subjects, newest N per subject, sweeps of the sweep's suite only, up to the run judged), each sweep's
point (the median of its believed repeats against the baseline it was judged against), the verdicts,
and that a trend verdict never moves the gate. PostgreSQL and SQLite."""

from __future__ import annotations

from typing import Any

from fleetval.nccl import plan as nccl_plan
from fleetval.nccl.judge_stored import subject_results
from fleetval.records import Result
from fleetval.store import nccl_queries
from fleetval.store.repository import Store
from fleetval.trends import links
from tests.fleetval.trends.nccl_history import DECLINING, store_sweeps

SUBJECTS = ["decl", "flat", "decl+flat", "new"]


def _history(store: Store, until_run: int, per_subject: int = links.LINK_LOOKBACK) -> list[dict[str, Any]]:
    return nccl_queries.busbw_history(
        store,
        SUBJECTS,
        criteria=links.BUSBW_CRITERIA,
        suite=nccl_plan.SUITE,
        until_run=until_run,
        per_subject=per_subject,
    )


def test_a_declining_node_warns_a_steady_one_passes_short_histories_are_inconclusive(store: Store) -> None:
    runs = store_sweeps(store)
    rows = _history(store, runs[-1])
    assert {r["run_id"] for r in rows} <= set(runs)  # the backfill's re-judgement is not a sweep
    histories = links.busbw_histories(rows)
    assert [len(histories[s]) for s in SUBJECTS] == [10, 10, 3, 1]
    decl = [p.ratio() for p in histories["decl"]]
    assert all(abs(r - want) < 0.01 for r, want in zip(decl, DECLINING, strict=True))  # read back as stored

    verdicts = {v.subject: v for v in links.judge_link_histories(SUBJECTS, histories)}
    assert verdicts["decl"].result is Result.WARN and verdicts["decl"].rule_id == "trend.busbw.declining"
    assert verdicts["decl"].action == "record_only"
    assert verdicts["decl"].evidence["busbw_criterion"] == "D-NET-NCCL-01"
    assert verdicts["flat"].result is Result.PASS
    pair = verdicts["decl+flat"]
    assert pair.result is Result.INCONCLUSIVE and pair.evidence["busbw_criterion"] == "D-NET-NCCL-02"
    assert verdicts["new"].result is Result.INCONCLUSIVE


def test_the_history_is_the_newest_sweeps_up_to_the_run_judged(store: Store) -> None:
    runs = store_sweeps(store)
    newest = _history(store, runs[-1], per_subject=3)
    assert [r["run_id"] for r in newest if r["subject"] == "decl"] == runs[-3:]
    earlier = links.busbw_histories(_history(store, runs[5]))
    assert len(earlier["decl"]) == 6 and "decl+flat" not in earlier
    # six sweeps are fewer than the rule needs: inconclusive, not a warning of what came later
    [verdict] = links.judge_link_histories(["decl"], earlier)
    assert verdict.result is Result.INCONCLUSIVE


def test_a_sweep_without_a_believed_measurement_is_a_point_without_a_number() -> None:
    assert links.sweep_busbw({"repeats": []}) is None
    assert (
        links.sweep_busbw({"repeats": [{"rule_id": "nccl.busbw.implausible", "busbw_gbps": 900.0}]}) is None
    )
    assert links.sweep_busbw({"repeats": [{"rule_id": "harness.probe_failed"}]}) is None
    measured = [{"rule_id": "nccl.busbw.ok", "busbw_gbps": v} for v in (470.0, 400.0, 480.0)]
    assert links.sweep_busbw({"repeats": measured}) == 470.0  # the median: one slow repeat is not the sweep
    # a node blamed by pair isolation (D-NET-NCCL-02 on a node) is not its intra-node series
    row = {"criterion": "D-NET-NCCL-02", "subject": "n1", "evidence": {}, "judged_against": {}}
    assert links.busbw_histories([row]) == {}


def test_a_trend_verdict_never_moves_the_gate(store: Store) -> None:
    runs = store_sweeps(store)
    before = subject_results(store.verdicts(runs[-1]))
    verdicts = links.judge_link_histories(SUBJECTS, links.busbw_histories(_history(store, runs[-1])))
    assert {v.result for v in verdicts} == {Result.WARN, Result.PASS, Result.INCONCLUSIVE}
    store.add_verdicts(runs[-1], verdicts)
    assert set(before.values()) == {Result.PASS}  # a clean sweep: any trend result would show
    assert subject_results(store.verdicts(runs[-1])) == before
