"""A simulated fleet replayed sweep by sweep: when the trend judges first warn, and when the hard
judges fail (for `bench/early_warning.py` and the tests).

Each node has `gpus` GPUs sampled once per sweep (dcgm-exporter fields, `fleetval.trends.history`)
and one intra-node busbw per sweep against the promoted baseline. A few nodes degrade, one pattern
each, the way parts are reported to fail:

- `ecc_to_dbe`: one GPU's correctable-ECC rate grows geometrically (x1.5-2.5 per sweep from 2-6
  per sweep) until an uncorrectable error (DBE + Xid 48) once its SBEs since onset pass a drawn
  threshold (log-uniform 150-3,000);
- `remap_to_failure`: one GPU's weak bank takes remaps at a growing rate (Poisson, 0.4-1.2 per
  sweep, x1.2-1.6 per sweep; 85 % in the weak bank), each pending until a GPU reset (half the
  sweeps), until a remap hits the bank with no spare row left (`bank_spare_rows`): ROW_REMAP_FAILURE
  = 1 and Xid 64;
- `busbw_decline`: the node's busbw creeps down 0.8-2.5 % of baseline per sweep (linear) until
  D-NET-NCCL-01's hard fail.

Degradation starts at a drawn sweep in `onset` (after enough history for every rule: a fleet
has been swept for months before a part wears out); a degrading node whose hard fail does not
come within `sweeps` is counted but has no lead time.

Healthy nodes carry the noise the rules must not warn on: a single SBE burst (1-500 errors,
`sbe_burst_p` per GPU per sweep), a steady harmless SBE trickle on `sbe_trickle_share` of GPUs,
a lone remap now and then, driver reloads that zero the volatile counters (`reset_p` per node
per sweep), thermal throttling bursts, temperature jitter, busbw jitter of `busbw_jitter` (sd)
around a per-node level, occasional contention dips, and a re-promoted baseline (+1 %) half-way.

The hard fail is decided the way fleetval decides it, not by the simulator: the Xid on the sample
through the Xid decision table (`fleetval.xid.table.XID_TABLE`: cordon), DCGM r2's software checks
on the counters (row remap failure; retired pages at the limit), a DBE count that rose, and
busbw below D-NET-NCCL-01's `min_ratio` exactly as `fleetval.nccl.judge.judge_busbw` compares.
Retired pages read DCGM's "not supported" sentinel, as on the H100/H200 generation (the fixture
`nvidia-smi-h200/...PAGE_RETIREMENT...` prints N/A).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.records import Result
from fleetval.trends import history as h
from fleetval.trends.history import BusbwPoint, Sample
from fleetval.trends.judge import judge_device_trend, judge_link_trend
from fleetval.trends.rules import RULES_BY_ID, hard_min_ratio
from fleetval.xid.table import XID_TABLE, NodeAction

PATTERNS: Final = ("ecc_to_dbe", "remap_to_failure", "busbw_decline")
NOT_SUPPORTED: Final = h.DCGM_INT64_BLANK + 2  # DCGM_INT64_NOT_SUPPORTED, as the fixture shows
BUSBW_CRITERION: Final = "D-NET-NCCL-01"


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    nodes: int = 1000
    gpus: int = 8
    sweeps: int = 20
    degrading_per_pattern: int = 10
    seed: int = 0
    baseline_gbps: float = 480.0
    onset: tuple[int, int] = (6, 11)
    sbe_burst_p: float = 0.003
    sbe_trickle_share: float = 0.01
    remap_single_p: float = 0.001
    reset_p: float = 0.03
    throttle_p: float = 0.05
    temp_jitter_c: float = 3.0
    busbw_jitter: float = 0.02
    busbw_node_sd: float = 0.015
    busbw_dip_p: float = 0.01
    bank_spare_rows: int = 8
    banks: int = 3072


@dataclass(slots=True)
class NodeOutcome:
    node: str
    pattern: str | None
    onset: int | None = None
    fail_sweep: int | None = None
    fail_rule: str | None = None
    first_warn: dict[str, int] = field(default_factory=dict)  # "device" / "link" → sweep
    warn_rules: set[str] = field(default_factory=set)
    inconclusive: dict[str, int] = field(default_factory=lambda: {"device": 0, "link": 0})

    def first_warn_any(self) -> int | None:
        return min(self.first_warn.values(), default=None)

    def lead(self) -> int | None:
        """Sweeps between the first warning of the pattern's family and the hard fail (0: none)."""
        if self.fail_sweep is None or self.pattern is None:
            return None
        family = "link" if self.pattern == "busbw_decline" else "device"
        warn = self.first_warn.get(family)
        return 0 if warn is None or warn >= self.fail_sweep else self.fail_sweep - warn


