"""Findings of an adversarial review of the Xid parser:

1. A 1 MiB line of repeated `NVRM: Xid ` tags took > 20 s and gave ~100k events: the records read
   per line and the events kept per log are bounded, the scan stays linear in the input, and a
   bound that is hit is said (an unreadable event, so the judge is inconclusive), never a pass.
2. A damaged or cut " caused by previous Xid N" suffix judged an Xid 45 without its cause (a
   cordon became a warn): it is an unreadable line now.

No wall-clock thresholds: the tests count events, calls and the bytes the scan looks at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetval.records import Result
from fleetval.xid import parser as xp
from fleetval.xid.judge import XidJudgement, judge_xid
from fleetval.xid.parser import XidEvent, parse_xid, scan_xid_file
from fleetval.xid.table import NodeAction

NODE = "node-1"
MIB = 1 << 20
TAG_UNIT = "NVRM: Xid "
TAG_LINE = "[ 5.000000] " + TAG_UNIT * (MIB // len(TAG_UNIT))
# Driver 550+ format (kernel_rc.c krcReportXid); 79 cordons, a 45 on its own only warns.
CAUSED = (
    "[171168.902112] NVRM: Xid (PCI:0009:01:00): 45, pid=81234, name=python3, "
    "Ch 0000000a caused by previous Xid 79"
)
SUFFIX_AT = CAUSED.index(" caused by")
NUMBER_AT = CAUSED.index("79")


def scan_text(tmp_path: Path, text: str | bytes, chunk_size: int = 1 << 16) -> tuple[XidEvent, ...]:
    path = tmp_path / "kern.log"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return tuple(scan_xid_file(path, chunk_size=chunk_size))


def rows(events: tuple[XidEvent, ...]) -> list[tuple[int, str, int | None, int | None]]:
    return [(e.line_no, e.kind, e.xid, e.caused_by) for e in events]


def inconclusive(judgement: XidJudgement) -> list[str]:
    return [v.reason for v in judgement.to_verdicts() if v.result is Result.INCONCLUSIVE]


def never_lowered(judgement: XidJudgement) -> bool:
    """The cause's cordon, or a decision that says the evidence could not be read."""
    return judgement.node_action is NodeAction.CORDON or bool(inconclusive(judgement))


# --- 1. bounds -------------------------------------------------------------------------------


def test_a_line_of_repeated_xid_tags_reads_a_bounded_number_of_records_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = 0
    read_record = xp._LineParser._xid

    def counting(self: Any, *args: Any, **kwargs: Any) -> XidEvent:
        nonlocal records
        records += 1
        return read_record(self, *args, **kwargs)

    monkeypatch.setattr(xp._LineParser, "_xid", counting)
    events = parse_xid(TAG_LINE + "\n")
    assert records < 100, records  # not one per tag (~100k)
    assert records == xp._MAX_RECORDS_PER_LINE
    assert len(events) == xp._MAX_RECORDS_PER_LINE + 1
    note = events[-1]
    assert (note.line_no, note.kind, note.xid) == (1, "unreadable", None)
    assert note.message.startswith(xp.NOT_READ) and "records on one line" in note.message
    judgement = judge_xid(events, node=NODE)
    assert judgement.node_action is NodeAction.NONE
    assert any(xp.NOT_READ in reason for reason in inconclusive(judgement))
    assert not any(v.result is Result.PASS for v in judgement.to_verdicts())


def test_the_scan_reads_a_line_of_repeated_tags_as_parse_xid_does(tmp_path: Path) -> None:
    text = TAG_LINE + "\n" + "[ 6.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    parsed = parse_xid(text, every_line=False)
    assert scan_text(tmp_path, text) == parsed
    assert len(parsed) == xp._MAX_RECORDS_PER_LINE + 2  # the next line is read as usual
    assert rows(parsed[-2:]) == [(1, "unreadable", None, None), (2, "xid", 79, None)]


