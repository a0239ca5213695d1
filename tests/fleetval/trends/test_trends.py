"""Early warning from trends (D-DEV-TREND-01, D-NET-NCCL-TREND-01): each rule warns on its pattern
and not on noise; counter resets and garbage never warn; short history is inconclusive; warn
never cordons."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fleetval.criteria import BY_ID, IMPLEMENTED_BY
from fleetval.policy import node_health as nh
from fleetval.records import Result
from fleetval.trends import history as h
from fleetval.trends.history import BusbwPoint, Sample
from fleetval.trends.judge import judge_device_trend, judge_link_trend
from fleetval.trends.replay import PATTERNS, ReplayConfig, device_hard_fail, replay_fleet, score
from fleetval.trends.stats import decreasing_fraction, increments, theil_sen

QUIET: dict[str, Any] = {
    h.SBE_VOL: 0,
    h.SBE_AGG: 0,
    h.CORRECTABLE_REMAPPED_ROWS: 0,
    h.UNCORRECTABLE_REMAPPED_ROWS: 0,
    h.ROW_REMAP_PENDING: 0,
    h.ROW_REMAP_FAILURE: 0,
    h.BANKS_REMAP_ROWS_AVAIL_LOW: 0,
    h.BANKS_REMAP_ROWS_AVAIL_NONE: 0,
    h.GPU_TEMP: 55,
}


def gpu(series: dict[str, list[Any]], sweeps: int | None = None) -> list[Sample]:
    """Samples 0..n-1: QUIET values, overridden per field by `series` (one value per sweep)."""
    n = sweeps or max(len(v) for v in series.values())
    return [Sample(i, {**QUIET, **{k: v[i] for k, v in series.items()}}) for i in range(n)]


def node(samples: list[Sample], others: int = 7) -> dict[str, list[Sample]]:
    quiet = gpu({}, len(samples))
    return {"GPU-0": samples, **{f"GPU-{i}": quiet for i in range(1, others + 1)}}


def cumulative(rates: list[float]) -> list[float]:
    out, total = [], 0.0
    for r in rates:
        total += r
        out.append(total)
    return out


# --- statistics -------------------------------------------------------------------------------


def test_theil_sen_shrugs_off_one_spike() -> None:
    fit = theil_sen([0, 1, 2, 3, 4, 5], [0, 1, 2, 300, 4, 5])
    assert fit is not None and fit.slope == pytest.approx(1.0)


def test_increments_leave_out_resets() -> None:
    incs, resets = increments([(0, 10), (1, 20), (2, 0), (3, 5), (5, 25)])
    assert resets == 1
    assert [(i.start, i.end, i.per_sweep) for i in incs] == [(0, 1, 10), (2, 3, 5), (3, 5, 10)]


def test_decreasing_fraction() -> None:
    assert decreasing_fraction([5, 4, 3, 2]) == 1.0
    assert decreasing_fraction([1, 2, 3]) == 0.0


# --- device rules warn on their pattern -------------------------------------------------------


def test_rising_sbe_rate_warns_without_a_projection() -> None:
    sbe = cumulative([0, 0, 3, 8, 20, 45, 110])
    v = judge_device_trend("n1", node(gpu({h.SBE_VOL: sbe, h.SBE_AGG: sbe})))
    assert v.result is Result.WARN and v.criterion == "D-DEV-TREND-01"
    assert v.rule_id == "trend.sbe.rising_rate" and v.action == nh.RECORD
    finding = v.evidence["findings"][0]
    assert finding["gpu"] == "GPU-0" and finding["field"] == h.SBE_VOL
    assert finding["latest_rate_per_sweep"] == 110 and finding["growth_factor_per_sweep"] > 1.4
    assert "Xid 48" in finding["hard_threshold"] and finding["projected_sweeps_to_threshold"] is None


def test_remaps_accumulating_with_pending_warn_with_a_projection() -> None:
    rows = [0, 0, 0, 1, 3, 6, 10]
    pending = [0, 0, 0, 1, 0, 1, 1]
    v = judge_device_trend("n1", node(gpu({h.CORRECTABLE_REMAPPED_ROWS: rows, h.ROW_REMAP_PENDING: pending})))
    assert v.result is Result.WARN and v.rule_id == "trend.remap.accumulating"
    finding = v.evidence["findings"][0]
    assert finding["pending_samples"] >= 1 and finding["projected_sweeps_to_threshold"] > 0


def test_a_bank_at_its_last_spare_row_warns() -> None:
    v = judge_device_trend("n1", node(gpu({h.BANKS_REMAP_ROWS_AVAIL_LOW: [0, 0, 0, 0, 1]})))
    assert v.result is Result.WARN and v.rule_id == "trend.remap.bank_low"


def test_retired_pages_heading_for_the_dcgm_limit_warn() -> None:
    retired = [10, 18, 27, 36, 45]
    v = judge_device_trend("n1", node(gpu({h.RETIRED_SBE: retired, h.RETIRED_DBE: [0] * 5})))
    assert v.result is Result.WARN and v.rule_id == "trend.retired.accumulating"
    finding = v.evidence["findings"][0]
    assert finding["projected_sweeps_to_threshold"] == pytest.approx(2.0, abs=0.1)
    assert "63" in finding["hard_threshold"]


def test_rising_temperature_warns() -> None:
    v = judge_device_trend("n1", node(gpu({h.GPU_TEMP: [60, 63, 65, 68, 71, 73, 76, 78]})))
    assert v.result is Result.WARN and v.rule_id == "trend.temp.rising"


def test_rising_thermal_throttling_warns() -> None:
    throttle = cumulative([0, 1e3, 3e3, 8e3, 2e4, 5e4])
    v = judge_device_trend("n1", node(gpu({h.THERMAL_VIOLATION: throttle})))
    assert v.result is Result.WARN and v.rule_id == "trend.thermal.rising_rate"


# --- and not on noise ---------------------------------------------------------------------------


def test_a_single_sbe_burst_does_not_warn() -> None:
    sbe = cumulative([0, 0, 0, 500, 0, 0, 0])
    assert judge_device_trend("n1", node(gpu({h.SBE_VOL: sbe}))).result is Result.PASS


def test_a_steady_sbe_trickle_does_not_warn() -> None:
    sbe = cumulative([0, 6, 7, 6, 8, 6, 7, 6])
    assert judge_device_trend("n1", node(gpu({h.SBE_VOL: sbe}))).result is Result.PASS


def test_a_lone_remap_does_not_warn() -> None:
    rows, pending = [0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0]
    v = judge_device_trend("n1", node(gpu({h.CORRECTABLE_REMAPPED_ROWS: rows, h.ROW_REMAP_PENDING: pending})))
    assert v.result is Result.PASS


def test_jittery_temperature_does_not_warn() -> None:
    v = judge_device_trend("n1", node(gpu({h.GPU_TEMP: [58, 61, 56, 62, 57, 60, 63, 59]})))
    assert v.result is Result.PASS


# --- counter resets never warn -------------------------------------------------------------------


def test_a_volatile_counter_reset_does_not_warn() -> None:
    # A driver reload zeroes the volatile counter each sweep it happens: the drops are left out.
    v = judge_device_trend("n1", node(gpu({h.SBE_VOL: [40, 0, 30, 0, 20, 0, 10], h.SBE_AGG: [0] * 7})))
    assert v.result is Result.PASS


def test_a_reset_counter_is_not_read_as_a_rise() -> None:
    # High, reset to 0, then counts that are small after the reset: no "rising rate" from the jumps.
    sbe = [1000, 1001, 0, 1, 2, 3, 4]
    v = judge_device_trend("n1", node(gpu({h.SBE_VOL: sbe, h.SBE_AGG: [0] * 7})))
    assert v.result is Result.PASS


def test_with_every_interval_across_resets_the_rule_does_not_run() -> None:
    v = judge_device_trend(
        "n1", node(gpu({h.SBE_VOL: [9, 0, 9, 0, 9], h.SBE_AGG: [None] * 5}), others=0), min_samples=4
    )
    assert "trend.sbe.rising_rate" not in v.evidence["rules_evaluated"]["GPU-0"]
    assert v.result is Result.PASS  # the other rules ran


# --- short or garbage history is inconclusive ----------------------------------------------------


def test_short_history_is_inconclusive_even_if_it_looks_bad() -> None:
    sbe = cumulative([10, 40, 160])
    v = judge_device_trend("n1", node(gpu({h.SBE_VOL: sbe})))
    assert v.result is Result.INCONCLUSIVE and v.rule_id == "trend.device.none"
    assert v.action == nh.RECORD


@pytest.mark.parametrize(
    "gpus",
    [
        {},
        {"GPU-0": "not samples"},
        {"GPU-0": [Sample(i, {h.SBE_VOL: 10**i}) for i in (0, 1, 1, 2, 3)]},  # duplicate sweep
        {"GPU-0": [Sample(i, {h.SBE_VOL: 10**i}) for i in (4, 3, 2, 1, 0)]},  # out of order
        {"GPU-0": [Sample(i, {h.SBE_VOL: "lots", h.GPU_TEMP: math.nan}) for i in range(6)]},
        {"GPU-0": [Sample(i, {h.SBE_VOL: h.DCGM_INT64_BLANK + 2}) for i in range(6)]},  # not supported
        {"GPU-0": [Sample(i, {h.SBE_VOL: -5 * i}) for i in range(6)]},
    ],
)
def test_garbage_history_is_inconclusive_never_warn(gpus: dict[str, Any]) -> None:
    assert judge_device_trend("n1", gpus).result is Result.INCONCLUSIVE


def test_a_finding_stands_beside_a_damaged_gpu() -> None:
    sbe = cumulative([0, 0, 3, 8, 20, 45, 110])
    gpus = {**node(gpu({h.SBE_VOL: sbe})), "GPU-7": [Sample(0, {})]}
    v = judge_device_trend("n1", gpus)
    assert v.result is Result.WARN and "GPU-7" in v.evidence["history_problems"]


# --- busbw --------------------------------------------------------------------------------------


def points(ratios: list[float], baseline: float = 480.0) -> list[BusbwPoint]:
    return [BusbwPoint(i, round(r * baseline, 2), baseline) for i, r in enumerate(ratios)]


def test_busbw_creeping_down_warns_before_the_hard_fail() -> None:
    ratios = [1.0, 1.01, 0.99, 1.0, 1.0, 0.985, 0.97, 0.955, 0.94, 0.925]
    v = judge_link_trend("n1", points(ratios))
    assert v.result is Result.WARN and v.criterion == "D-NET-NCCL-TREND-01"
    assert v.rule_id == "trend.busbw.declining" and v.action == nh.RECORD
    assert v.evidence["min_ratio"] == BY_ID["D-NET-NCCL-01"].parameters["min_ratio"]
    assert 0 < v.evidence["projected_sweeps_to_threshold"] <= 4


def test_busbw_jitter_and_a_dip_do_not_warn() -> None:
    ratios = [1.0, 0.98, 1.02, 0.99, 1.01, 0.97, 1.0, 0.95, 1.01, 0.99, 1.02]
    assert judge_link_trend("n1", points(ratios)).result is Result.PASS


def test_a_node_that_always_runs_low_is_not_declining() -> None:
    assert (
        judge_link_trend("n1", points([0.93, 0.94, 0.93, 0.92, 0.93, 0.94, 0.93, 0.92])).result is Result.PASS
    )


def test_a_rebaselined_link_is_judged_on_its_ratio() -> None:
    # busbw steady, the baseline re-promoted 1 % higher half-way: no decline.
    pts = [BusbwPoint(i, 480.0, 480.0 if i < 5 else 484.8) for i in range(10)]
    assert judge_link_trend("n1", pts).result is Result.PASS


@pytest.mark.parametrize(
    "history",
    [
        points([1.0, 0.97, 0.94, 0.92]),  # too short
        [BusbwPoint(i, "fast", 480) for i in range(10)],
        [BusbwPoint(i, 470.0, 0) for i in range(10)],  # no baseline
        [BusbwPoint(i, 480.0 * 3, 480) for i in range(10)],  # above the believed limit
        [BusbwPoint(s, 480.0, 480) for s in (0, 1, 2, 2, 3, 4, 5, 6, 7)],
        "not a history",
    ],
)
def test_bad_busbw_history_is_inconclusive(history: Any) -> None:
    assert judge_link_trend("n1", history).result is Result.INCONCLUSIVE


# --- catalog, decision table, replay ------------------------------------------------------------


def test_the_criteria_and_their_decision_rows_exist() -> None:
    for gate, criterion in nh.TREND_CRITERION.items():
        assert criterion in BY_ID and criterion in IMPLEMENTED_BY
        rows = [r for r in nh.TREND_TABLE if r.gate == gate]
        assert sorted(r.outcome for r in rows) == sorted(nh.TREND_OUTCOMES)
        assert {r.action for r in rows} == {nh.RECORD}  # warn never cordons
    assert nh.RECORD not in nh.DISRUPTIVE_ACTIONS
    assert len({r.rule_id for r in (*nh.NODE_HEALTH_TABLE, *nh.TREND_TABLE)}) == len(nh.NODE_HEALTH_TABLE) + 6


def test_the_replays_hard_fail_is_fleetvals() -> None:
    assert device_hard_fail(None, Sample(0, {h.XID_ERRORS: 48})) == "xid.48.ecc_dbe"
    assert device_hard_fail(None, Sample(0, {h.XID_ERRORS: 63})) is None  # Xid 63 does not cordon
    assert device_hard_fail(None, Sample(0, {h.ROW_REMAP_FAILURE: 1})) is not None
    assert device_hard_fail(Sample(0, {h.DBE_VOL: 0}), Sample(1, {h.DBE_VOL: 1})) == "ecc.dbe"
    assert device_hard_fail(Sample(0, {h.DBE_VOL: 3}), Sample(1, {h.DBE_VOL: 0})) is None  # a reset


def test_a_small_replay_warns_ahead_and_rarely_on_healthy_nodes() -> None:
    s = score(replay_fleet(ReplayConfig(nodes=60, gpus=4, degrading_per_pattern=3, seed=3)))
    for pattern in PATTERNS:
        ps = s["patterns"][pattern]
        assert ps.failed >= 2 and ps.warned_ahead() >= 1, pattern
    assert s["healthy_flagged"] <= 2