def _poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, prod = math.exp(-lam), 0, rng.random()
    while prod > limit:
        k += 1
        prod *= rng.random()
    return k


def device_hard_fail(prev: Sample | None, cur: Sample) -> str | None:
    """The rule fleetval's hard judges fail this GPU sample on, or None."""
    xid = cur.usable(h.XID_ERRORS)
    if xid:
        rule = XID_TABLE.rule_for(int(xid))
        if rule.node_action is NodeAction.CORDON:
            return rule.rule_id
    if (cur.usable(h.ROW_REMAP_FAILURE) or 0) > 0:
        return "dcgm.r2.row_remap_failure"
    retired = [v for v in (cur.usable(h.RETIRED_SBE), cur.usable(h.RETIRED_DBE)) if v is not None]
    if retired and sum(retired) >= RULES_BY_ID["trend.retired.accumulating"].params["limit"]:
        return "dcgm.r2.retired_pages_limit"
    if prev is not None:
        for name in (h.DBE_VOL, h.DBE_AGG):
            before, now = prev.usable(name), cur.usable(name)
            if before is not None and now is not None and now > before:
                return "ecc.dbe"
    return None


def busbw_hard_fail(point: BusbwPoint) -> bool:
    """D-NET-NCCL-01's fail, compared as `fleetval.nccl.judge.judge_busbw` does."""
    ratio = point.ratio()
    return ratio is not None and ratio + 1e-9 < hard_min_ratio(BUSBW_CRITERION)


