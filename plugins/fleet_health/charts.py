"""Inline SVG for the NCCL view: busbw against message size (log2 axis), each repeat a line, over
the promoted baseline's band. No script: the page stays readable with JavaScript off, and the
numbers are in a table beside the chart."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any, Final

WIDTH: Final = 760
HEIGHT: Final = 360
PAD_L, PAD_R, PAD_T, PAD_B = 64, 20, 16, 48
UNITS: Final = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))


def size_label(size: int) -> str:
    for factor, unit in UNITS:
        if size >= factor:
            value = size / factor
            return f"{value:g} {unit}"
    return f"{size} B"


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exp:
            return float(step * exp)
    return float(10 * exp)


def busbw_chart(
    points: Sequence[Mapping[str, Any]], baseline: Mapping[str, Any] | None, *, title: str
) -> str:
    """The SVG markup. `points`: size, repeat, busbw_gbps; `baseline`: sizes (per-size stats with
    min/q1/median/q3/max), value, min_ratio, min_size_bytes."""
    band = [s for s in (baseline or {}).get("sizes") or [] if s.get("size")]
    sizes = sorted({int(p["size"]) for p in points} | {int(s["size"]) for s in band})
    if not sizes:
        return '<p class="muted">No NCCL measurements for this subject.</p>'
    lo, hi = math.log2(min(sizes)), math.log2(max(sizes))
    span = hi - lo or 1.0
    top = max(
        [float(p["busbw_gbps"]) for p in points]
        + [float(s.get("max_gbps") or 0) for s in band]
        + [float((baseline or {}).get("value") or 0)]
    )
    y_max = _nice_max(top * 1.05)
    plot_w, plot_h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B

    def x(size: float) -> float:
        return PAD_L + (math.log2(size) - lo) / span * plot_w

    def y(value: float) -> float:
        return PAD_T + plot_h - max(0.0, value) / y_max * plot_h

    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="chart-title" '
        f'xmlns="http://www.w3.org/2000/svg"><title id="chart-title">{escape(title)}</title>'
    ]
    # Grid and axes.
    for i in range(6):
        value = y_max * i / 5
        yy = y(value)
        out.append(f'<line class="grid" x1="{PAD_L}" x2="{WIDTH - PAD_R}" y1="{yy:.1f}" y2="{yy:.1f}"/>')
        out.append(f'<text class="tick" x="{PAD_L - 8}" y="{yy + 4:.1f}" text-anchor="end">{value:g}</text>')
    step = max(1, math.ceil(len(sizes) / 9))
    for size in sizes[::step]:
        xx = x(size)
        out.append(f'<line class="grid" x1="{xx:.1f}" x2="{xx:.1f}" y1="{PAD_T}" y2="{PAD_T + plot_h}"/>')
        out.append(
            f'<text class="tick" x="{xx:.1f}" y="{PAD_T + plot_h + 18}" text-anchor="middle">'
            f"{escape(size_label(size))}</text>"
        )
    out.append(
        f'<text class="axis" x="{PAD_L + plot_w / 2:.0f}" y="{HEIGHT - 8}" text-anchor="middle">'
        "message size (log scale)</text>"
        f'<text class="axis" transform="translate(16 {PAD_T + plot_h / 2:.0f}) rotate(-90)" '
        'text-anchor="middle">busbw GB/s</text>'
    )
    if band:
        upper = " ".join(f"{x(s['size']):.1f},{y(float(s.get('max_gbps') or 0)):.1f}" for s in band)
        lower = " ".join(f"{x(s['size']):.1f},{y(float(s.get('min_gbps') or 0)):.1f}" for s in reversed(band))
        out.append(
            f'<polygon class="band" points="{upper} {lower}"><title>baseline min–max</title></polygon>'
        )
        median = " ".join(f"{x(s['size']):.1f},{y(float(s.get('median_gbps') or 0)):.1f}" for s in band)
        out.append(f'<polyline class="median" points="{median}"><title>baseline median</title></polyline>')
    if baseline and baseline.get("value"):
        threshold = float(baseline["value"]) * float(baseline.get("min_ratio") or 0.9)
        start = baseline.get("min_size_bytes") or min(sizes)
        x0 = x(max(int(start), min(sizes)))
        out.append(
            f'<line class="threshold" x1="{x0:.1f}" x2="{WIDTH - PAD_R}" y1="{y(threshold):.1f}" '
            f'y2="{y(threshold):.1f}"><title>pass threshold {threshold:.1f} GB/s</title></line>'
        )
    repeats: dict[Any, list[tuple[int, float]]] = defaultdict(list)
    for p in points:
        repeats[p.get("repeat")].append((int(p["size"]), float(p["busbw_gbps"])))
    for i, (repeat, series) in enumerate(sorted(repeats.items(), key=lambda kv: str(kv[0]))):
        series.sort()
        line = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in series)
        out.append(
            f'<polyline class="series s{i % 4}" points="{line}"><title>repeat {repeat}</title></polyline>'
        )
        for s, v in series:
            out.append(f'<circle class="dot s{i % 4}" cx="{x(s):.1f}" cy="{y(v):.1f}" r="2.2"/>')
    out.append("</svg>")
    return "".join(out)
