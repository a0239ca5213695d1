"""NCCL judges: busbw against a measured baseline, errors, transport, repeat stability.

Rules (thresholds are `fleetval.criteria` parameters, never literals here):

- D-NET-NCCL-01 / -02: the *headline busbw* of a run — the mean out-of-place busbw over the rows
  with size ≥ `min_size_bytes` (1 GiB) — divided by the promoted baseline's busbw must be ≥
  `min_ratio` (0.90). No such rows, no baseline (or one that is not a positive finite number),
  one rank, or a collective other than the baseline's → inconclusive. A headline row whose time,
  algbw and busbw disagree beyond their printed precision was not printed that way by nccl-tests
  → inconclusive. Below the ratio → fail even if the run was cut short (the low number was
  measured); above `EVIDENCE_LIMITS.max_ratio_to_baseline` → inconclusive (not believed); at or
  above `min_ratio` on an incomplete run or a damaged table (see `table_problems`) →
  inconclusive (never pass).
  Why the mean and not the max: every large size counts, so one sagging size is not hidden by a
  good one, and averaging 4 rows damps noise; the baseline (`fleetval.nccl.baseline_stats`) uses the
  same statistic per run, so the ratio compares like with like. Out-of-place, because in-place
  numbers of some collectives are not comparable (alltoall in-place: algbw 43046 GB/s on 1 GPU).
- D-NET-NCCL-03: any NCCL error (IB completion, bootstrap, transport propagation), timeout,
  `#wrong` > 0 or `Out of bounds values : N FAILED` → fail; otherwise a harness failure
  (`Test NCCL/CUDA failure`) → error; otherwise an output that ended before the footer, a damaged
  table, or a row whose data nccl-tests did not check (`N/A` where it checks, `-c 0`) →
  inconclusive; otherwise pass.
- D-NET-NCCL-TRANSPORT: the profile's fabric (ib | roce) must be the network NCCL used. Socket
  anywhere → fail, even with zero errors and good-looking numbers (the silent-fallback defect).
  No network line (run without NCCL_DEBUG=INFO) → inconclusive; a network name that is not
  NCCL's (`IB`, the SHARP plugin's `IBext`, `Socket`) → mismatch; a host of the run whose network
  choice is not in the output, or a transport line that could not be read → inconclusive. RoCE
  expected: NCCL names its verbs network "IB" for both link layers, so "IB" without a device list
  passes.
- D-NET-NCCL-04: coefficient of variation (sample std / mean) of the headline busbw over ≥
  `min_repeats` (3) runs must be ≤ `max_cv` (5 %); fewer usable runs → inconclusive.

The table checks (`table_problems`), shared by -01/-02, -03 and -04: the header's sizes line and
column header were read; every size the header promised (minBytes to maxBytes by the step, less
any `Reducing maxBytes`) is printed once, in order, with the size and count nccl-tests prints for
that collective, type and rank count; no row, header or footer line was unreadable or printed
twice; the device list is ranks 0..n-1 and agrees with NCCL's nRanks; the footer's count agrees
with its OK/FAILED. A table that fails one cannot pass.

Every verdict names the criteria catalog version; busbw verdicts name the baseline id/version and
the evidence limits' id.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from fleetval import criteria
from fleetval.errors import ParseError
from fleetval.nccl.parser import (
    MAX_PROMISED_SIZES,
    TYPE_BYTES,
    NcclRow,
    NcclRun,
    busbw_factor,
    decimal_half_ulp,
    is_ib_network,
    normalize_collective,
)
from fleetval.records import Result, Verdict

#: What the pipeline does with a verdict of each result (the gate halts on `hold`).
ACTIONS: Final[dict[Result, str]] = {
    Result.PASS: "none",
    Result.WARN: "review",
    Result.INCONCLUSIVE: "rerun",
    Result.FAIL: "hold",
    Result.ERROR: "investigate-harness",
}

HEADLINE_STATISTIC: Final = "mean out-of-place busbw over rows with size >= min_size_bytes"
_FABRICS: Final = ("ib", "roce")
_FLEET_ERROR_KINDS: Final = frozenset(
    {"ib_completion", "ib_async", "bootstrap", "transport", "timeout", "cuda", "nccl"}
)
# Which unreadable lines (parser `NcclUnreadable.kind`) keep which judge from passing.
_TABLE_UNREADABLE: Final = frozenset({"row", "header", "footer", "line"})
_TRANSPORT_UNREADABLE: Final = frozenset({"transport", "line"})
# Collectives whose printed size is the per-rank count times the ranks (nccl-tests src/*.cu,
# `*GetCollByteCount`: count/nranks, rounded down to 16 bytes).
_PER_RANK_SIZE: Final = frozenset(
    {"all_gather", "reduce_scatter", "alltoall", "gather", "scatter", "hypercube"}
)
# Collectives whose in-place data nccl-tests does not check: it prints `N/A` there
# (`reportErrors = in_place ? 0 : 1`).
_NO_INPLACE_CHECK: Final = frozenset({"alltoall", "sendrecv"})


@dataclass(frozen=True, slots=True)
class EvidenceLimits:
    """How far one run's numbers may go before they are not believed (data, named by id).

    `max_ratio_to_baseline`: a headline busbw this many times the promoted baseline is not a
    pass: the reference nodes of a profile are its best case, so far above them is a damaged
    number, a wrong profile or a wrong baseline, each worth a look and a rerun.
    """

    limits_id: str
    max_ratio_to_baseline: float

    def to_json(self) -> dict[str, Any]:
        return {"limits_id": self.limits_id, "max_ratio_to_baseline": self.max_ratio_to_baseline}


EVIDENCE_LIMITS: Final = EvidenceLimits(limits_id="nccl-evidence-limits-1", max_ratio_to_baseline=1.5)


@dataclass(frozen=True, slots=True)
class NcclBaseline:
    """A promoted busbw baseline for one hardware profile and scope (e.g. `intra-8gpu`,
    `inter-pair`), measured on our reference nodes; `busbw_gbps` is its headline busbw."""

    baseline_id: str
    version: int
    profile: str
    scope: str
    busbw_gbps: float
    collective: str = "all_reduce"

    def judged_against(self) -> dict[str, Any]:
        return {
            "baseline_id": self.baseline_id,
            "baseline_version": self.version,
            "profile": self.profile,
            "scope": self.scope,
            "baseline_busbw_gbps": self.busbw_gbps,
            "criteria_catalog": criteria.CATALOG_VERSION,
        }


def _verdict(
    criterion: str,
    subject: str,
    result: Result,
    rule_id: str,
    reason: str,
    evidence: dict[str, Any],
    judged_against: dict[str, Any] | None = None,
) -> Verdict:
    return Verdict(
        criterion=criterion,
        subject=subject,
        result=result,
        action=ACTIONS[result],
        rule_id=rule_id,
        reason=reason,
        evidence=evidence,
        judged_against=judged_against or {"criteria_catalog": criteria.CATALOG_VERSION},
    )


def large_size_busbw(
    run: NcclRun, *, min_size_bytes: int | None = None, ranks: int | None = None
) -> list[float]:
    """Out-of-place busbw of the rows ≥ `min_size_bytes`, in size order.

    `ranks` recomputes busbw from algbw with that rank count (the CLI's `--ranks`), assuming
    all-reduce when the collective is not known.
    """
    min_size = _min_size(min_size_bytes)
    values: list[float] = []
    for row in sorted(run.rows, key=lambda r: r.size):
        if row.size < min_size:
            continue
        if ranks is not None:
            if row.algbw_oop is not None:
                values.append(row.algbw_oop * busbw_factor(run.collective or "all_reduce", ranks))
        elif row.busbw_oop is not None:
            values.append(row.busbw_oop)
    return values


def headline_busbw(
    run: NcclRun, *, min_size_bytes: int | None = None, ranks: int | None = None
) -> float | None:
    """The run's headline busbw (see module doc), or None without rows ≥ `min_size_bytes`."""
    values = large_size_busbw(run, min_size_bytes=min_size_bytes, ranks=ranks)
    return statistics.fmean(values) if values else None


def _min_size(override: int | None) -> int:
    if override is not None:
        return override
    return int(criteria.get("D-NET-NCCL-01").parameters["min_size_bytes"])


def _run_facts(run: NcclRun) -> dict[str, Any]:
    return {
        "collective": run.collective,
        "nranks": run.nranks,
        "nnodes": run.nnodes,
        "nccl_version": run.nccl_version,
        "transports": list(run.transports),
        "in_network_reduction": run.in_network_reduction,
        "complete": run.complete,
    }


# --- the table as evidence --------------------------------------------------------------------


def promised_sizes(params: dict[str, int]) -> list[int] | None:
    """The sizes nccl-tests' header says it will run (its own loop: minBytes, then ×stepFactor or
    +stepBytes while ≤ maxBytes), or None when the header does not say or promises too many."""
    low, high = params.get("minBytes"), params.get("maxBytes")
    factor, step = params.get("stepFactor"), params.get("stepBytes")
    if low is None or high is None or (factor is None and step is None):
        return None
    sizes: list[int] = []
    size = low
    while size <= high:
        if len(sizes) >= MAX_PROMISED_SIZES:
            return None
        sizes.append(size)
        if factor is not None and factor > 1:
            size *= factor
        elif factor is None and step is not None and step > 0:
            size += step
        else:
            break
    return sizes


def _printed_sizes(nominal: int, type_bytes: int, collective: str, nranks: int) -> set[tuple[int, int]]:
    """(size, count) nccl-tests prints for a nominal size (`setupArgs` + `*GetCollByteCount`)."""
    count = nominal // type_bytes
    if collective not in _PER_RANK_SIZE:
        return {(count * type_bytes, count)}
    base = count // nranks
    # 16-byte alignment of the per-rank count (current nccl-tests) or none (older builds)
    return {(b * nranks * type_bytes, b) for b in (base & ~(16 // type_bytes - 1), base)}


def _size_problems(run: NcclRun, promised: list[int], collective: str, nranks: int) -> list[str]:
    # nccl-tests runs the whole size sweep for each type/op/root in turn (`-d all`, `-o all`).
    combos = list(dict.fromkeys((r.type, r.redop, r.root) for r in run.rows))
    expected = [(size, combo) for combo in combos for size in promised]
    problems: list[str] = []
    if len(run.rows) != len(expected):
        problems.append(
            f"{len(run.rows)} rows where the header promises {len(expected)} "
            f"({len(promised)} sizes from minBytes to maxBytes, {len(combos)} type/op)"
        )
    for row, (nominal, combo) in zip(run.rows, expected, strict=False):
        type_bytes = TYPE_BYTES.get(row.type)
        if (
            type_bytes is None
            or (row.type, row.redop, row.root) != combo
            or (row.size, row.count) not in _printed_sizes(nominal, type_bytes, collective, nranks)
        ):
            problems.append(f"row {row.size} B ({row.count} x {row.type}) is not the promised {nominal} B")
            break
    return problems


def table_problems(run: NcclRun) -> list[str]:
    """Why the table is not evidence a judge can pass on (empty: intact). See the module doc."""
    problems = [f"{u.kind} unreadable: {u.reason}" for u in run.unreadable if u.kind in _TABLE_UNREADABLE]
    promised = promised_sizes(run.params)
    if promised is None:
        problems.append("no readable sizes line (minBytes, maxBytes, step): the sizes asked for are unknown")
    if not run.columns:
        problems.append("no column header")
    if run.collective is None or run.nranks is None or run.nranks < 1:
        problems.append("collective or rank count unknown: the printed sizes cannot be checked")
    elif promised is not None:
        problems.extend(_size_problems(run, promised, run.collective, run.nranks))
    ranks = [d.rank for d in run.devices]
    if ranks != list(range(len(ranks))):
        problems.append("the device list is not ranks 0..n-1")
    if run.devices and run.reported_nranks is not None and run.reported_nranks != len(run.devices):
        problems.append(f"NCCL reports {run.reported_nranks} ranks, the device list has {len(run.devices)}")
    if run.oob_values is not None and run.oob_failed is not None and (run.oob_values > 0) != run.oob_failed:
        problems.append(
            f"footer: {run.oob_values} out-of-bounds values but {'FAILED' if run.oob_failed else 'OK'}"
        )
    wrong = any((r.wrong_oop or 0) > 0 or (r.wrong_ip or 0) > 0 for r in run.rows)
    if run.oob_values == 0 and wrong:
        problems.append("#wrong > 0 in a row but the footer counts no out-of-bounds values")
    return problems


def _time_is_wall_clock(run: NcclRun) -> bool:
    # `-C 1` prints CPU time in a `cputime` column: algbw still comes from the wall-clock time.
    return "cputime" not in {c.lower() for c in run.columns}


def row_inconsistency(
    row: NcclRow, *, collective: str | None, nranks: int | None, wall_clock: bool
) -> str | None:
    """Why a row's out-of-place time, algbw and busbw cannot all be what nccl-tests printed (it
    computes algbw = size / time and busbw = algbw × factor, then rounds each), or None."""
    t, a, b = row.time_oop, row.algbw_oop, row.busbw_oop
    if t is None or a is None or b is None:
        return f"size {row.size}: out-of-place time, algbw or busbw missing"
    lead = len(row.cells) - 8
    if lead in (3, 4, 5):
        dt, da, db = (decimal_half_ulp(row.cells[lead + i]) for i in range(3))
    else:  # a row not read from text: two decimals, as nccl-tests prints bandwidths
        dt, da, db = 0.5, 0.005, 0.005
    slack = 1e-9 * (1.0 + abs(a) + abs(b))
    if wall_clock:
        low = row.size / ((t + dt) * 1e3)
        high = row.size / ((t - dt) * 1e3) if t > dt else math.inf
        if not low - da - slack <= a <= high + da + slack:
            return f"size {row.size}: algbw {a} is not size / time ({t} us)"
    if collective is not None and nranks is not None and nranks >= 1:
        try:
            factor = busbw_factor(collective, nranks)
        except ValueError:
            return None
        if not (a - da) * factor - db - slack <= b <= (a + da) * factor + db + slack:
            return f"size {row.size}: busbw {b} is not algbw {a} x {factor:.4g}"
    return None


def _headline_inconsistencies(run: NcclRun, min_size: int) -> list[str]:
    wall = _time_is_wall_clock(run)
    found = (
        row_inconsistency(r, collective=run.collective, nranks=run.nranks, wall_clock=wall)
        for r in run.rows
        if r.size >= min_size
    )
    return [p for p in found if p is not None]


def _finite_positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def judge_busbw(
    run: NcclRun,
    *,
    subject: str,
    baseline: NcclBaseline | None,
    criterion: str = "D-NET-NCCL-01",
    ranks: int | None = None,
) -> Verdict:
    """D-NET-NCCL-01 / -02 for one run."""
    if criterion not in ("D-NET-NCCL-01", "D-NET-NCCL-02"):
        raise ValueError(f"busbw criterion must be D-NET-NCCL-01 or D-NET-NCCL-02, got {criterion!r}")
    params = criteria.get(criterion).parameters
    min_ratio = float(params["min_ratio"])
    min_size = int(params["min_size_bytes"])
    nranks = ranks if ranks is not None else run.nranks
    evidence: dict[str, Any] = {
        **_run_facts(run),
        "nranks": nranks,
        "min_ratio": min_ratio,
        "min_size_bytes": min_size,
        "statistic": HEADLINE_STATISTIC,
        "evidence_limits": EVIDENCE_LIMITS.to_json(),
    }
    if ranks is not None:
        evidence["busbw_source"] = f"algbw x busbw_factor({run.collective or 'all_reduce'}, {ranks})"
    if run.in_network_reduction:
        evidence["note"] = "NVLS/CollNet in use: busbw is not the ring-equivalent link bandwidth"
    say = partial(_verdict, criterion, subject, evidence=evidence)

    if baseline is None:
        return say(
            Result.INCONCLUSIVE, "nccl.busbw.no_baseline", "no promoted baseline for this profile and scope"
        )
    say = partial(_verdict, criterion, subject, evidence=evidence, judged_against=baseline.judged_against())
    if not _finite_positive(baseline.busbw_gbps):
        # NaN would slip past every comparison below; infinity would make any run "below" it.
        return say(
            Result.INCONCLUSIVE,
            "nccl.busbw.bad_baseline",
            f"baseline busbw {baseline.busbw_gbps} GB/s is not a positive finite number",
        )
    if run.collective is not None and run.collective != normalize_collective(baseline.collective):
        return say(
            Result.INCONCLUSIVE,
            "nccl.busbw.other_collective",
            f"run is {run.collective}, baseline is {baseline.collective}",
        )
    if nranks is not None and nranks < 2:
        return say(Result.INCONCLUSIVE, "nccl.busbw.single_rank", "busbw is 0 by definition with one rank")
    values = large_size_busbw(run, min_size_bytes=min_size, ranks=ranks)
    evidence["large_sizes"] = [r.size for r in sorted(run.rows, key=lambda r: r.size) if r.size >= min_size]
    evidence["busbw_values_gbps"] = [round(v, 3) for v in values]
    if not values:
        largest = max((r.size for r in run.rows), default=None)
        evidence["largest_size"] = largest
        return say(
            Result.INCONCLUSIVE,
            "nccl.busbw.no_large_sizes",
            f"no rows with size >= {min_size} B (largest: {largest})",
        )
    inconsistent = _headline_inconsistencies(run, min_size)
    if inconsistent:
        evidence["inconsistent_rows"] = inconsistent[:10]
        return say(
            Result.INCONCLUSIVE,
            "nccl.busbw.inconsistent_row",
            f"a row's numbers disagree with each other ({inconsistent[0]}): not as nccl-tests printed them",
        )
    measured = statistics.fmean(values)
    ratio = measured / baseline.busbw_gbps
    evidence.update(busbw_gbps=round(measured, 3), ratio=round(ratio, 4))
    # The small epsilon keeps "exactly at the threshold" a pass despite float rounding.
    if ratio + 1e-9 < min_ratio:
        return say(
            Result.FAIL,
            "nccl.busbw.below_baseline",
            f"busbw {measured:.2f} GB/s is {ratio:.1%} of baseline {baseline.busbw_gbps:.2f} GB/s "
            f"(< {min_ratio:.0%})",
        )
    if ratio > EVIDENCE_LIMITS.max_ratio_to_baseline:
        return say(
            Result.INCONCLUSIVE,
            "nccl.busbw.implausible",
            f"busbw {measured:.2f} GB/s is {ratio:.1%} of baseline {baseline.busbw_gbps:.2f} GB/s, above the "
            f"{EVIDENCE_LIMITS.max_ratio_to_baseline:.0%} believed ({EVIDENCE_LIMITS.limits_id})",
        )
    if not run.complete:
        return say(
            Result.INCONCLUSIVE,
            "nccl.busbw.incomplete",
            f"busbw {ratio:.1%} of baseline but the run did not finish",
        )
    problems = table_problems(run)
    if problems:
        evidence["table_problems"] = problems[:10]
        return say(
            Result.INCONCLUSIVE,
            "nccl.busbw.damaged_table",
            f"busbw {ratio:.1%} of baseline but the table is damaged: {problems[0]}",
        )
    return say(
        Result.PASS,
        "nccl.busbw.ok",
        f"busbw {measured:.2f} GB/s is {ratio:.1%} of baseline {baseline.busbw_gbps:.2f} GB/s",
    )


def _unchecked_rows(run: NcclRun) -> list[int]:
    """Sizes whose data nccl-tests did not check where it checks (`N/A`, `-c 0`)."""
    inplace_unchecked_ok = run.collective in _NO_INPLACE_CHECK
    return [
        r.size
        for r in run.rows
        if (r.wrong_oop is None and r.error_oop is None)
        or (r.wrong_ip is None and r.error_ip is None and not inplace_unchecked_ok)
    ]


def judge_errors(run: NcclRun, *, subject: str) -> Verdict:
    """D-NET-NCCL-03 for one run."""
    crit = "D-NET-NCCL-03"
    fleet_errors = [e for e in run.errors if e.kind in _FLEET_ERROR_KINDS]
    wrong_rows = [r.size for r in run.rows if (r.wrong_oop or 0) > 0 or (r.wrong_ip or 0) > 0]
    evidence: dict[str, Any] = {
        **_run_facts(run),
        "errors": [e.to_json() for e in fleet_errors[:20]],
        "error_count": len(fleet_errors),
        "error_kinds": sorted({e.kind for e in fleet_errors}),
        "wrong_sizes": wrong_rows,
        "oob_values": run.oob_values,
        "oob_failed": run.oob_failed,
        "harness_failures": [e.to_json() for e in run.harness_failures[:10]],
        "interrupted_at_size": run.interrupted_at_size,
    }
    say = partial(_verdict, crit, subject, evidence=evidence)
    if fleet_errors or wrong_rows or run.oob_failed:
        if any(e.kind == "timeout" for e in fleet_errors):
            rule, what = "nccl.errors.timeout", "timeout"
        elif fleet_errors:
            rule, what = "nccl.errors.nccl", f"NCCL errors ({', '.join(evidence['error_kinds'])})"
        elif wrong_rows:
            rule, what = "nccl.errors.wrong", f"#wrong > 0 at {len(wrong_rows)} sizes"
        else:
            rule, what = "nccl.errors.out_of_bounds", f"Out of bounds values : {run.oob_values} FAILED"
        return say(Result.FAIL, rule, what)
    if run.harness_failures:
        first = run.harness_failures[0]
        return say(
            Result.ERROR, "nccl.errors.harness", f"nccl-tests harness failed: {first.host}: {first.message}"
        )
    if not run.complete:
        return say(
            Result.INCONCLUSIVE,
            "nccl.errors.incomplete",
            "output ended before the nccl-tests footer; errors after that point are unknown",
        )
    problems = table_problems(run)
    if problems:
        evidence["table_problems"] = problems[:10]
        return say(
            Result.INCONCLUSIVE,
            "nccl.errors.damaged_table",
            f"no errors read, but the table is damaged: {problems[0]}",
        )
    unchecked = _unchecked_rows(run)
    if unchecked or run.params.get("validation") == 0:
        evidence["unchecked_sizes"] = unchecked[:40]
        return say(
            Result.INCONCLUSIVE,
            "nccl.errors.not_checked",
            f"nccl-tests did not check the data ({len(unchecked)} of {len(run.rows)} sizes N/A"
            f"{', validation: 0' if run.params.get('validation') == 0 else ''}): "
            "wrong results would not show",
        )
    return say(Result.PASS, "nccl.errors.none", "no NCCL errors, timeouts or wrong values")


def judge_transport(run: NcclRun, *, subject: str, expected_fabric: str | None) -> Verdict:
    """D-NET-NCCL-TRANSPORT for one run."""
    crit = "D-NET-NCCL-TRANSPORT"
    if expected_fabric is not None and expected_fabric not in _FABRICS:
        raise ValueError(f"expected_fabric must be one of {_FABRICS} or None, got {expected_fabric!r}")
    net = {"IB", "RoCE", "Socket"} & set(run.transports)
    other_networks = list(
        dict.fromkeys(n for n in (*run.networks, *run.via_networks) if not is_ib_network(n) and n != "Socket")
    )
    unreadable = [u for u in run.unreadable if u.kind in _TRANSPORT_UNREADABLE]
    evidence: dict[str, Any] = {
        **_run_facts(run),
        "expected_fabric": expected_fabric,
        "networks": list(run.networks),
        "net_devices": list(run.net_devices),
        "nccl_env": dict(run.nccl_env),
    }
    if unreadable:
        evidence["unreadable"] = [u.to_json() for u in unreadable[:10]]
    say = partial(_verdict, crit, subject, evidence=evidence)
    if "Socket" in net and expected_fabric is not None:
        return say(
            Result.FAIL,
            "nccl.transport.socket_fallback",
            f"NCCL used TCP sockets where the profile declares {expected_fabric}",
        )
    if not net and not other_networks:
        why = (
            "no NCCL_DEBUG=INFO transport lines in the output"
            if not run.transports
            else "NCCL_DEBUG=INFO lines show no network selection"
        )
        return say(Result.INCONCLUSIVE, "nccl.transport.unknown", why)
    if expected_fabric is None:
        return say(
            Result.INCONCLUSIVE,
            "nccl.transport.no_fabric_declared",
            f"no expected fabric declared; network used: {', '.join(sorted(net) or other_networks)}",
        )
    # RoCE expected: NCCL names its verbs network "IB" whatever the link layer; only a device
    # list that shows /IB links contradicts it.
    ok = "IB" in net if expected_fabric == "ib" else ("RoCE" in net or ("IB" in net and not run.net_devices))
    # Every node picks its network itself: one whose choice is not in the output (cut short,
    # lines lost) may have fallen back to sockets.
    unknown_hosts = [h for h in run.hosts if h not in run.network_hosts]
    if ok and not other_networks:
        if unknown_hosts:
            evidence["hosts_without_network"] = unknown_hosts[:20]
            return say(
                Result.INCONCLUSIVE,
                "nccl.transport.host_unknown",
                f"NCCL used {', '.join(sorted(net))}, but the output does not say which network "
                f"{', '.join(unknown_hosts[:5])} used",
            )
        if unreadable:
            return say(
                Result.INCONCLUSIVE,
                "nccl.transport.unreadable",
                f"NCCL used {', '.join(sorted(net))}, but a transport line could not be read: "
                f"{unreadable[0].reason}",
            )
        return say(
            Result.PASS,
            "nccl.transport.ok",
            f"NCCL used {', '.join(sorted(net))} as the profile declares ({expected_fabric})",
        )
    return say(
        Result.FAIL,
        "nccl.transport.mismatch",
        f"network {', '.join(sorted(net) or other_networks)} is not the declared fabric {expected_fabric}",
    )


def judge_nccl_run(
    run: NcclRun,
    *,
    subject: str,
    baseline: NcclBaseline | None,
    expected_fabric: str | None,
    criterion: str = "D-NET-NCCL-01",
    ranks: int | None = None,
) -> list[Verdict]:
    """All single-run NCCL verdicts: busbw (`criterion`), D-NET-NCCL-03 and the transport."""
    return [
        judge_busbw(run, subject=subject, baseline=baseline, criterion=criterion, ranks=ranks),
        judge_errors(run, subject=subject),
        judge_transport(run, subject=subject, expected_fabric=expected_fabric),
    ]


def comparable_headline(run: NcclRun) -> float | None:
    """The run's headline busbw if it may stand in a repeat series: complete, its table intact and
    its large rows as nccl-tests printed them; None otherwise."""
    min_size = _min_size(None)
    value = headline_busbw(run, min_size_bytes=min_size)
    if value is None or not run.complete or _headline_inconsistencies(run, min_size) or table_problems(run):
        return None
    return value


def judge_nccl_repeats(runs: Sequence[NcclRun], *, subject: str) -> Verdict:
    """D-NET-NCCL-04 over repeats of the same test on the same nodes (or pair)."""
    crit = "D-NET-NCCL-04"
    params = criteria.get(crit).parameters
    min_repeats, max_cv = int(params["min_repeats"]), float(params["max_cv"])
    values = [comparable_headline(r) for r in runs]
    usable = [v for v in values if v is not None]
    shapes = {(r.collective, r.nranks) for r in runs}
    evidence: dict[str, Any] = {
        "repeats": len(runs),
        "usable_repeats": len(usable),
        "busbw_gbps": [round(v, 3) if v is not None else None for v in values],
        "min_repeats": min_repeats,
        "max_cv": max_cv,
        "statistic": HEADLINE_STATISTIC,
    }
    say = partial(_verdict, crit, subject, evidence=evidence)
    if len(shapes) > 1:
        evidence["shapes"] = sorted([list(map(str, s)) for s in shapes])
        return say(
            Result.INCONCLUSIVE, "nccl.repeats.not_comparable", "repeats differ in collective or rank count"
        )
    if len(usable) < min_repeats:
        return say(
            Result.INCONCLUSIVE,
            "nccl.repeats.too_few",
            f"{len(usable)} usable repeats (complete, intact table, rows >= 1 GiB), {min_repeats} needed",
        )
    mean = statistics.fmean(usable)
    if mean <= 0:
        return say(Result.INCONCLUSIVE, "nccl.repeats.zero_busbw", "mean busbw is 0")
    std = statistics.stdev(usable)  # sample std (ddof=1): 3 repeats are a sample, not the population
    cv = std / mean
    evidence.update(mean_gbps=round(mean, 3), std_gbps=round(std, 4), cv=round(cv, 5))
    if cv <= max_cv + 1e-12:
        return say(
            Result.PASS,
            "nccl.repeats.stable",
            f"busbw CV {cv:.2%} over {len(usable)} repeats (<= {max_cv:.0%})",
        )
    return say(
        Result.FAIL, "nccl.repeats.noisy", f"busbw CV {cv:.2%} over {len(usable)} repeats (> {max_cv:.0%})"
    )


def busbw_criterion_for(run: NcclRun) -> str:
    """D-NET-NCCL-02 for a multi-node run, else D-NET-NCCL-01 (by node count, then rank count)."""
    if run.nnodes is not None:
        return "D-NET-NCCL-02" if run.nnodes >= 2 else "D-NET-NCCL-01"
    return "D-NET-NCCL-02" if (run.nranks or 0) > 8 else "D-NET-NCCL-01"


def unparseable_verdicts(
    error: ParseError, *, subject: str, busbw_criterion: str, judged_against: dict[str, Any] | None = None
) -> list[Verdict]:
    """The three single-run verdicts for output nothing could be read from: inconclusive (rerun),
    naming the parse error."""
    return [
        _verdict(
            crit,
            subject,
            Result.INCONCLUSIVE,
            "nccl.unparseable",
            f"nothing recognisable in the output: {error}",
            {"parse_error": str(error), "tool": error.tool, "excerpt": error.excerpt},
            judged_against,
        )
        for crit in (busbw_criterion, "D-NET-NCCL-03", "D-NET-NCCL-TRANSPORT")
    ]


def judge_nccl_to_json(
    run: NcclRun | ParseError,
    baseline_gbps: float,
    ranks: int | None = None,
    *,
    expected_fabric: str | None = None,
) -> dict[str, Any]:
    """`fleetval judge nccl FILE --baseline GBPS [--ranks N]`: the baseline is the number given
    on the command line (baseline_id `cli`, version 0); `ranks` overrides nranks for busbw. Output
    that could not be parsed (`ParseError` in place of the run) gives inconclusive verdicts."""
    if isinstance(run, ParseError):
        criterion = "D-NET-NCCL-02" if (ranks or 0) > 8 else "D-NET-NCCL-01"
        verdicts = unparseable_verdicts(run, subject="unknown", busbw_criterion=criterion)
        return {"verdicts": [v.to_json() for v in verdicts]}
    subject = "+".join(run.hosts) if run.hosts else "unknown"
    baseline = NcclBaseline(
        baseline_id="cli",
        version=0,
        profile="cli",
        scope="cli",
        busbw_gbps=baseline_gbps,
        collective=run.collective or "all_reduce",
    )
    verdicts = judge_nccl_run(
        run,
        subject=subject,
        baseline=baseline,
        expected_fabric=expected_fabric,
        criterion=busbw_criterion_for(run),
        ranks=ranks,
    )
    return {"verdicts": [v.to_json() for v in verdicts]}