def test_a_few_records_on_one_line_are_all_read() -> None:
    """Real lines carry one tag; two records joined by a lost line end are read as before."""
    record = "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception "
    line = "[ 5.000000] " + record * xp._MAX_RECORDS_PER_LINE
    assert [e.kind for e in parse_xid(line + "\n")] == ["xid"] * xp._MAX_RECORDS_PER_LINE
    kinds = [e.kind for e in parse_xid(line + record + "\n")]
    assert kinds == ["xid"] * xp._MAX_RECORDS_PER_LINE + ["unreadable"]


class _CountingBuffer(bytearray):
    """A buffer that adds up the bytes its find/rfind calls pass over."""

    scanned = 0

    def find(self, sub: Any, start: Any = 0, end: Any = None) -> int:
        at = super().find(sub, start, end)
        stop = len(self) if end is None else end
        self.scanned += (at if at >= 0 else stop) - start
        return at

    def rfind(self, sub: Any, start: Any = 0, end: Any = None) -> int:
        at = super().rfind(sub, start, end)
        stop = len(self) if end is None else end
        self.scanned += stop - (at if at >= 0 else start)
        return at


@pytest.mark.parametrize("unit", ["Xid ", "NVRM: Xid ", "NVRM NVRM Xid"])
def test_the_scan_looks_at_each_byte_of_a_dense_line_a_bounded_number_of_times(unit: str) -> None:
    """Each marker used to search back to its line's start: quadratic in a line of markers."""
    data = ("[ 5.000000] " + unit * (MIB // len(unit)) + "\n[ 6.000000] usb 1-1: new device\n").encode()
    buf = _CountingBuffer(data)
    spans, lines = xp._spans(buf, len(buf))
    assert lines == 2 and [(s, e) for s, e, _ in spans] == [(0, data.index(b"\n"))]
    assert buf.scanned <= 3 * len(data)


def _storm(count: int) -> list[str]:
    return [
        f"[{1000 + k / 1000:12.6f}] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=p, Graphics Exception"
        for k in range(count)
    ]


def test_a_log_of_more_xid_events_than_the_bound_keeps_the_first_and_says_so(tmp_path: Path) -> None:
    bound = xp._MAX_EVENTS_PER_LOG
    fatal = "[  999.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    text = "\n".join([fatal, *_storm(bound + 500)]) + "\n"
    events = parse_xid(text)
    assert len(events) == bound + 1
    assert rows(events[:2]) == [(1, "xid", 79, None), (2, "xid", 13, None)]
    note = events[-1]
    assert (note.line_no, note.kind, note.xid) == (bound + 1, "unreadable", None)
    assert note.message.startswith(xp.NOT_READ) and str(bound) in note.message
    assert scan_text(tmp_path, text) == parse_xid(text, every_line=False) == events
    judgement = judge_xid(events, node=NODE)
    assert judgement.node_action is NodeAction.CORDON  # the 79 read before the bound still counts
    assert any(xp.NOT_READ in reason for reason in inconclusive(judgement))


def test_a_log_at_the_bound_is_read_whole_and_one_more_event_is_said() -> None:
    bound = xp._MAX_EVENTS_PER_LOG
    storm = _storm(bound + 1)
    whole = parse_xid("\n".join(storm[:bound]) + "\n")
    assert len(whole) == bound and all(e.kind == "xid" for e in whole)
    over = parse_xid("\n".join(storm) + "\n")
    assert over[:bound] == whole and rows(over[bound:]) == [(bound + 1, "unreadable", None, None)]
    judgement = judge_xid(over, node=NODE)
    assert judgement.node_action is NodeAction.NONE and inconclusive(judgement)
    assert not any(v.result is Result.PASS for v in judgement.to_verdicts())


# --- 2. the caused-by suffix ---------------------------------------------------------------------


def test_an_intact_suffix_and_a_plain_45_are_read_as_before() -> None:
    (caused,) = parse_xid(CAUSED + "\n")
    assert (caused.kind, caused.xid, caused.caused_by) == ("xid", 45, 79)
    assert judge_xid((caused,), node=NODE).node_action is NodeAction.CORDON
    (plain,) = parse_xid(CAUSED[:SUFFIX_AT] + "\n")  # a 45 printed without a root cause
    assert (plain.kind, plain.xid, plain.caused_by) == ("xid", 45, None)
    assert [v.result for v in judge_xid((plain,), node=NODE).to_verdicts()] == [Result.WARN]


def _damaged(op: str, at: int, bad: str) -> str:
    if op == "replace":
        return CAUSED[:at] + bad + CAUSED[at + 1 :]
    if op == "insert":
        return CAUSED[:at] + bad + CAUSED[at:]
    return CAUSED[:at] + CAUSED[at + 1 :]


# Deleting a digit of the root leaves another valid number ("79" → "7"): no text can tell.
_CASES = [
    (op, at, bad)
    for op in ("replace", "insert", "delete")
    for at in range(SUFFIX_AT, NUMBER_AT if op == "delete" else len(CAUSED))
    for bad in (("",) if op == "delete" else ("\ufffd", "#"))
]


@pytest.mark.parametrize(("op", "at", "bad"), _CASES)
def test_one_damaged_character_in_the_suffix_never_lowers_the_verdict(op: str, at: int, bad: str) -> None:
    line = _damaged(op, at, bad)
    events = parse_xid(line + "\n")
    assert rows(events) in ([(1, "unreadable", None, None)], [(1, "xid", 45, 79)]), line
    assert never_lowered(judge_xid(events, node=NODE)), line


@pytest.mark.parametrize("at", range(SUFFIX_AT, len(CAUSED) + 1))
def test_an_invalid_byte_in_the_suffix_of_a_scanned_file_never_lowers_the_verdict(
    tmp_path: Path, at: int
) -> None:
    data = CAUSED.encode()
    events = scan_text(tmp_path, data[:at] + b"\xff" + data[at:] + b"\n")
    assert rows(events) in ([(1, "unreadable", None, None)], [(1, "xid", 45, 79)])
    assert never_lowered(judge_xid(events, node=NODE))


_AFTER_COMMA = CAUSED.index("45,") + len("45,")


@pytest.mark.parametrize(
    "text",
    [
        CAUSED[:_AFTER_COMMA],  # the text stops right after "45,"
        CAUSED[:_AFTER_COMMA] + "\n",  # the line was cut there and given a line end
        CAUSED[: CAUSED.index(" Ch ")] + "\n",  # after "name=python3,": nothing after pid and name
        CAUSED[:SUFFIX_AT],  # the text stops before the suffix: it may have followed
        CAUSED[: SUFFIX_AT + len(" c")] + "\n",
        CAUSED[: SUFFIX_AT + len(" caus")] + "\n",
        CAUSED[: CAUSED.index(" previous")] + "\n",
        CAUSED[: CAUSED.index(" prev") + len(" prev")] + "\n",
        CAUSED[: CAUSED.index(" Xid 79")] + "\n",
        CAUSED[:NUMBER_AT] + "\n",
        CAUSED[: NUMBER_AT + 1],  # the text stops inside the number ("79" → "7")
    ],
    ids=["eof-after-comma", "eol-after-comma", "eol-after-name", "eof-before-suffix", "eol-c", "eol-caus",
         "eol-caused-by", "eol-prev", "eol-previous", "eol-previous-xid", "eof-in-number"],
)  # fmt: skip
def test_a_cut_suffix_is_unreadable_never_a_plain_45(tmp_path: Path, text: str) -> None:
    events = parse_xid(text)
    assert rows(events) == [(1, "unreadable", None, None)], text
    assert scan_text(tmp_path, text, chunk_size=64) == parse_xid(text, every_line=False) == events
    judgement = judge_xid(events, node=NODE)
    assert [v.result for v in judgement.to_verdicts()] == [Result.INCONCLUSIVE]


def test_a_cut_last_line_of_another_xid_is_still_read() -> None:
    """Only a 45 is judged by its suffix: another Xid on a cut last line keeps its number."""
    line = "[ 5.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=p, Graphics Exception"
    assert rows(parse_xid(line)) == [(1, "xid", 13, None)]
    assert rows(parse_xid(line[: line.index("13,") + 3])) == [(1, "xid", 13, None)]
