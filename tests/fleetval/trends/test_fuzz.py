"""No silent pass, early warning: arbitrary histories (wrong types, NaN, infinities, DCGM blanks,
negative and huge values, duplicate and unordered sweeps, counters that reset) never crash the trend
judges, and a history with no usable sample never passes or warns."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetval.records import Result
from fleetval.trends import history as h
from fleetval.trends.judge import judge_device_trend, judge_link_trend
from tests.fuzz import fuzz_settings

pytestmark = pytest.mark.fuzz

FIELDS = (h.CORRECTABLE_REMAPPED_ROWS, h.UNCORRECTABLE_REMAPPED_ROWS, h.ROW_REMAP_PENDING)
VALUES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([h.DCGM_INT64_BLANK, h.DCGM_FP64_BLANK, "", "12", None, [], {}]),
)
SWEEPS = st.one_of(st.integers(-5, 40), st.sampled_from([None, "3", 2.5, math.nan]))


def _device_history() -> st.SearchStrategy[Any]:
    sample = st.builds(
        lambda sweep, values: h.Sample(sweep, values),
        SWEEPS,
        st.dictionaries(st.sampled_from((*FIELDS, "DCGM_FI_DEV_GPU_TEMP", "junk")), VALUES, max_size=4),
    )
    per_gpu = st.lists(sample, max_size=14)
    return st.one_of(
        st.dictionaries(st.text(max_size=6), per_gpu, max_size=3),
        st.sampled_from([None, "GPU-0", 7, []]),
    )


@fuzz_settings()
@given(_device_history())
def test_device_trend_never_crashes_and_never_passes_nothing_usable(gpus: Any) -> None:
    verdict = judge_device_trend("n1", gpus)
    assert verdict.result in tuple(Result)
    usable = isinstance(gpus, dict) and any(
        s.usable(f) is not None for samples in gpus.values() for s in samples for f in s.values
    )
    if not usable:
        assert verdict.result not in (Result.PASS, Result.WARN), verdict


@fuzz_settings()
@given(
    st.one_of(
        st.lists(st.builds(h.BusbwPoint, SWEEPS, VALUES, VALUES), max_size=16),
        st.sampled_from([None, "busbw", b"x", 3]),
    )
)
def test_link_trend_never_crashes_and_never_passes_nothing_usable(points: Any) -> None:
    verdict = judge_link_trend("n1", points)
    assert verdict.result in tuple(Result)
    if not isinstance(points, list) or all(p.ratio() is None for p in points):
        assert verdict.result not in (Result.PASS, Result.WARN), verdict