class _Gpu:
    """One GPU's counters as they evolve, and its degradation (if any)."""

    def __init__(self, rng: random.Random, cfg: ReplayConfig) -> None:
        self.rng, self.cfg = rng, cfg
        self.sbe_vol = self.sbe_agg = self.dbe_vol = self.dbe_agg = 0.0
        self.rows_c = self.rows_u = 0.0
        self.pending = 0
        self.failure = 0
        self.xid = 0
        self.throttle = 0.0
        self.temp_base = rng.gauss(55, 5)
        self.trickle = rng.random() < cfg.sbe_trickle_share
        self.spare = cfg.bank_spare_rows  # the weak bank's spare rows (every bank starts full)
        self.pattern: str | None = None
        self.onset = 0
        self.r0 = self.g = self.threshold = 0.0
        self.since_onset = 0.0

    def degrade(self, pattern: str, onset: int) -> None:
        self.pattern, self.onset = pattern, onset
        if pattern == "ecc_to_dbe":
            self.r0, self.g = self.rng.uniform(2, 6), self.rng.uniform(1.5, 2.5)
            self.threshold = math.exp(self.rng.uniform(math.log(150), math.log(3000)))
        else:
            self.r0, self.g = self.rng.uniform(0.4, 1.2), self.rng.uniform(1.2, 1.6)

    def reload(self) -> None:
        """A driver reload / GPU reset: volatile counters zeroed, pending remaps take effect."""
        self.sbe_vol = self.dbe_vol = 0.0
        self.pending = 0

    def _remap(self, weak: bool) -> None:
        if weak and self.spare == 0:
            self.failure, self.xid = 1, 64
            return
        if weak:
            self.spare -= 1
        if self.rng.random() < 0.7:
            self.rows_c += 1
        else:
            self.rows_u += 1
        self.pending = 1

    def advance(self, sweep: int) -> None:
        """The interval (sweep - 1, sweep]."""
        rng, cfg = self.rng, self.cfg
        sbe = _poisson(rng, 2.0) if self.trickle else 0
        if rng.random() < cfg.sbe_burst_p:
            sbe += round(math.exp(rng.uniform(0, math.log(500))))
        if rng.random() < cfg.remap_single_p:
            self._remap(weak=False)
        if rng.random() < 0.5:
            self.pending = 0  # the GPU was reset between sweeps: pending remaps are active now
        k = sweep - self.onset
        if self.pattern == "ecc_to_dbe" and k >= 0:
            added = _poisson(rng, self.r0 * self.g**k)
            sbe += added
            self.since_onset += added
            if self.since_onset >= self.threshold:
                self.dbe_vol += 1
                self.dbe_agg += 1
                self.xid = 48
        if self.pattern == "remap_to_failure" and k >= 0:
            for _ in range(_poisson(rng, self.r0 * self.g**k)):
                self._remap(weak=rng.random() < 0.85)
        self.sbe_vol += sbe
        self.sbe_agg += sbe
        if rng.random() < cfg.throttle_p:
            self.throttle += math.exp(rng.uniform(math.log(1e3), math.log(1e7)))

    def sample(self, sweep: int) -> Sample:
        spare, full = self.spare, self.cfg.bank_spare_rows
        return Sample(
            sweep,
            {
                h.SBE_VOL: self.sbe_vol,
                h.SBE_AGG: self.sbe_agg,
                h.DBE_VOL: self.dbe_vol,
                h.DBE_AGG: self.dbe_agg,
                h.CORRECTABLE_REMAPPED_ROWS: self.rows_c,
                h.UNCORRECTABLE_REMAPPED_ROWS: self.rows_u,
                h.ROW_REMAP_PENDING: self.pending,
                h.ROW_REMAP_FAILURE: self.failure,
                h.BANKS_REMAP_ROWS_AVAIL_LOW: 1 if spare == 1 and full > 1 else 0,
                h.BANKS_REMAP_ROWS_AVAIL_NONE: 1 if spare == 0 else 0,
                h.RETIRED_SBE: NOT_SUPPORTED,
                h.RETIRED_DBE: NOT_SUPPORTED,
                h.RETIRED_PENDING: NOT_SUPPORTED,
                h.XID_ERRORS: self.xid,
                h.GPU_TEMP: round(self.temp_base + self.rng.gauss(0, self.cfg.temp_jitter_c)),
                h.THERMAL_VIOLATION: self.throttle,
            },
        )


