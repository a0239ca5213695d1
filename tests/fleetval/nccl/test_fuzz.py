"""No silent pass, NCCL: mutated nccl-tests output never crashes the parser or the judges, never
hangs, and never passes on evidence that was lost or damaged.

Seeds: every real fixture in tests/fixtures/nccl (see SOURCES.md there; the curator's `[...]` cut
marks removed, as the other tests do) and the simulator's output (`render_nccl_tests`, and
`nccl_run` on the netlab fleet): healthy IB, RoCE and NVLink runs, socket fallback (pair and single
node), IB completion errors, a `-T` timeout, `#wrong` > 0, low busbw, NVLS, alltoall (in-place
`N/A`), NCCL 2.18 (bare version line), and two derived launcher layouts of a healthy run: OpenMPI
`[1,0]<stdout>:` on every line, and mpirun `[0]` before every field group of a row.

Every seed is judged once clean, with its own context: busbw against a baseline equal to its own
headline (so a healthy seed passes; the low-busbw seed is judged against the healthy baseline),
the fabric it was run on, D-NET-NCCL-04 over three copies. The oracle, per mutant (the mutators
are shared: tests/fuzz.py):

- the parse returns a run or raises `ParseError`; the judges (and the CLI payload) never raise;
- a criterion whose clean verdict is not `pass` (fail, error, inconclusive) never passes on a
  changed copy;
- a criterion whose clean verdict is `pass` may pass on a changed copy only if the copy still
  carries exactly the evidence that criterion reads, as parsed (`*_evidence` below): for busbw the
  collective, the rank count, the sizes line, the column header, every row's size/count/type/op and
  the time/algbw/busbw of the rows >= 1 GiB, completeness; for D-NET-NCCL-03 every row's
  size/count/type/op and `#wrong` cells, the footer, the errors and harness failures, completeness;
  for the transport the networks, `via NET/` names, link layers and transports. A mutation that
  touched only what no judge reads (a pid, a time in a small row, a log message, a duplicated INFO
  line, CRLF line endings) may pass; a deleted, duplicated, reordered or garbled row, a damaged
  header, footer or transport line may not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetval.errors import ParseError
from fleetval.fleet.spec import FleetSpec, load_fleet_spec
from fleetval.nccl.judge import (
    NcclBaseline,
    busbw_criterion_for,
    headline_busbw,
    judge_nccl_repeats,
    judge_nccl_run,
    judge_nccl_to_json,
)
from fleetval.nccl.parser import NcclRun, is_ib_network, parse_nccl
from fleetval.nccl.simulated import render_nccl_tests
from fleetval.nccl.simulated_run import nccl_run
from fleetval.records import Result, Verdict
from tests.fuzz import Mutant, fuzz_settings, mutants, record, timed
from tests.paths import ROOT

FAMILY = "nccl"
FIXTURES = Path(__file__).parents[2] / "fixtures" / "nccl"
NETLAB = ROOT / "include" / "fleetval" / "sim" / "fleets" / "netlab.yaml"
_CURATOR_MARK = re.compile(r"^\[\.\.\. .*\]$")
GIB = 1 << 30
# Words whose corruption damages what a judge reads: footer and level words, network and
# transport names, column and header labels, the collective, type and op of a row.
WORDS = (
    "OK",
    "FAILED",
    "INFO",
    "WARN",
    "Socket",
    "IB",
    "RoCE",
    "network",
    "Using",
    "via",
    "NET",
    "sum",
    "float",
    "none",
    "N/A",
    "Test",
    "failure",
    "timeout",
    "size",
    "count",
    "type",
    "redop",
    "root",
    "time",
    "algbw",
    "busbw",
    "wrong",
    "error",
    "nThread",
    "minBytes",
    "maxBytes",
    "step",
    "factor",
    "bytes",
    "validation",
    "Rank",
    "device",
    "collnet",
    "nvls",
    "channels",
    "NVLS",
    "P2P",
    "bounds",
    "Avg",
    "Collective",
    "all_reduce_perf",
    "alltoall_perf",
    "nRanks",
    "nranks",
    "completion",
    "Watchdog",
)
CRITERIA = ("busbw", "D-NET-NCCL-03", "D-NET-NCCL-TRANSPORT", "D-NET-NCCL-04")


# --- seeds -------------------------------------------------------------------------------------


def _fixture(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    return "".join(ln for ln in text.splitlines(keepends=True) if not _CURATOR_MARK.match(ln.strip()))


def _sim(**kw: Any) -> str:
    args: dict[str, Any] = {
        "nranks": 8,
        "nnodes": 2,
        "busbw_gbps": 370.0,
        "seed": 7,
        "transport": "IB",
        "hosts": ["r01-n01", "r01-n02"],
        "min_bytes": 1 << 20,
    }
    args.update(kw)
    return render_nccl_tests(**args)


def _node(**kw: Any) -> str:
    return _sim(
        **{"nranks": 8, "nnodes": 1, "hosts": ["r01-n01"], "transport": "NVLink", "busbw_gbps": 480.0, **kw}
    )


def _openmpi_tags(text: str) -> str:
    return "\n".join("[1,0]<stdout>:" + ln if ln else ln for ln in text.split("\n"))


def _mpich_tag_per_field_group(text: str) -> str:
    """`[0]` before each piece nccl-tests writes with one printf: a row's parameters (52 columns),
    its out-of-place and its in-place results (33 each), and before every other line."""
    out = []
    for ln in text.split("\n"):
        if ln and not ln.startswith("#") and len(ln) > 100 and ln.split()[0].isdigit():
            out.append("[0]" + ln[:52] + "[0]" + ln[52:85] + "[0]" + ln[85:])
        elif ln:
            out.append("[0] " + ln)
        else:
            out.append(ln)
    return "\n".join(out)


@cache
def _netlab() -> FleetSpec:
    return load_fleet_spec(NETLAB.read_text())


@dataclass(frozen=True, slots=True)
class Seed:
    name: str
    text: str
    baseline_gbps: float
    fabric: str | None
    clean: NcclRun | None
    clean_results: dict[str, Result]


def _judge(run: NcclRun, seed_baseline: float, fabric: str | None, criterion: str) -> dict[str, Verdict]:
    baseline = NcclBaseline(
        "fuzz", 1, "fuzz", "fuzz", seed_baseline, collective=run.collective or "all_reduce"
    )
    busbw, errors, transport = judge_nccl_run(
        run, subject="fuzz", baseline=baseline, expected_fabric=fabric, criterion=criterion
    )
    return {"busbw": busbw, "D-NET-NCCL-03": errors, "D-NET-NCCL-TRANSPORT": transport}


def _seed_texts() -> dict[str, tuple[str, float | None, str | None]]:
    """name → (text, baseline busbw (None: the seed's own headline), fabric)."""
    seeds: dict[str, tuple[str, float | None, str | None]] = {}
    for path in sorted(FIXTURES.iterdir()):
        if path.name != "SOURCES.md":
            seeds[f"fixture:{path.name}"] = (_fixture(path), None, "ib")
    healthy = _sim(nranks=16, min_bytes=8)
    seeds.update(
        {
            "sim:pair-ib-16-ranks": (healthy, None, "ib"),
            "sim:pair-roce": (_sim(transport="RoCE", seed=3), None, "roce"),
            "sim:node-nvlink": (_node(), None, "ib"),
            "sim:pair-socket-fallback": (_sim(transport="Socket", busbw_gbps=44.0), 370.0, "ib"),
            "sim:node-socket-fallback": (_node(network="Socket"), None, "ib"),
            "sim:pair-ib-completion-errors": (_sim(errors="ib_completion", seed=11), None, "ib"),
            "sim:pair-timeout": (_sim(errors="hang", seed=5, min_bytes=8), None, "ib"),
            "sim:node-wrong": (_node(errors="wrong", seed=2), None, "ib"),
            "sim:pair-low-busbw": (_sim(busbw_gbps=250.0, seed=9), 370.0, "ib"),
            "sim:node-nvls": (_node(transport="NVLS", seed=4), None, "ib"),
            "sim:node-alltoall": (_node(collective="alltoall", seed=6), None, "ib"),
            "sim:pair-nccl-2.18": (_sim(nccl_version="2.18.3", seed=8), None, "ib"),
            "sim:pair-openmpi-tags": (_openmpi_tags(_sim(seed=12)), None, "ib"),
            "sim:pair-mpich-tag-per-field-group": (_mpich_tag_per_field_group(_sim(seed=13)), None, "ib"),
        }
    )
    # the probe path: fleet spec, faults and profile versions applied (fleetval.nccl.simulated_run)
    lab = _netlab()
    seeds["sim-run:pair-healthy"] = (
        nccl_run(lab, ["r01-n01", "r01-n03"], 8, salt="fuzz", min_bytes=1 << 26),
        None,
        "ib",
    )
    seeds["sim-run:node-socket-fallback"] = (
        nccl_run(lab, ["r01-n04"], 8, salt="fuzz", min_bytes=1 << 26),
        None,
        "ib",
    )
    return seeds


@cache
def seeds() -> dict[str, Seed]:
    out: dict[str, Seed] = {}
    for name, (text, baseline, fabric) in _seed_texts().items():
        try:
            clean: NcclRun | None = parse_nccl(text)
        except ParseError:
            clean = None
        results: dict[str, Result] = {}
        own = baseline
        if clean is not None:
            own = baseline or headline_busbw(clean) or 100.0
            verdicts = _judge(clean, own, fabric, busbw_criterion_for(clean))
            results = {k: v.result for k, v in verdicts.items()}
            results["D-NET-NCCL-04"] = judge_nccl_repeats([clean] * 3, subject="fuzz").result
        out[name] = Seed(name, text, own or 100.0, fabric, clean, results)
    return out


SEED_TEXTS = [(name, s.text) for name, s in seeds().items()]


# --- the oracle --------------------------------------------------------------------------------


def _sizes_line(run: NcclRun) -> tuple[int, ...] | None:
    """The sizes the header asks for (what the sizes line means, not how it is spelled)."""
    low, high = run.params.get("minBytes"), run.params.get("maxBytes")
    factor, step = run.params.get("stepFactor"), run.params.get("stepBytes")
    if low is None or high is None or (factor is None) == (step is None):
        return None
    sizes = [low]
    while len(sizes) < 64 and (nxt := sizes[-1] * factor if factor else sizes[-1] + (step or 0)) <= high:
        if nxt == sizes[-1]:
            return None
        sizes.append(nxt)
    return tuple(sizes)


def busbw_evidence(run: NcclRun) -> tuple[Any, ...]:
    return (
        run.collective,
        run.nranks,
        run.complete,
        _sizes_line(run),
        run.columns,
        tuple((r.size, r.count, r.type, r.redop) for r in run.rows),
        tuple((r.size, r.time_oop, r.algbw_oop, r.busbw_oop) for r in run.rows if r.size >= GIB),
    )


def errors_evidence(run: NcclRun) -> tuple[Any, ...]:
    return (
        run.complete,
        _sizes_line(run),
        run.columns,
        run.params.get("validation") == 0,
        tuple(
            (
                r.size,
                r.count,
                r.type,
                r.redop,
                r.wrong_oop,
                r.wrong_ip,
                r.error_oop is None,
                r.error_ip is None,
            )
            for r in run.rows
        ),
        (run.oob_values, run.oob_failed),
        frozenset((e.kind, e.host, e.message) for e in run.errors),
        tuple(run.harness_failures),
    )


def transport_evidence(run: NcclRun) -> tuple[Any, ...]:
    names = {*run.networks, *run.via_networks}
    return (
        frozenset(t for t in run.transports if t in ("IB", "RoCE", "Socket")),
        frozenset(n for n in names if not is_ib_network(n) and n != "Socket"),
        frozenset(d.rsplit("/", 1)[-1] for d in run.net_devices),
        frozenset(h for h in run.hosts if h not in run.network_hosts),
    )


EVIDENCE: dict[str, Callable[[NcclRun], tuple[Any, ...]]] = {
    "busbw": busbw_evidence,
    "D-NET-NCCL-03": errors_evidence,
    "D-NET-NCCL-TRANSPORT": transport_evidence,
    "D-NET-NCCL-04": busbw_evidence,
}


class Case(Mutant):
    """A mutant whose repr is short enough to read in a failure: the seed, the operations and the
    changed lines (the shared `Mutant` repr prints both 25 KB texts)."""

    __slots__ = ()

    @classmethod
    def of(cls, m: Mutant) -> Case:
        return cls(m.seed, m.original, m.text, m.ops)

    def __repr__(self) -> str:
        before, after = self.original.split("\n"), self.text.split("\n")
        changed = [ln for ln in after if ln not in set(before)][:4]
        lost = [ln for ln in before if ln not in set(after)][:4]
        return f"Case(seed={self.seed!r}, ops={self.ops!r}, lost={lost!r}, added={changed!r})"[:2000]


def cases(seeds: list[tuple[str, str]], **kw: Any) -> st.SearchStrategy[Case]:
    return mutants(seeds, **kw).map(Case.of)


def _crash(m: Mutant, where: str, exc: BaseException) -> AssertionError:
    record(FAMILY, "crashes")
    return AssertionError(f"{where} raised {type(exc).__name__}: {exc} on {m.seed} after {m.ops}")


def check(m: Mutant) -> None:
    seed = seeds()[m.seed]
    criterion = busbw_criterion_for(seed.clean) if seed.clean is not None else "D-NET-NCCL-01"
    run: NcclRun | None = None
    with timed(FAMILY):
        try:
            run = parse_nccl(m.text)
        except ParseError:
            run = None
        except Exception as exc:
            raise _crash(m, "parse_nccl", exc) from exc
        try:
            json.dumps(
                judge_nccl_to_json(run if run is not None else _parse_error(m.text), seed.baseline_gbps)
            )
            if run is not None:
                json.dumps(run.to_json())
                verdicts = _judge(run, seed.baseline_gbps, seed.fabric, criterion)
                clean = [seed.clean] * 2 if seed.clean is not None else []
                verdicts["D-NET-NCCL-04"] = judge_nccl_repeats([run, *clean], subject="fuzz")
        except Exception as exc:
            raise _crash(m, "a judge", exc) from exc
    if run is None or not m.changed:
        return
    for crit, verdict in verdicts.items():
        if verdict.result is not Result.PASS:
            continue
        was = seed.clean_results.get(crit)
        if was is not Result.PASS:
            record(FAMILY, "passes")
            raise AssertionError(f"{crit} passed a changed copy of {m.seed} (clean: {was}) after {m.ops}")
        assert seed.clean is not None
        evidence = EVIDENCE[crit]
        if evidence(run) != evidence(seed.clean):
            record(FAMILY, "passes")
            raise AssertionError(
                f"{crit} passed {m.seed} after {m.ops} with damaged evidence: "
                f"{_first_difference(evidence(seed.clean), evidence(run))}"
            )


def _parse_error(text: str) -> ParseError:
    try:
        parse_nccl(text)
    except ParseError as exc:
        return exc
    raise AssertionError("expected a ParseError")


def _first_difference(clean: tuple[Any, ...], damaged: tuple[Any, ...]) -> str:
    for i, (a, b) in enumerate(zip(clean, damaged, strict=True)):
        if a != b:
            return f"field {i}: clean {str(a)[:300]} / damaged {str(b)[:300]}"
    return "none"


# --- the suites --------------------------------------------------------------------------------


def test_seeds_exercise_every_verdict() -> None:
    """The oracle is only as good as its seeds: clean, they pass and fail every criterion."""
    results = {name: s.clean_results for name, s in seeds().items()}
    for crit in CRITERIA:
        seen = {r[crit] for r in results.values() if crit in r}
        assert {Result.PASS, Result.INCONCLUSIVE} <= seen, crit
        if crit != "D-NET-NCCL-04":
            assert Result.FAIL in seen, crit
    healthy = results["sim:pair-ib-16-ranks"]
    assert healthy == dict.fromkeys(CRITERIA, Result.PASS)
    assert results["fixture:all_reduce_perf-2node-h100-a3mega-16rank-mpirun-full.txt"]["busbw"] is Result.PASS
    assert results["sim:pair-mpich-tag-per-field-group"] == dict.fromkeys(CRITERIA, Result.PASS)
    assert results["sim:pair-openmpi-tags"] == dict.fromkeys(CRITERIA, Result.PASS)
    assert results["sim:pair-low-busbw"]["busbw"] is Result.FAIL
    assert results["sim:node-wrong"]["D-NET-NCCL-03"] is Result.FAIL
    assert results["sim:pair-socket-fallback"]["D-NET-NCCL-TRANSPORT"] is Result.FAIL


@pytest.mark.fuzz
@fuzz_settings()
@given(cases(SEED_TEXTS, words=WORDS))
def test_any_mutation_is_parsed_or_refused_and_never_passes_damage(m: Mutant) -> None:
    check(m)


# The passing seeds, mutated where their evidence is: numbers, words, rows and line structure.
PASSING = [
    (name, s.text) for name, s in seeds().items() if any(r is Result.PASS for r in s.clean_results.values())
]


@pytest.mark.fuzz
@fuzz_settings()
@given(
    cases(
        PASSING,
        words=WORDS,
        ops=(
            "number",
            "status",
            "delete_line",
            "duplicate_line",
            "swap_lines",
            "join_lines",
            "byte",
            "truncate",
        ),
    )
)
def test_passing_runs_damaged_where_the_evidence_is_never_pass(m: Mutant) -> None:
    check(m)


@pytest.mark.fuzz
@fuzz_settings()
@given(cases(SEED_TEXTS, ops=("long_token", "garbage", "line_endings", "byte", "empty"), max_ops=2))
def test_long_tokens_binary_and_line_endings_never_hang_or_crash(m: Mutant) -> None:
    check(m)


@pytest.mark.parametrize("name", sorted(seeds()))
def test_crlf_and_cr_line_endings_read_like_lf(name: str) -> None:
    """A run saved with CRLF or old-Mac CR endings is the same run."""
    seed = seeds()[name]
    if seed.clean is None:
        return
    for ending in ("\r\n", "\r"):
        assert parse_nccl(seed.text.replace("\n", ending)) == seed.clean, ending
