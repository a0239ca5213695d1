"""Robust statistics over short per-sweep series (pure functions, no I/O).

- `theil_sen`: the median of the pairwise slopes (and the median intercept): one spike moves it
  little, unlike a least-squares fit; it needs no distribution and works on 4-8 points.
- `decreasing_fraction`: the share of point pairs (i < j) whose later value is lower: 1.0 for a
  strictly monotone decline, about 0.5 for noise (Kendall's concordance, as a fraction).
- `increments`: a cumulative counter turned into per-sweep increments, where a counter that went
  *down* (a driver reload or GPU reset zeroes the volatile counters) leaves that interval out: an
  interval across a reset says nothing about the rate, and must never read as one.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Fit:
    slope: float
    intercept: float

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x


def theil_sen(xs: Sequence[float], ys: Sequence[float]) -> Fit | None:
    """Theil-Sen line through (xs, ys); None with fewer than two distinct x."""
    slopes = [
        (ys[j] - ys[i]) / (xs[j] - xs[i])
        for i in range(len(xs))
        for j in range(i + 1, len(xs))
        if xs[j] != xs[i]
    ]
    if not slopes:
        return None
    slope = statistics.median(slopes)
    intercept = statistics.median(y - slope * x for x, y in zip(xs, ys, strict=True))
    return Fit(slope, intercept)


def decreasing_fraction(ys: Sequence[float]) -> float:
    """Share of pairs i < j with ys[j] < ys[i] (ties count half); 0.5 for fewer than two points."""
    pairs = [(ys[i], ys[j]) for i in range(len(ys)) for j in range(i + 1, len(ys))]
    if not pairs:
        return 0.5
    return sum(1.0 if b < a else 0.5 if b == a else 0.0 for a, b in pairs) / len(pairs)


@dataclass(frozen=True, slots=True)
class Increment:
    """`per_sweep` is the counter's increase over (start, end] divided by the sweeps between."""

    start: int
    end: int
    per_sweep: float


def increments(points: Sequence[tuple[int, float]]) -> tuple[list[Increment], int]:
    """Per-sweep increments of a cumulative counter and how many intervals were resets."""
    out: list[Increment] = []
    resets = 0
    for (s0, v0), (s1, v1) in itertools.pairwise(points):
        if v1 < v0:
            resets += 1
            continue
        out.append(Increment(s0, s1, (v1 - v0) / (s1 - s0)))
    return out, resets


def finite(value: object) -> float | None:
    """A sample value as a float, or None when it is not a finite, non-boolean number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
