"""No silent pass, Xid: mutated kernel logs never crash the parser or the judge, never hang, and
never pass a node on Xid evidence that was lost or damaged.

Seeds: every real fixture in tests/fixtures/xid (see SOURCES.md there; the two catalog files too:
a table is not a log, so it must never pass either) and the simulator's output (`render_xid_lines`)
in every style for a fatal Xid, a DBE pair, repeating Xid 13 and 94 (cordoned by the repeat rules),
an Xid 45 caused by an NVLink Xid, Xid 154 and Xid 63, plus the attacker's mixed-clock log (three
`dmesg -T` Xid 13 lines 4 h apart and one syslog line). Every seed judges `warn` or worse.

The oracle, per mutant (the mutators are shared: tests/fuzz.py):

- the parse returns events or raises `ParseError`; the judge takes either and never raises;
- the judgement may pass only if the mutation removed the evidence entirely and left a well-formed
  log. What is decidable from the text, and is checked here:
  * evidence lines are the seed's Xid records (`NVRM: Xid`, the device plugin's `XidCriticalError`)
    and the lines of the fallen-off-the-bus message (prose naming an Xid is not one); a mutant
    line equal to one, or sharing at least half of one (its start plus its end: what survives a
    changed byte, number or word, inserted junk or a join), is evidence still there, damaged or
    not, and forbids a pass;
  * a last line without a line end that begins an evidence line is a cut record: no pass;
  * a pass needs at least one complete line that is one of the seed's own non-evidence kernel-log
    lines, or resembles one (half of it kept, or a similarity ratio of at least 0.5): garbage,
    binary, empty input, or a log reduced to fragments, never passes.
  A mutation that changed only lines the judgement does not read, while deleting every Xid line,
  leaves a log that is indistinguishable from a healthy one: that may pass.
Separately: scan_xid_file on the mutant (as a file) agrees with parse_xid(every_line=False) (the
lines holding its markers); a record cut inside its
Xid number is never read as a smaller Xid; adding lines on another clock never stops a repeat rule
from escalating.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetval.errors import ParseError
from fleetval.records import Result
from fleetval.xid.judge import XidJudgement, judge_xid
from fleetval.xid.parser import XidEvent, parse_xid, scan_xid_file
from fleetval.xid.simulated import STYLES, render_xid_lines
from fleetval.xid.table import NodeAction
from tests.fuzz import Mutant, fuzz_settings, mutants, record, timed

FIXTURES = Path(__file__).parents[2] / "fixtures" / "xid"
FAMILY = "xid"
NODE = "fuzz-node"
PCI = "0000:3b:00"
UUID = "GPU-5f3a0000-1111-2222-3333-444455556666"
T0 = 1_733_139_527.0  # 2024-12-02T11:38:47Z
HOUR = 3600.0

# Words whose corruption damages what the judgement reads: the record's tag and keyword, the
# PCI attribution, the device plugin's keys, the caused-by suffix, Xid 154's recovery actions.
WORDS = (
    "NVRM",
    "Xid",
    "PCI",
    "GPU",
    "XidCriticalError",
    "Device",
    "kernel",
    "pid",
    "name",
    "caused",
    "previous",
    "fallen",
    "None",
    "Drain",
    "Reset",
    "Required",
    "Reboot",
    "Contained",
    "Uncontained",
    "Fatal",
    "Nonfatal",
)

# name → render_xid_lines arguments; each rendered in every style.
_SIM: dict[str, dict[str, Any]] = {
    "xid79": {"code": 79},
    "xid48x2": {"code": 48, "count": 2, "pid": 4242, "process": "python3"},
    "xid13-repeats-4h": {"code": 13, "count": 3, "interval_s": 4 * HOUR},
    "xid94-repeats-2h": {"code": 94, "count": 3, "interval_s": 2 * HOUR, "pid": 7194, "process": "train"},
    "xid45-caused-by-149": {"code": 45, "caused_by": 149, "pid": 81234, "process": "python3"},
    "xid154": {"code": 154},
    "xid63": {"code": 63},
}


def _render(style: str, **kwargs: Any) -> str:
    return render_xid_lines(
        **{"gpu_pci": PCI, "gpu_uuid": UUID, "start_epoch_s": T0, "host": NODE, **kwargs}, style=style
    )


def _xid_lines(text: str) -> str:
    """The rendered text without its `GPU at PCI` line."""
    return text.split("\n", 1)[1]


def _seeds() -> dict[str, str]:
    seeds = {
        f"real:{p.name}": p.read_bytes().decode("utf-8")
        for p in sorted(FIXTURES.iterdir())
        if p.suffix in {".log", ".txt", ".csv"}
    }
    for style in STYLES:
        for label, kwargs in _SIM.items():
            seeds[f"sim:{style}:{label}"] = _render(style, **kwargs)
    # The attacker's log: three Xid 13 four hours apart on the wall clock and one on the uptime
    # clock, one GPU (no UUID line, so every line's subject is the node's PCI address).
    seeds["sim:mixed-clocks:xid13-repeats-4h"] = _xid_lines(
        _render("dmesg-T", code=13, count=3, interval_s=4 * HOUR)
    ) + _xid_lines(_render("syslog", code=13))
    return seeds


SEEDS = _seeds()
PAIRS = sorted(SEEDS.items())

# The oracle's own statement of what evidence is and what a kernel-log line looks like (it does
# not ask the parser).
_EVIDENCE_MARKS = ("NVRM: Xid", "XidCriticalError", "fallen off the bus", "The NVIDIA GPU", "(PCI ID:")
_LOG_LINE = re.compile(
    r"^\s*(?:\[\s*\d+\.\d+\]|\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]|\d{4}-\d\d-\d\dT\d\d:\d\d"
    r"|\d{4}/\d\d/\d\d \d\d:\d\d|\w{3} [ \d]\d \d\d:\d\d:\d\d|NVRM:)"
)
_LINE_END = re.compile(r"\r\n|\r|\n")


def _lines(text: str) -> tuple[list[str], str]:
    """Complete lines (a NUL before the line end is a line-end variant) and the unterminated rest."""
    parts = _LINE_END.split(text)
    return [p.rstrip("\x00") for p in parts[:-1]], parts[-1]


class _SeedLines:
    def __init__(self, text: str) -> None:
        complete, rest = _lines(text)
        lines = [*complete, rest] if rest else complete
        self.evidence = {line for line in lines if any(m in line for m in _EVIDENCE_MARKS)}
        self.plain_log = {line for line in lines if line not in self.evidence and _LOG_LINE.match(line)}
        self.all = set(lines)


SEED_LINES = {name: _SeedLines(text) for name, text in SEEDS.items()}


def _common_start(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _shares_half(line: str, ref: str) -> bool:
    """`line` keeps at least half of `ref`: its common start plus its common end."""
    start = _common_start(line, ref)
    end = _common_start(line[::-1], ref[::-1])
    return 2 * min(start + end, len(ref)) >= len(ref) > 0


def _resembles(line: str, ref: str) -> bool:
    """`line` may be `ref` with a few changes anywhere (for the lines a pass may rest on)."""
    if _shares_half(line, ref):
        return True
    return len(line) <= 2 * len(ref) and SequenceMatcher(None, line, ref, autojunk=False).ratio() >= 0.5


def pass_forbidden(mutant: Mutant) -> str | None:
    """Why a pass of this mutant would be a silent pass; None when a pass is allowed."""
    seed = SEED_LINES[mutant.seed]
    complete, rest = _lines(mutant.text)
    for line in [*complete, rest] if rest else complete:
        if line in seed.evidence:
            return f"evidence line kept: {line[:120]!r}"
        if line not in seed.all and any(_shares_half(line, e) for e in seed.evidence):
            return f"damaged evidence line: {line[:120]!r}"
    if rest and any(e.startswith(rest) for e in seed.evidence):
        return f"cut inside an evidence line: {rest[:120]!r}"
    if not any(
        line in seed.plain_log or any(_resembles(line, p) for p in seed.plain_log) for line in complete
    ):
        return "no complete kernel-log line of the seed is left (garbage, binary, empty or fragments)"
    return None


def parse_or_error(text: str, *, every_line: bool = True) -> tuple[XidEvent, ...] | ParseError:
    try:
        return parse_xid(text, every_line=every_line)
    except ParseError as exc:
        return exc


def judge_text(text: str) -> XidJudgement:
    return judge_xid(parse_or_error(text), node=NODE)


def passes(judgement: XidJudgement) -> bool:
    return any(v.result is Result.PASS for v in judgement.to_verdicts())


def problem(mutant: Mutant) -> tuple[str, str] | None:
    """(outcome, why) when the mutant breaks the oracle: "crashes" or "passes"; None when it holds."""
    try:
        with timed(FAMILY):
            judgement = judge_text(mutant.text)
    except Exception as exc:  # a crash is what this suite counts, whatever its type
        return "crashes", f"{type(exc).__name__}: {str(exc)[:200]}"
    if not passes(judgement):
        return None
    why = pass_forbidden(mutant)
    return ("passes", why) if why is not None else None


def fail(outcome: str, why: str, mutant: Mutant) -> None:
    record(FAMILY, outcome)
    raise AssertionError(
        f"{outcome}: {why}; seed {mutant.seed}, ops {mutant.ops}, text {mutant.text[:400]!r}"
    )


def check(mutant: Mutant) -> None:
    found = problem(mutant)
    if found is not None:
        fail(*found, mutant)


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(PAIRS, words=WORDS))
def test_any_mutant_parses_or_raises_parse_error_and_never_passes_damage(mutant: Mutant) -> None:
    check(mutant)


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(PAIRS, words=WORDS, ops=("truncate", "line_endings", "join_lines", "delete_line", "byte")))
def test_cut_joined_or_re_ended_logs_never_pass_damage(mutant: Mutant) -> None:
    check(mutant)


def _event_key(events: tuple[XidEvent, ...] | ParseError) -> object:
    return ("ParseError", events.reason) if isinstance(events, ParseError) else events


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(PAIRS, words=WORDS))
def test_streaming_scan_reads_a_mutant_file_as_parse_xid_reads_its_text(mutant: Mutant) -> None:
    """The scan reads the lines holding its markers, as `parse_xid(every_line=False)` does."""
    data = mutant.text.encode("utf-8")
    text = data.decode("utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kern.log"
        path.write_bytes(data)
        try:
            with timed(FAMILY):
                parsed = _event_key(parse_or_error(text, every_line=False))
                scanned: object
                try:
                    scanned = tuple(scan_xid_file(path, chunk_size=64))
                except ParseError as exc:
                    scanned = ("ParseError", exc.reason)
        except Exception as exc:
            fail("crashes", f"{type(exc).__name__}: {str(exc)[:200]}", mutant)
    assert _without_uuids(scanned) == _without_uuids(parsed), mutant


def _without_uuids(key: object) -> object:
    """The scan streams, so it cannot attach a UUID printed after the event (documented): compare
    everything else."""
    if isinstance(key, tuple) and all(isinstance(e, XidEvent) for e in key):
        return tuple(
            (e.line_no, e.kind, e.xid, e.pci, e.caused_by, e.recovery_action, e.message) for e in key
        )
    return key


_RECORD_NUMBER = re.compile(r"NVRM: Xid \([^)]*\): (\d+), ")


@st.composite
def _cut_in_number(draw: Callable[[st.SearchStrategy[Any]], Any]) -> tuple[str, str, int, int]:
    """A seed cut inside the Xid number of one of its records: the rest of the log dropped, or the
    rest of that line only (a shipper that cut one line). (seed, text, line number, number kept)."""
    name, text = draw(st.sampled_from([(n, t) for n, t in PAIRS if _RECORD_NUMBER.search(t)]))
    m = draw(st.sampled_from([m for m in _RECORD_NUMBER.finditer(text) if len(m.group(1)) > 1]))
    keep = draw(st.integers(1, len(m.group(1)) - 1))
    head = text[: m.start(1) + keep]
    eol = text.find("\n", m.end())
    tail = draw(st.sampled_from(("", "\n", "\r\n", text[eol:] if eol >= 0 else "")))
    return name, head + tail, head.count("\n") + 1, int(m.group(1)[:keep])


@pytest.mark.fuzz
@fuzz_settings()
@given(_cut_in_number())
def test_a_record_cut_inside_its_xid_number_is_never_a_smaller_xid(case: tuple[str, str, int, int]) -> None:
    name, text, line_no, kept = case
    with timed(FAMILY):
        events = parse_or_error(text)
        judgement = judge_xid(events, node=NODE)
    assert not isinstance(events, ParseError), (name, text[-200:])
    on_the_line = [(e.kind, e.xid) for e in events if e.line_no == line_no]
    if on_the_line != [("unreadable", None)] or passes(judgement):
        record(FAMILY, "passes")
    assert on_the_line == [("unreadable", None)], (name, kept, on_the_line)
    assert not passes(judgement)


_REPEATING = [n for n in SEEDS if "repeats" in n and ("dmesg-T" in n or ":iso:" in n)]


@pytest.mark.fuzz
@fuzz_settings()
@given(
    st.sampled_from(_REPEATING),
    st.lists(
        st.tuples(
            st.sampled_from(("syslog", "kmsg", "bare")),
            st.sampled_from((13, 31, 94)),
            st.floats(0, 30 * HOUR),
            st.integers(0, 10),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_lines_on_another_clock_never_stop_a_repeat_from_escalating(
    name: str, extra: list[tuple[str, int, float, int]]
) -> None:
    lines = SEEDS[name].splitlines()
    assert judge_text(SEEDS[name]).node_action is NodeAction.CORDON
    for style, code, offset, at in extra:
        line = _xid_lines(_render("kmsg" if style == "bare" else style, code=code, start_epoch_s=T0 + offset))
        line = line.rstrip("\n")
        if style == "bare":
            line = line[line.index("NVRM:") :]
        lines.insert(min(at, len(lines)), line)
    text = "\n".join(lines) + "\n"
    with timed(FAMILY):
        judgement = judge_text(text)
    if judgement.node_action is not NodeAction.CORDON:
        record(FAMILY, "passes")
    assert judgement.node_action is NodeAction.CORDON, text


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_every_seed_is_warn_or_worse_before_mutation(name: str) -> None:
    # The oracle assumes no seed passes clean; the repeat seeds cordon in every style.
    judgement = judge_text(SEEDS[name])
    assert not passes(judgement)
    if "repeats" in name or "xid79" in name or "xid48" in name:
        assert judgement.node_action is NodeAction.CORDON
