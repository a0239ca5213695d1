"""A node's (or a link's) history as the trend judges read it: samples per GPU per sweep.

A `Sample` is what dcgm-exporter showed for one GPU at one sweep: DCGM field name → value, the
names as dcgm-exporter exports them (`etc/default-counters.csv`, fixture
`dcgm-exporter/default-counters-00d6d34.csv`; the ECC, retired-page and violation counters are
commented out there and must be enabled for their rules to run). A `BusbwPoint` is one sweep's
headline busbw of a node or pair with the baseline it was judged against.

`usable` keeps what a rule may read: finite, non-negative numbers that are not one of DCGM's blank
sentinels (a field the GPU does not support reads 9223372036854775794, "not supported", in the
fixture `dcgm-exporter/metrics-quickstart-readme-elided.txt`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.trends.stats import finite

# dcgm-exporter metric names (DCGM field names).
SBE_VOL: Final = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
SBE_AGG: Final = "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"
DBE_VOL: Final = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
DBE_AGG: Final = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
CORRECTABLE_REMAPPED_ROWS: Final = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
UNCORRECTABLE_REMAPPED_ROWS: Final = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
ROW_REMAP_PENDING: Final = "DCGM_FI_DEV_ROW_REMAP_PENDING"
ROW_REMAP_FAILURE: Final = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
BANKS_REMAP_ROWS_AVAIL_LOW: Final = "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_LOW"
BANKS_REMAP_ROWS_AVAIL_NONE: Final = "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_NONE"
RETIRED_SBE: Final = "DCGM_FI_DEV_RETIRED_SBE"
RETIRED_DBE: Final = "DCGM_FI_DEV_RETIRED_DBE"
RETIRED_PENDING: Final = "DCGM_FI_DEV_RETIRED_PENDING"
XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"
GPU_TEMP: Final = "DCGM_FI_DEV_GPU_TEMP"
THERMAL_VIOLATION: Final = "DCGM_FI_DEV_THERMAL_VIOLATION"

# DCGM's blank values (dcgm_structs.h): DCGM_INT64_BLANK 0x7ffffffffffffff0 and the sentinels above
# it (not found, not supported, no permission); DCGM_FP64_BLANK 140737488355328.0 for doubles.
DCGM_INT64_BLANK: Final = 0x7FFFFFFFFFFFFFF0
DCGM_FP64_BLANK: Final = 140737488355328.0


@dataclass(frozen=True, slots=True)
class Sample:
    """One GPU at one sweep: `sweep` counts sweeps (weekly: one per week), `values` by field."""

    sweep: int
    values: Mapping[str, Any] = field(default_factory=dict)

    def usable(self, name: str) -> float | None:
        number = finite(self.values.get(name))
        if number is None or number < 0 or number >= DCGM_FP64_BLANK:
            return None
        return number

    def to_json(self) -> dict[str, Any]:
        return {"sweep": self.sweep, "values": dict(self.values)}


@dataclass(frozen=True, slots=True)
class BusbwPoint:
    """One sweep's headline busbw (GB/s) of a node (D-NET-NCCL-01) or pair (-02) and its baseline's."""

    sweep: int
    busbw_gbps: Any
    baseline_gbps: Any

    def ratio(self) -> float | None:
        busbw, baseline = finite(self.busbw_gbps), finite(self.baseline_gbps)
        if busbw is None or baseline is None or busbw < 0 or baseline <= 0:
            return None
        return busbw / baseline


def order_problem(sweeps: Sequence[Any]) -> str | None:
    """Why a history's sweep numbers cannot be a time series, or None: integers, strictly rising."""
    if any(isinstance(s, bool) or not isinstance(s, int) for s in sweeps):
        return "a sweep number is not an integer"
    if any(b <= a for a, b in itertools.pairwise(sweeps)):
        return "sweeps are not strictly increasing (duplicated or out of order)"
    return None


def points(samples: Sequence[Sample], name: str) -> list[tuple[int, float]]:
    """(sweep, value) of the samples where `name` is usable, in order."""
    out: list[tuple[int, float]] = []
    for sample in samples:
        value = sample.usable(name)
        if value is not None:
            out.append((sample.sweep, value))
    return out
