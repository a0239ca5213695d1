"""The early-warning rules, as data: one row per rule, its signal, its thresholds.

Each row names the criterion it speaks for (D-DEV-TREND-01: a GPU's counters; D-NET-NCCL-TREND-01:
a node's or pair's busbw), the evaluator (`kind`, in `fleetval.trends.judge`), the fields it reads
and its thresholds. A rule that fires gives `warn`; warn never cordons (the node health policy's
trend rows, `fleetval.policy.node_health.TREND_TABLE`): it is recorded for the on-call reader with
the evidence (counter, rate, slope, projected sweeps to the hard threshold).

Hard thresholds the projections aim at are the ones fleetval already fails on, not new ones:
- retired pages: DCGM r2's software plugin fails a GPU at `DCGM_LIMIT_MAX_RETIRED_PAGES` (63 in
  current DCGM's `dcgm_gpu_hardware_limits.h`; 60 before), SBE + DBE retired pages;
- row remapping: DCGM r2 fails on `DCGM_FI_DEV_ROW_REMAP_FAILURE` > 0 (Xid 64, which the Xid table
  cordons, `xid.64.row_remap_failure`); NVIDIA documents at most 512 remappings per frame buffer
  (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/row-remapping.html), and a bank with no spare
  row left (`DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_NONE` > 0) fails on its next remap;
- busbw: D-NET-NCCL-01/-02's `min_ratio` of the promoted baseline (read from the catalog);
- correctable ECC has no hard threshold of its own: the failure it announces is an uncorrectable
  (DBE) error, Xid 48 (`xid.48.ecc_dbe`, cordon), whose timing is not projectable from the rate;
- temperature: `limit_c` stands for the profile's slowdown temperature (`nvidia-smi -q -d
  TEMPERATURE`, "GPU Slowdown Temp"); 87 °C is a placeholder to set per profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from fleetval import criteria
from fleetval.trends import history as h

TREND_POLICY_VERSION: Final = "trends/2026-12-05.1"

DEVICE_CRITERION: Final = "D-DEV-TREND-01"
LINK_CRITERION: Final = "D-NET-NCCL-TREND-01"


@dataclass(frozen=True, slots=True)
class TrendRule:
    rule_id: str
    criterion: str
    kind: str
    fields: tuple[str, ...]
    params: Mapping[str, float]
    statement: str

    def to_json(self) -> dict[str, object]:
        return {
            "rule_id": self.rule_id,
            "kind": self.kind,
            "fields": list(self.fields),
            "params": dict(self.params),
        }


def _rule(
    rule_id: str, criterion: str, kind: str, fields: tuple[str, ...], statement: str, **params: float
) -> TrendRule:
    return TrendRule(rule_id, criterion, kind, fields, MappingProxyType(params), statement)


DEVICE_RULES: Final[tuple[TrendRule, ...]] = (
    _rule(
        "trend.sbe.rising_rate",
        DEVICE_CRITERION,
        "rising_rate",
        (h.SBE_VOL, h.SBE_AGG),
        "correctable ECC errors every sweep, at a rate that grows: in the last `window` intervals "
        "at least `min_active` add >= `min_per_sweep` errors per sweep, and the Theil-Sen slope of "
        "log2(1 + rate) is >= `min_log2_growth` per sweep (a single burst is one interval: no warn)",
        window=4,
        min_intervals=3,
        min_active=3,
        min_per_sweep=5,
        min_log2_growth=0.5,
    ),
    _rule(
        "trend.remap.bank_low",
        DEVICE_CRITERION,
        "bank_low",
        (h.BANKS_REMAP_ROWS_AVAIL_LOW, h.BANKS_REMAP_ROWS_AVAIL_NONE),
        "a memory bank is down to its last spare row or has none (the histogram's Low / None "
        "marks > 0): its next remap fails (ROW_REMAP_FAILURE, Xid 64)",
        max_banks_low=0,
    ),
    _rule(
        "trend.remap.accumulating",
        DEVICE_CRITERION,
        "row_remap",
        (h.CORRECTABLE_REMAPPED_ROWS, h.UNCORRECTABLE_REMAPPED_ROWS, h.ROW_REMAP_PENDING),
        "remapped rows (correctable + uncorrectable) grow in >= `min_rising` of the last `window` "
        "intervals by >= `min_rows` in all, and a remap was pending in >= `min_pending` of those "
        "samples or the rows reach `budget_rows` within `horizon` sweeps at the Theil-Sen rate",
        window=4,
        min_intervals=3,
        min_rising=2,
        min_rows=2,
        min_pending=1,
        budget_rows=512,
        horizon=8,
    ),
    _rule(
        "trend.retired.accumulating",
        DEVICE_CRITERION,
        "retired_pages",
        (h.RETIRED_SBE, h.RETIRED_DBE, h.RETIRED_PENDING),
        "retired pages (SBE + DBE) grow in >= `min_rising` of the last `window` intervals and either "
        "reach `limit` (DCGM r2's retired-page limit) within `horizon` sweeps at the Theil-Sen rate or "
        "are already >= `soft_limit` (DCGM's soft limit)",
        window=4,
        min_intervals=3,
        min_rising=2,
        limit=63,
        soft_limit=15,
        horizon=8,
    ),
    _rule(
        "trend.temp.rising",
        DEVICE_CRITERION,
        "gauge_rising",
        (h.GPU_TEMP,),
        "GPU temperature at the sweeps rises: Theil-Sen slope >= `min_slope` °C per sweep over the "
        "last `window` samples, >= `min_rising_fraction` of sample pairs rising, and the fitted line "
        "reaches `limit_c` within `horizon` sweeps",
        window=8,
        min_points=6,
        min_slope=1.5,
        min_rising_fraction=0.8,
        limit_c=87,
        horizon=6,
    ),
    _rule(
        "trend.thermal.rising_rate",
        DEVICE_CRITERION,
        "rising_rate",
        (h.THERMAL_VIOLATION,),
        "thermal throttling time grows in nearly every sweep at a growing rate (as the correctable-ECC "
        "rule, over a longer window: healthy GPUs throttle now and then; the counter is in us or ns "
        "depending on the exporter version, so only growth is judged)",
        window=5,
        min_intervals=4,
        min_active=4,
        min_per_sweep=1,
        min_log2_growth=1.0,
    ),
)

LINK_RULES: Final[tuple[TrendRule, ...]] = (
    _rule(
        "trend.busbw.declining",
        LINK_CRITERION,
        "busbw_decline",
        (),
        "busbw / baseline creeps down while still at or above the hard `min_ratio`: the median of the "
        "last `level_points` sweeps is >= `min_drop` below the node's own level (the median of up to "
        "`reference` earlier sweeps, at least `min_reference`), the Theil-Sen slope over the last "
        "`recent` sweeps is <= -`min_decline` per sweep with >= `min_decreasing_fraction` of their "
        "pairs declining, and that line reaches `min_ratio` within `horizon` sweeps. Against the "
        "node's own level, not the fleet's: a node that always runs at 95 % is not a decline",
        recent=5,
        level_points=4,
        reference=8,
        min_reference=3,
        min_drop=0.05,
        min_decline=0.005,
        min_decreasing_fraction=0.7,
        horizon=8,
    ),
)

# Sweeps of history a GPU or link needs before any rule can speak (the catalog's parameter).
MIN_SAMPLES: Final = int(criteria.get(DEVICE_CRITERION).parameters["min_samples"])
RULES_BY_ID: Final = {r.rule_id: r for r in (*DEVICE_RULES, *LINK_RULES)}


def hard_min_ratio(busbw_criterion: str) -> float:
    """The hard busbw threshold the link trend projects to: D-NET-NCCL-01/-02's `min_ratio`."""
    return float(criteria.get(busbw_criterion).parameters["min_ratio"])