def _replay_node(name: str, pattern: str | None, cfg: ReplayConfig) -> NodeOutcome:
    rng = random.Random(f"{cfg.seed}:{name}")
    gpus = [_Gpu(rng, cfg) for _ in range(cfg.gpus)]
    out = NodeOutcome(name, pattern)
    onset = rng.randint(*cfg.onset)
    if pattern is not None:
        out.onset = onset
    if pattern in ("ecc_to_dbe", "remap_to_failure"):
        gpus[rng.randrange(cfg.gpus)].degrade(pattern, onset)
    level = min(1.06, max(0.95, rng.gauss(1.0, cfg.busbw_node_sd)))
    decline = rng.uniform(0.008, 0.025) if pattern == "busbw_decline" else 0.0
    series: dict[str, list[Sample]] = {f"GPU-{name}-{i}": [] for i in range(cfg.gpus)}
    busbw: list[BusbwPoint] = []
    for sweep in range(cfg.sweeps):
        if sweep and rng.random() < cfg.reset_p:
            for gpu in gpus:
                gpu.reload()
        fail = None
        for samples, gpu in zip(series.values(), gpus, strict=True):
            if sweep:
                gpu.advance(sweep)
            sample = gpu.sample(sweep)
            fail = fail or device_hard_fail(samples[-1] if samples else None, sample)
            samples.append(sample)
        true_ratio = level - decline * max(0, sweep - onset + 1)
        if rng.random() < cfg.busbw_dip_p:
            true_ratio -= rng.uniform(0.03, 0.06)
        baseline = cfg.baseline_gbps * (1.01 if sweep >= cfg.sweeps // 2 else 1.0)
        point = BusbwPoint(
            sweep, round(cfg.baseline_gbps * (true_ratio + rng.gauss(0, cfg.busbw_jitter)), 2), baseline
        )
        busbw.append(point)
        if fail is None and pattern == "busbw_decline" and busbw_hard_fail(point):
            fail = "nccl.busbw.below_baseline"
        for family, verdict in (
            ("device", judge_device_trend(name, series)),
            ("link", judge_link_trend(name, busbw, busbw_criterion=BUSBW_CRITERION)),
        ):
            if verdict.result is Result.WARN:
                out.first_warn.setdefault(family, sweep)
                out.warn_rules.add(verdict.rule_id)
            elif verdict.result is Result.INCONCLUSIVE:
                out.inconclusive[family] += 1
        if fail is not None and pattern is not None:
            out.fail_sweep, out.fail_rule = sweep, fail
            break  # cordoned: its replay ends here
    return out


def device_history(name: str, pattern: str | None, cfg: ReplayConfig) -> dict[str, list[Sample]]:
    """One node's GPU samples at every sweep of `cfg.sweeps`, from the replay's device model alone
    (its degradation, noise and driver reloads; no busbw, no end at the hard fail): what its
    dcgm-exporter would have shown at each sweep, for tests that put them in a real Prometheus.
    Its own random stream, so `replay_fleet`'s figures do not move."""
    rng = random.Random(f"{cfg.seed}:{name}:device")
    gpus = [_Gpu(rng, cfg) for _ in range(cfg.gpus)]
    if pattern in ("ecc_to_dbe", "remap_to_failure"):
        gpus[rng.randrange(cfg.gpus)].degrade(pattern, rng.randint(*cfg.onset))
    series: dict[str, list[Sample]] = {f"GPU-{name}-{i}": [] for i in range(cfg.gpus)}
    for sweep in range(cfg.sweeps):
        if sweep and rng.random() < cfg.reset_p:
            for gpu in gpus:
                gpu.reload()
        for samples, gpu in zip(series.values(), gpus, strict=True):
            if sweep:
                gpu.advance(sweep)
            samples.append(gpu.sample(sweep))
    return series


def replay_fleet(cfg: ReplayConfig) -> list[NodeOutcome]:
    """Every node of the simulated fleet, replayed sweep by sweep (seeded by `cfg.seed`)."""
    rng = random.Random(cfg.seed)
    names = [f"n{i:04d}" for i in range(cfg.nodes)]
    chosen = rng.sample(names, cfg.degrading_per_pattern * len(PATTERNS))
    pattern_of = {n: PATTERNS[i // cfg.degrading_per_pattern] for i, n in enumerate(chosen)}
    return [_replay_node(n, pattern_of.get(n), cfg) for n in names]


@dataclass(frozen=True, slots=True)
class PatternScore:
    pattern: str
    degrading: int
    failed: int
    leads: tuple[int, ...]

    def warned_ahead(self) -> int:
        return sum(lead >= 1 for lead in self.leads)


def score(outcomes: Sequence[NodeOutcome]) -> dict[str, Any]:
    """Lead times per pattern and the healthy nodes flagged (any warn, device or link)."""
    per_pattern = {}
    for pattern in PATTERNS:
        mine = [o for o in outcomes if o.pattern == pattern]
        leads = tuple(lead for o in mine if (lead := o.lead()) is not None)
        per_pattern[pattern] = PatternScore(pattern, len(mine), len(leads), leads)
    healthy = [o for o in outcomes if o.pattern is None]
    flagged = [o for o in healthy if o.first_warn]
    by_family = {f: sum(f in o.first_warn for o in healthy) for f in ("device", "link")}
    rules: dict[str, int] = {}
    for o in flagged:
        for r in o.warn_rules:
            rules[r] = rules.get(r, 0) + 1
    return {
        "patterns": per_pattern,
        "healthy": len(healthy),
        "healthy_flagged": len(flagged),
        "healthy_flagged_by_family": by_family,
        "healthy_flagged_by_rule": rules,
    }
