"""Xid events from kernel logs (dmesg, /dev/kmsg, syslog, journal) and device-plugin logs.

Real lines this parser reads (abbreviated; fixtures in `tests/fixtures/xid/`, provenance in
its SOURCES.md):

    [31543.449440] NVRM: GPU at PCI:0000:01:00: GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d
    [24128.828315] NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000      (2015)
    [31543.449443] NVRM: Xid (PCI:0000:01:00): 31, Ch 0000003a, intr 10000000. MMU Fault: ...
    [Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch ...
    Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>',
        name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU ...
    NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No
    [171167.621162] NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to
        0x4 (Drain and Reset)
    [ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0
                   NVRM: (PCI ID: 10de:26b5) installed in this system has
                   NVRM: fallen off the bus and is not responding to commands.      (no Xid number)
    2020/08/10 19:09:42 XidCriticalError: Xid=69 on Device=GPU-7540a9b3-..., the device will go unhealthy.

Driver 550+ appends " caused by previous Xid N" to an Xid 45 whose root cause is another Xid
(`krcReportXid` in NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c, which
prints it only for ROBUST_CHANNEL_PREEMPTIVE_REMOVAL, and at the end of the line; it also prints
the `GPU at PCI:...: GPU-<uuid>` line once per GPU before its first Xid).

No silent pass: every trace of Xid evidence becomes an event, a damaged one included, and input
with no readable kernel-log line at all is an error, never "no Xid events". Decisions:
- A "fallen off the bus" message without an Xid number is an event with `xid=79`,
  `inferred=True`, `kind="fell_off_bus"`: the driver's wording is the meaning of Xid 79.
- A record that cannot be read is an event with `xid=None`, `kind="unreadable"` (the judge makes
  it inconclusive), never dropped and never an exception: one garbled line must not hide the
  readable Xids around it. Unreadable: an `NVRM: Xid` record that does not parse; an Xid number
  not followed by its delimiter `,` (a line cut inside the number, `145` → `14`), out of ASCII
  digits, or longer than 9 digits; a caused-by number not followed by a space or the line's end,
  or at the end of a last line that has no line end (it may be cut); an Xid 45 whose suffix may be
  damaged or cut (below); a record whose `NVRM:` tag or `Xid` keyword is damaged but whose shape
  remains (`Xid (`, `(PCI:dddd:bb:dd...):`, `): N,`); a device-plugin `XidCriticalError:` /
  `Xid=` line that does not parse; an `NVRM` line with a damaged fell-off-the-bus wording; a
  "The NVIDIA GPU <pci>" message that does not end in "fallen off the bus" (cut, interrupted, or
  another GPU problem such as "not supported"); and the last line when the input does not end
  with a line end and that line yields nothing clean.
- An Xid 45 is judged by its root cause, so a 45 whose " caused by previous Xid N" may be lost
  is unreadable, never a plain 45 (a cordon read as a warn): a word of the suffix left without
  the whole suffix (one changed byte keeps "caused" or "previous"), a message that ends inside
  it (`... Ch 0000000a caus`), nothing after the comma of its number or of its pid and name (the
  driver always names the channel), or a last line without a line end (the suffix may be cut).
- A line may hold several records (`NVRM: NVRM: Xid ...`, two records joined by a lost line end):
  each `NVRM:` starts one; a later record's time is the stamp just before its tag, else the line's.
- Bounded cost (linear in the input): at most `_MAX_RECORDS_PER_LINE` records are read from one
  line and `_MAX_EVENTS_PER_LOG` events from one input. Past a bound one unreadable event, its
  message starting with `NOT_READ`, says what was not read (the judge is inconclusive and quotes
  it), and the rest of the line, or of the input, is not read.
- Lines end at LF, CR LF or a lone CR (an old Mac or a mangled copy: still one record a line).
- `parse_xid` raises `ParseError` when the input holds no readable kernel-log line (a known time
  stamp, `NVRM:` or `kernel:` at the start, then words) and no Xid trace: empty, binary or garbage
  input, or a table, is no evidence of a healthy node.
- Numbers are ASCII digits of bounded length (an Arabic-Indic "3" is not an Xid; `int()` never
  sees 5,000 digits): the parser raises nothing but `ParseError`.
- `epoch_s` is set only for wall-clock stamps that carry a year (`dmesg -T`, ISO 8601, Go log);
  stamps without a zone are read as UTC. Classic syslog (`Dec  2 11:38:27`) has no year, so only
  its kernel `[uptime]` is kept (`uptime_s`).
- PCI addresses are normalised to `dddd:bb:dd` (lower case, no function), the Xid line's form.
- `parse_xid` attaches UUIDs from `GPU at PCI` lines anywhere in the text (per host);
  `scan_xid_file` streams, so it attaches only UUIDs printed earlier in the file (the driver
  prints them before the first Xid of each GPU, so this loses nothing on real logs). Otherwise
  the scan reads what `parse_xid(text, every_line=False)` reads, and raises the same
  `ParseError`: it looks only at lines holding "NVRM" or "Xid" (numpy over whole chunks), so a
  record whose tag and keyword are both damaged is `parse_xid`'s to find (a regex per line).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Generator, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from fleetval.errors import ParseError

if TYPE_CHECKING:  # numpy (a pandas dependency) is imported by the streaming scan only
    import numpy as np
    import numpy.typing as npt

# The lines the streaming scan reads (and `parse_xid` feeds its record parser): a kernel "NVRM"
# line holding one of the keys after its first "NVRM" (Xid records, the "GPU at PCI" UUID line, the
# driver's GPU messages and what a changed byte leaves of them), or any other line holding "Xid"
# (device-plugin lines, records whose tag is damaged). Two markers, found by numpy over a whole
# chunk: a record with one of them damaged is still read. `parse_xid` also looks at every other
# line for what is left of a record with both damaged (`_stray`): a regex per line, which a
# multi-GB scan cannot afford. Other NVRM chatter costs a few substring tests per line.
_NVRM: Final = "NVRM"
_NVRM_KEYS: Final = (
    "Xid",
    "PCI",
    "NVIDIA",
    "GPU",
    "fallen",
    "the bus",
    "not responding",
    "installed in",
    "):",
)
_XID: Final = "Xid"
_B_KEYS = re.compile(b"|".join(re.escape(k.encode()) for k in _NVRM_KEYS))
# The bytes of the two markers, "NVRM" and "Xid", as `_marker_at` compares them.
_N, _V, _R, _M = _NVRM.encode()
_X, _I, _D = _XID.encode()
_TAG: Final = "NVRM:"

# re.ASCII everywhere: a digit is 0-9 (int() would read Arabic-Indic digits as a valid Xid).
_A = re.ASCII
_LINE_END = re.compile(r"\r\n|\r|\n")
_PCI = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
# The driver prints "Xid (PCI:%s): %d, ..." (kernel_rc.c): the number must end at its ",". Nine
# digits bound every number handed to int().
_XID_LINE = re.compile(
    rf"^Xid\s*\(\s*(?:PCI:)?(?P<pci>{_PCI})(?:\.[0-7])?"
    r"(?:\s+GPU-I:(?P<gi>\d{1,9}))?(?:\s+GPU-CI:(?P<ci>\d{1,9}))?\s*\):\s*(?P<xid>\d{1,9}),\s*(?P<rest>.*)$",
    _A,
)
_PID_NAME = re.compile(
    r"^pid=(?:'<unknown>'|<unknown>|(?P<pid>\d{1,10}))\s*(?:,\s*name=(?P<name>[^,]*))?\s*(?:,\s*(?P<msg>.*))?$",
    _A,
)
_CAUSED_BY = re.compile(r"caused by previous Xid\b", _A)
_CAUSED_BY_ROOT = re.compile(r"\s+(?P<root>\d{1,9})(?P<end>\s|$)", _A)
_RECOVERY = re.compile(r"recovery action changed\b(?P<tail>.*)$", _A)
_RECOVERY_TO = re.compile(r"^ from 0x[0-9a-fA-F]+ \([^)]*\) to 0x[0-9a-fA-F]+ \((?P<action>[^)]*)\)", _A)
_CONTAINMENT = re.compile(r"\b(Contained|Uncontained):", _A)
_RST = re.compile(r"(?<![\w-])RST:\s*(Yes|No)\b", _A)
_D_RST = re.compile(r"\bD-RST:\s*(Yes|No)\b", _A)
_GPU_AT = re.compile(rf"^GPU at PCI:(?P<pci>{_PCI}):\s*(?P<uuid>GPU-[0-9a-fA-F-]+)", _A)
_THE_GPU = re.compile(rf"^The NVIDIA GPU (?P<pci>{_PCI})(?:\.[0-7])?\b", _A)
_ANY_PCI = re.compile(rf"\b(?:PCI:)?(?P<pci>{_PCI})(?:\.[0-7])?\b", _A)
# k8s-device-plugin's formats (internal/rm/health.go and its predecessors): "XidCriticalError:
# Xid=%d on Device=%s, ..." / "...; marking ...", "... on GPU=%s ...", "Xid=%d, All devices ...".
_DEVICE_PLUGIN = re.compile(
    r"XidCriticalError:\s*Xid=(?P<xid>\d{1,9})(?:\s+on\s+(?:Device|GPU)=(?P<dev>[^\s,;]+)"
    r"|,\s*All devices will go unhealthy)",
    _A,
)
# What is left of a device-plugin line with changed bytes or words: its key, "Xid=", "=N on Device=",
# its ending.
# ("Skipping non-nvmlEventTypeXidCriticalError event: ..." is another line, and no trace.)
_PLUGIN_TRACE = re.compile(
    r"XidCritical\w*\s*:|CriticalError\s*:|Xid\s*=|=\s*\d+\s+on\s+\w+=|(?:will go|as) unhealthy\.", _A
)
# What is left of a record whose tag or keyword is damaged.
_RECORD_TRACE = re.compile(
    rf"Xid\s*\(|\(\s*(?:PCI:)?{_PCI}[^)]{{0,40}}\)\s*:|\)\s*:\s*\d+\s*,|pid='<unknown>', name=<unknown>", _A
)
# What is left of a fell-off-the-bus wording with a changed byte (the two halves do not overlap),
# and of the driver's multi-line GPU message ("The NVIDIA GPU <pci>" / "(PCI ID: ...) installed in
# this system has" / "fallen off the bus ..." or "... is not supported ...") out of its sequence.
_FELL_OFF: Final = "fallen off the bus"
_FELL_OFF_TRACES: Final = ("fallen", "the bus", "not responding", "PCI ID", "installed in this system")
# On a line without the "NVRM" tag only the specific halves count ("not responding" is common).
_STRAY_FELL_OFF = re.compile(r"fallen off|off the bus", _A)
_GPU_MESSAGE_TRACE = re.compile(
    rf"^The NVIDIA\b.*{_PCI}|NVIDIA GPU {_PCI}|^The \w+ GPU {_PCI}|^The NVIDIA GPU\b", _A
)

_MONTH_NAMES: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTHS: Final = {m: i for i, m in enumerate(_MONTH_NAMES, 1)}
_MON = "(?:" + "|".join(_MONTH_NAMES) + ")"
_DAY = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_RAW_KMSG = re.compile(r"^\s*\d{1,20},\d{1,20},(?P<us>\d{1,20}),[^;]*;", _A)
_CTIME = re.compile(
    rf"\[(?P<ts>{_DAY} (?P<mon>{_MON}) +(?P<d>\d{{1,2}}) "
    r"(?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d) (?P<Y>\d{4}))\]",
    _A,
)
_UPTIME = re.compile(r"\[\s*(?P<up>\d{1,12}\.\d{1,9})\]", _A)
_BRACKET = re.compile(r"^\s*\[(?P<ts>[^\]]*)\]", _A)
_ISO = re.compile(
    r"(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d(?::?\d\d)?)?)"
    r"(?:\s+(?P<host>\S+)\s+kernel:)?",
    _A,
)
_BSD = re.compile(
    rf"(?P<ts>{_MON} [ \d]\d \d\d:\d\d:\d\d(?:\.\d{{1,9}})?)(?:\s+(?P<host>\S+)\s+kernel:)?", _A
)
_GOLOG = re.compile(r"(?P<ts>\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d{1,9})?)", _A)
_LAUNCHER_HOST = re.compile(r"^(?P<host>[A-Za-z][\w.-]*):\s", _A)
# A readable kernel-log line: a launcher's host, then a stamp of a known log format (or the
# kernel's own tag), then words. A bare "[0]", or "NVRM: NVRM: ...", is not one.
_LOG_LINE = re.compile(
    r"^\s*(?:[A-Za-z][\w.-]*:\s+)?(?:"
    r"\[\s*\d+\.\d+\]"
    rf"|\[{_DAY} {_MON} +\d{{1,2}} \d\d:\d\d:\d\d \d{{4}}\]"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d"
    r"|\d{4}/\d\d/\d\d \d\d:\d\d:\d\d"
    rf"|{_MON} [ \d]\d \d\d:\d\d:\d\d"
    r"|\d+,\d+,\d+,[^;]*;"
    r"|NVRM:|kernel:"
    r")(?P<message>.*)$",
    _A,
)
_WORD = re.compile(r"[A-Za-z]{2}", _A)
# printk records are at most 1 KiB (PRINTKRB_RECORD_MAX); with a syslog or journal prefix a real
# kernel-log line stays far below this. A longer line is not one (it may still hold Xid traces).
_MAX_LOG_LINE: Final = 4096

# How many inert NVRM bodies (`_LineParser._inert`) are remembered.
_INERT_BODIES: Final = 4096

# A multi-line "fallen off the bus" message is at most this many lines from its first line.
_MAX_CONTINUATION_LINES: Final = 4

# A real kernel-log line carries one "NVRM:" tag; a lost line end joins two or three records. A
# line of 100k tags (1 MiB of "NVRM: Xid ") must not cost 100k records and events.
_MAX_RECORDS_PER_LINE: Final = 16
# A failing node logs at most thousands of Xid events (a storm of 13s or 45s included): ten times
# that still leaves the judge and the store a bounded amount of work for any log.
_MAX_EVENTS_PER_LOG: Final = 20_000
# The start of the message of the event that says a bound was hit (the judge quotes it).
NOT_READ: Final = "not read: "

# Xid 45 (ROBUST_CHANNEL_PREEMPTIVE_REMOVAL) is the only Xid the driver appends " caused by
# previous Xid N" to, and is judged by that root: a 45 whose suffix may be lost is unreadable.
_CAUSE_PRINTED_FOR: Final = 45
# What one changed or lost byte leaves of the suffix: at least one of its words...
_CAUSED_BY_TRACE = re.compile(r"caused|previous|\bXid\b", _A)
# ... or, cut before the end of "caused", the start of that word at the end of the message.
_CAUSED_BY_CUT = re.compile(r"(?:^|\s)(?:c|ca|cau|caus|cause)\Z", _A)


def _wanted(line: str) -> bool:
    """A key after the line's first "NVRM", or "Xid" anywhere (the bytes scan's test)."""
    at = line.find(_NVRM)
    if at >= 0 and any(line.find(k, at) >= 0 for k in _NVRM_KEYS):
        return True
    return _XID in line


def _readable(line: str) -> bool:
    """A kernel-log line: known stamp or tag at the start, then at least one word."""
    if len(line) > _MAX_LOG_LINE:
        return False
    m = _LOG_LINE.match(line)
    return m is not None and _WORD.search(m["message"].replace(_TAG, "")) is not None


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One Xid (or Xid-equivalent) event, as the log printed it.

    `kind`: `xid` (an NVRM Xid line), `fell_off_bus` (the message without a number: `xid` is 79,
    `inferred` True), `unreadable` (an `NVRM: Xid` line that did not parse: `xid` None) or
    `device_plugin` (the k8s device plugin's `XidCriticalError` line).
    """

    xid: int | None
    pci: str | None
    gpu_uuid: str | None
    pid: int | None
    process: str | None
    caused_by: int | None
    timestamp: str | None
    epoch_s: float | None
    uptime_s: float | None
    message: str
    line_no: int
    host: str | None
    kind: str = "xid"
    inferred: bool = False
    gpu_instance: int | None = None
    compute_instance: int | None = None
    recovery_action: str | None = None
    containment: str | None = None
    rst: bool | None = None
    d_rst: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """The CLI contract's fields first, then the additive ones."""
        return {
            "xid": self.xid,
            "pci": self.pci,
            "gpu_uuid": self.gpu_uuid,
            "pid": self.pid,
            "process": self.process,
            "caused_by": self.caused_by,
            "timestamp": self.timestamp,
            "message": self.message,
            "epoch_s": self.epoch_s,
            "uptime_s": self.uptime_s,
            "line_no": self.line_no,
            "host": self.host,
            "kind": self.kind,
            "inferred": self.inferred,
            "gpu_instance": self.gpu_instance,
            "compute_instance": self.compute_instance,
            "recovery_action": self.recovery_action,
            "containment": self.containment,
            "rst": self.rst,
            "d_rst": self.d_rst,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> XidEvent:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs.setdefault("epoch_s", None)
        kwargs.setdefault("uptime_s", None)
        kwargs.setdefault("line_no", 0)
        kwargs.setdefault("host", None)
        return cls(**kwargs)


def xid_log_to_json(events: Iterable[XidEvent]) -> dict[str, Any]:
    """The `fleetval parse xid` document (the CLI contract)."""
    return {"events": [e.to_json() for e in events]}


def normalize_pci(text: str) -> str:
    """`PCI:0000:3B:00`, `0000:3b:00.0` → `0000:3b:00` (the form Xid lines print)."""
    m = _ANY_PCI.search(text)
    if m is None:
        raise ValueError(f"not a PCI address: {text!r}")
    return m.group("pci").lower()


@dataclass(frozen=True, slots=True)
class _Stamp:
    timestamp: str | None = None
    epoch_s: float | None = None
    uptime_s: float | None = None
    host: str | None = None


def _utc(year: int, month: int, day: int, hh: int, mm: int, ss: int) -> float | None:
    try:
        return datetime(year, month, day, hh, mm, ss, tzinfo=UTC).timestamp()
    except (ValueError, OverflowError):  # a date the calendar does not have: no time
        return None


def _iso_epoch(ts: str) -> float | None:
    text = ts.replace(",", ".").replace(" ", "T", 1)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
        return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).timestamp()
    except (ValueError, OverflowError):  # a date the calendar does not have: no time
        return None


# The two commonest prefixes whole (classic syslog with the kernel's uptime, and dmesg), read in
# one match: what `_parse_prefix_any` reads from them, at a fraction of its seven regexes. The host
# holds no ":" "[" "]" and the stamp no fraction, so no other format of that reader can match.
_SYSLOG_PREFIX = re.compile(
    rf"(?P<ts>{_MON} [ \d]\d \d\d:\d\d:\d\d) (?P<host>[^\s:\[\]]+) kernel: "
    r"\[\s*(?P<up>\d{1,12}\.\d{1,9})\]\s*\Z",
    _A,
)
_DMESG_PREFIX = re.compile(r"\[\s*(?P<up>\d{1,12}\.\d{1,9})\]\s*\Z", _A)


def _parse_prefix(prefix: str) -> _Stamp:
    """Timestamp, uptime and host from whatever precedes the message (log format or launcher)."""
    if m := _SYSLOG_PREFIX.match(prefix):
        return _Stamp(m["ts"], None, float(m["up"]), m["host"])
    if m := _DMESG_PREFIX.match(prefix):
        return _Stamp(m["up"], None, float(m["up"]), None)
    return _parse_prefix_any(prefix)


def _parse_prefix_any(prefix: str) -> _Stamp:
    """`_parse_prefix` for every known format."""
    host: str | None = None
    launcher = _LAUNCHER_HOST.match(prefix)
    if launcher and launcher.group("host") != "kernel":
        host = launcher.group("host")
        prefix = prefix[launcher.end() :]

    uptime_s: float | None = None
    uptime_text: str | None = None
    raw = _RAW_KMSG.match(prefix)
    if raw:
        uptime_s = int(raw.group("us")) / 1e6
        uptime_text = raw.group("us")
    elif up := _UPTIME.search(prefix):
        uptime_s = float(up.group("up"))
        uptime_text = up.group("up")

    if ct := _CTIME.search(prefix):
        epoch = _utc(int(ct["Y"]), _MONTHS[ct["mon"]], int(ct["d"]), int(ct["H"]), int(ct["M"]), int(ct["S"]))
        return _Stamp(ct["ts"], epoch, uptime_s, host)
    if iso := _ISO.search(prefix):
        return _Stamp(iso["ts"], _iso_epoch(iso["ts"]), uptime_s, host or iso["host"])
    if go := _GOLOG.search(prefix):
        epoch = _iso_epoch(go["ts"].replace("/", "-"))
        return _Stamp(go["ts"], epoch, uptime_s, host)
    if bsd := _BSD.search(prefix):
        # No year in classic syslog: as printed, no absolute time.
        return _Stamp(bsd["ts"], None, uptime_s, host or bsd["host"])
    if uptime_text is not None:
        return _Stamp(uptime_text, None, uptime_s, host)
    if br := _BRACKET.match(prefix):
        return _Stamp(br["ts"].strip() or None, None, None, host)
    return _Stamp(None, None, None, host)


class _LazyStamp:
    """The stamp of a record, read from its prefix when first asked for. `first`: the line's own
    stamp, for a joined record (its prefix's stamp wins only when it holds a time)."""

    __slots__ = ("_first", "_prefix", "_stamp")

    def __init__(self, prefix: str, first: _LazyStamp | None = None) -> None:
        self._prefix = prefix
        self._first = first
        self._stamp: _Stamp | None = None

    def get(self) -> _Stamp:
        if self._stamp is None:
            stamp = _parse_prefix(self._prefix)
            if self._first is not None:
                first = self._first.get()
                stamp = (
                    dataclasses.replace(stamp, host=stamp.host or first.host)
                    if stamp.timestamp is not None
                    else first
                )
            self._stamp = stamp
        return self._stamp


def _maybe_plugin_trace(text: str) -> bool:
    """Whether `_PLUGIN_TRACE` can match: each of its forms holds one of these literals."""
    return "=" in text or "CriticalError" in text or "XidCritical" in text or "unhealthy." in text


def _maybe_record_trace(text: str) -> bool:
    """Whether `_RECORD_TRACE` can match: each of its forms holds a parenthesis or `pid='`."""
    return "(" in text or ")" in text or "pid='" in text


@dataclass(slots=True)
class _Pending:
    """The first line(s) of a multi-line "The NVIDIA GPU ... has fallen off the bus" message."""

    line_no: int
    last_line_no: int
    pci: str
    stamp: _Stamp
    parts: list[str]


class _LineParser:
    """Stateful: PCI → UUID map per host and the multi-line fell-off-the-bus message.

    `traces` counts the events that came from Xid evidence (everything but the fallback for a
    last line without a line end): with no trace and no readable line the input is no log.
    `full`: `_MAX_EVENTS_PER_LOG` events were handed out and the last one said so; the caller
    stops reading (every later call returns nothing)."""

    def __init__(self) -> None:
        self.uuids: dict[tuple[str | None, str], str] = {}
        self.traces = 0
        self.full = False
        self._handed_out = 0
        self._pending: _Pending | None = None
        # Bodies that yielded nothing and changed nothing (driver chatter): a log repeats them.
        self._inert: set[str] = set()

    def feed(self, line_no: int, line: str, *, cut: bool = False) -> list[XidEvent]:
        """The events of one line. `cut`: the input's last line, with no line end after it."""
        if self.full:
            return []
        events = self._expire_pending(line_no)
        # One more than are read: where the records that are not read begin.
        tags = _tag_positions(line, _MAX_RECORDS_PER_LINE + 1)
        not_read_at = tags.pop() if len(tags) > _MAX_RECORDS_PER_LINE else None
        own: list[XidEvent] = []  # the events of this line's records
        if not tags:
            event = self._untagged(line_no, line)
            own = [event] if event is not None else []
        else:
            # Stamps are read only for records that become events (or name a UUID): most NVRM
            # lines are driver chatter, and the prefix's regexes were their largest cost.
            first = _LazyStamp(line[: tags[0]])
            line_end = len(line) if not_read_at is None else not_read_at
            for k, at in enumerate(tags):
                end = tags[k + 1] if k + 1 < len(tags) else line_end
                body = line[at + len(_TAG) : end].strip()
                if not body:
                    continue
                stamp = first
                if k:  # a joined record: its own stamp ends the previous record's text
                    stamp = _LazyStamp(line[tags[k - 1] + len(_TAG) : at].lstrip(), first)
                last = k + 1 == len(tags) and not_read_at is None
                own += self._body(line_no, body, stamp, line_ends=not (cut and last))
            if not_read_at is not None and line[not_read_at:].replace(_TAG, "").strip():
                # Untimed: a time could make it stale, and what was not read may be recent.
                own.append(
                    self._unreadable(
                        line_no,
                        None,
                        _Stamp(host=first.get().host),
                        f"{NOT_READ}more than {_MAX_RECORDS_PER_LINE} records on one line, "
                        f"its last {len(line) - not_read_at} characters",
                    )
                )
            if not own and (event := self._untagged(line_no, line)) is not None:
                own = [event]  # a record joined to a tagged line, its own tag damaged
        events += own
        self.traces += len(events)
        pending = self._pending
        if cut and not own and line.strip() and (pending is None or pending.last_line_no != line_no):
            # The input stops inside this line: what it held, and what followed, cannot be told.
            events.append(self._unreadable(line_no, None, _Stamp(), f"cut line (no line end): {line[:200]}"))
        return self._bounded(events)

    def finish(self) -> list[XidEvent]:
        """At the end of the input: an unfinished "The NVIDIA GPU" message is unreadable."""
        if self.full:
            return []
        events = self._flush_unfinished()
        self.traces += len(events)
        return self._bounded(events)

    def _bounded(self, events: list[XidEvent]) -> list[XidEvent]:
        """`events` while fewer than `_MAX_EVENTS_PER_LOG` were handed out; then the ones that fit
        and one unreadable event that says the rest of the input was not read."""
        room = _MAX_EVENTS_PER_LOG - self._handed_out
        if len(events) <= room:
            self._handed_out += len(events)
            return events
        self.full = True
        self._handed_out = _MAX_EVENTS_PER_LOG + 1
        first_not_read = events[room]
        note = self._unreadable(
            first_not_read.line_no,
            None,
            _Stamp(host=first_not_read.host),  # untimed, as the per-line note
            f"{NOT_READ}more than {_MAX_EVENTS_PER_LOG} Xid events in one log, "
            f"the rest of it from line {first_not_read.line_no}",
        )
        return [*events[:room], note]

    def _body(self, line_no: int, body: str, lazy: _LazyStamp, *, line_ends: bool) -> list[XidEvent]:
        """The events of one record: the text after an "NVRM:" tag, up to the next one."""
        pending = self._pending
        if pending is None and body in self._inert:
            return []
        if body.startswith(_XID):
            return [*self._flush_unfinished(), self._xid(line_no, body, lazy.get(), line_ends=line_ends)]
        if m := _GPU_AT.match(body):
            self.uuids[(lazy.get().host, m["pci"].lower())] = m["uuid"]
            return []
        if m := _THE_GPU.match(body):
            events = self._flush_unfinished()
            self._pending = _Pending(line_no, line_no, m["pci"].lower(), lazy.get(), [body])
            if _FELL_OFF in body:
                events.append(self._flush_fell_off())
            return events
        if pending is not None:
            pending.parts.append(body)
            pending.last_line_no = line_no
            return [self._flush_fell_off()] if _FELL_OFF in body else []
        if _FELL_OFF in body:
            return [self._fell_off(line_no, _pci_in(body), lazy.get(), body)]
        if (
            any(t in body for t in _FELL_OFF_TRACES)
            or (_maybe_record_trace(body) and _RECORD_TRACE.search(body))
            or ((body.startswith("The ") or "NVIDIA GPU " in body) and _GPU_MESSAGE_TRACE.search(body))
        ):
            return [self._unreadable(line_no, _pci_in(body), lazy.get(), body)]
        if len(self._inert) >= _INERT_BODIES:
            self._inert.clear()  # bounded: a log of ever-new chatter costs no memory
        self._inert.add(body)
        return []

    def stray(self, line_no: int, line: str) -> list[XidEvent]:
        """A line without the scan's markers that still shows what is left of a record whose tag
        and keyword were both damaged: its attribution, a device-plugin shape, a fell-off wording."""
        trace = _RECORD_TRACE.search(line) or _PLUGIN_TRACE.search(line) or _STRAY_FELL_OFF.search(line)
        if trace is None or self.full:
            return []
        self.traces += 1
        stamp = _parse_prefix(line[: trace.start()])
        return self._bounded([self._unreadable(line_no, _pci_in(line), stamp, line.strip())])

    def _untagged(self, line_no: int, line: str) -> XidEvent | None:
        """What the "NVRM:" records of a line did not explain: a device-plugin line, or a record
        whose tag is damaged."""
        if _maybe_plugin_trace(line) and _PLUGIN_TRACE.search(line):
            return self._device_plugin(line_no, line)
        if _maybe_record_trace(line) and (trace := _RECORD_TRACE.search(line)):
            return self._unreadable(
                line_no, _pci_in(line), _parse_prefix(line[: trace.start()]), line.strip()
            )
        return None

    def _expire_pending(self, line_no: int) -> list[XidEvent]:
        pending = self._pending
        if pending is not None and (
            line_no - pending.last_line_no > 1 or line_no - pending.line_no > _MAX_CONTINUATION_LINES
        ):
            return self._flush_unfinished()
        return []

    def _flush_unfinished(self) -> list[XidEvent]:
        pending, self._pending = self._pending, None
        if pending is None:
            return []
        # Not "fallen off the bus": cut, interrupted, or another message about a GPU the driver
        # cannot use ("is not supported by the ... driver"). Either way no evidence of health.
        return [self._unreadable(pending.line_no, pending.pci, pending.stamp, " ".join(pending.parts))]

    def _flush_fell_off(self) -> XidEvent:
        pending = self._pending
        assert pending is not None
        self._pending = None
        return self._fell_off(pending.line_no, pending.pci, pending.stamp, " ".join(pending.parts))

    def _fell_off(self, line_no: int, pci: str | None, stamp: _Stamp, message: str) -> XidEvent:
        return XidEvent(
            xid=79,
            pci=pci,
            gpu_uuid=self.uuids.get((stamp.host, pci)) if pci else None,
            pid=None,
            process=None,
            caused_by=None,
            timestamp=stamp.timestamp,
            epoch_s=stamp.epoch_s,
            uptime_s=stamp.uptime_s,
            message=message,
            line_no=line_no,
            host=stamp.host,
            kind="fell_off_bus",
            inferred=True,
        )

    def _unreadable(self, line_no: int, pci: str | None, stamp: _Stamp, message: str) -> XidEvent:
        return XidEvent(
            xid=None,
            pci=pci,
            gpu_uuid=self.uuids.get((stamp.host, pci)) if pci else None,
            pid=None,
            process=None,
            caused_by=None,
            timestamp=stamp.timestamp,
            epoch_s=stamp.epoch_s,
            uptime_s=stamp.uptime_s,
            message=message,
            line_no=line_no,
            host=stamp.host,
            kind="unreadable",
        )

    def _xid(self, line_no: int, body: str, stamp: _Stamp, *, line_ends: bool) -> XidEvent:
        m = _XID_LINE.match(body)
        if m is None:
            return self._unreadable(line_no, _pci_in(body), stamp, body)
        pci = m["pci"].lower()
        rest = m["rest"]
        pid: int | None = None
        process: str | None = None
        message = rest
        if pn := _PID_NAME.match(rest):
            pid = int(pn["pid"]) if pn["pid"] else None
            name = (pn["name"] or "").strip()
            process = name if name and name != "<unknown>" else None
            message = pn["msg"] or ""
        # Each field's regex runs only where its literal is: most Xid lines hold none of them.
        caused_by: int | None = None
        if "caused by previous Xid" in message and (caused := _CAUSED_BY.search(message)):
            root = _CAUSED_BY_ROOT.match(message, caused.end())
            if root is None or (not root["end"] and not line_ends):
                # The root decides how a 45 is judged: a damaged or possibly cut number is no root.
                return self._unreadable(line_no, pci, stamp, body)
            caused_by = int(root["root"])
        elif int(m["xid"]) == _CAUSE_PRINTED_FOR and _cause_may_be_lost(message, line_ends=line_ends):
            return self._unreadable(line_no, pci, stamp, body)  # judged without its root: no 45
        recovery_action: str | None = None
        if "recovery action changed" in message and (recovery := _RECOVERY.search(message)):
            to = _RECOVERY_TO.match(recovery["tail"])
            # Unparsable (cut, damaged): keep the text as printed, which names no known action.
            recovery_action = to["action"].strip() if to else recovery["tail"].strip()
        containment = _CONTAINMENT.search(message) if "ontained:" in message else None
        has_rst = "RST:" in message
        rst = _RST.search(message) if has_rst else None
        d_rst = _D_RST.search(message) if has_rst else None
        return XidEvent(
            xid=int(m["xid"]),
            pci=pci,
            gpu_uuid=self.uuids.get((stamp.host, pci)),
            pid=pid,
            process=process,
            caused_by=caused_by,
            timestamp=stamp.timestamp,
            epoch_s=stamp.epoch_s,
            uptime_s=stamp.uptime_s,
            message=message.strip(),
            line_no=line_no,
            host=stamp.host,
            gpu_instance=int(m["gi"]) if m["gi"] else None,
            compute_instance=int(m["ci"]) if m["ci"] else None,
            recovery_action=recovery_action,
            containment=containment.group(1).lower() if containment else None,
            rst=(rst.group(1) == "Yes") if rst else None,
            d_rst=(d_rst.group(1) == "Yes") if d_rst else None,
        )

    def _device_plugin(self, line_no: int, line: str) -> XidEvent:
        m = _DEVICE_PLUGIN.search(line)
        if m is None:
            return self._unreadable(line_no, None, _parse_prefix(line), line.strip())
        stamp = _parse_prefix(line[: m.start()])
        return XidEvent(
            xid=int(m["xid"]),
            pci=None,
            gpu_uuid=m["dev"],
            pid=None,
            process=None,
            caused_by=None,
            timestamp=stamp.timestamp,
            epoch_s=stamp.epoch_s,
            uptime_s=stamp.uptime_s,
            message=line[m.start() :].strip(),
            line_no=line_no,
            host=stamp.host,
            kind="device_plugin",
        )


def _tag_positions(line: str, limit: int) -> list[int]:
    """Where the first `limit` "NVRM:" tags of `line` start."""
    out: list[int] = []
    at = line.find(_TAG)
    while at >= 0 and len(out) < limit:
        out.append(at)
        at = line.find(_TAG, at + len(_TAG))
    return out


def _cause_may_be_lost(message: str, *, line_ends: bool) -> bool:
    """Whether an Xid 45 without a readable " caused by previous Xid N" may have had one: its line
    may be cut (no line end, or nothing after the comma: the driver always names the channel), or
    what is left of the suffix shows (a word of it, or its first letters at the end)."""
    text = message.strip()
    return (
        not line_ends
        or not text
        or _CAUSED_BY_TRACE.search(text) is not None
        or _CAUSED_BY_CUT.search(text) is not None
    )


def _pci_in(text: str) -> str | None:
    m = _ANY_PCI.search(text)
    return m["pci"].lower() if m else None


def _no_log(text: str) -> ParseError:
    return ParseError(
        "xid", "no readable kernel-log line and no Xid record: empty, binary or not a log", text
    )


def parse_xid(text: str, *, every_line: bool = True) -> tuple[XidEvent, ...]:
    """Every Xid event in `text` (pure). Lines that are not Xid evidence are ignored; input with no
    readable kernel-log line and no Xid trace raises `ParseError` (it is no evidence of health).

    `every_line=False` reads only the lines `scan_xid_file` reads (its two markers), not what is
    left of a record whose tag and keyword are both damaged."""
    parser = _LineParser()
    lines = _LINE_END.split(text)
    events: list[XidEvent] = []
    readable = False
    for line_no, line in enumerate(lines, 1):
        cut = line_no == len(lines)  # the text after the last line end
        if cut and not line:
            break
        readable = readable or _readable(line)
        if cut or _wanted(line):
            events += parser.feed(line_no, line, cut=cut)
        elif every_line:
            events += parser.stray(line_no, line)
        if parser.full:
            break  # the events' bound: the last event says the rest was not read
    events += parser.finish()
    if not readable and not parser.traces:
        raise _no_log(text)
    # Backfill: a UUID printed after an event (an excerpt cut before the driver's first print).
    return tuple(
        dataclasses.replace(e, gpu_uuid=parser.uuids[(e.host, e.pci)])
        if e.gpu_uuid is None and e.pci is not None and (e.host, e.pci) in parser.uuids
        else e
        for e in events
    )


def _spans(buf: bytes | bytearray, stop: int) -> tuple[list[tuple[int, int, int]], int]:
    """(start, end, line index) of the wanted lines in buf[:stop] (complete lines, "\\n"-ended),
    in file order, and the number of lines there. The line index counts the "\\n" before start.

    One numpy pass finds the anchor bytes of both markers, another the line ends; Python sees
    only lines holding a marker. Line numbers come from counting the line-end mask between
    wanted lines (numpy), not from `bytes.count`, whose one-byte loop was the scan's costliest
    pass where such lines are dense."""
    import numpy as np

    find = buf.find
    arr = np.frombuffer(buf, np.uint8, stop)
    nvrm_at, xid_at = _marker_at(arr)
    newline = arr == 10  # its own array: it does not pin the buffer
    del arr  # the view pins the buffer: release it before the caller moves or grows it
    spans: dict[int, int] = {}  # line start → line end
    line_end = -1
    for at in nvrm_at.tolist():
        if at < line_end:
            continue  # the line was decided at its first "NVRM"
        eol = find(b"\n", at, stop)
        line_end = stop if eol < 0 else eol
        if _B_KEYS.search(buf, at, line_end) is not None:  # a few tests per line holding "NVRM"
            spans[buf.rfind(b"\n", 0, at) + 1] = line_end
    # Rare outside the NVRM lines above: a device-plugin log, a record whose tag is damaged.
    # Each line is looked up once, at its first "Xid": a search back to the line's start from
    # every "Xid" made a line of them quadratic.
    line_end = -1
    for at in xid_at.tolist():
        if at < line_end:
            continue
        eol = find(b"\n", at, stop)
        line_end = stop if eol < 0 else eol
        spans.setdefault(buf.rfind(b"\n", 0, at) + 1, line_end)
    out: list[tuple[int, int, int]] = []
    lines = 0
    pos = 0
    for start, end in sorted(spans.items()):
        lines += int(np.count_nonzero(newline[pos:start]))
        pos = start
        out.append((start, end, lines))
    return out, lines + int(np.count_nonzero(newline[pos:]))


def _marker_at(arr: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Where "NVRM" and "Xid" start in `arr` (a numpy uint8 view), in order. numpy finds each
    marker's anchor, its rarest byte in kernel logs ("V", "X"), then checks its other bytes at
    those positions only. (One pass for both anchors was slower: numpy's nonzero over an OR of
    two masks took several times as long as over each.)"""
    import numpy as np

    n = len(arr)
    v = np.flatnonzero(arr[1 : max(1, n - 2)] == _V)  # v: "N" positions, "V" at v + 1
    v = v[(arr[v] == _N) & (arr[v + 2] == _R) & (arr[v + 3] == _M)]
    x = np.flatnonzero(arr[: max(0, n - 2)] == _X)
    x = x[(arr[x + 1] == _I) & (arr[x + 2] == _D)]
    return v, x


class _Scan:
    """What the streaming scan found besides the lines: whether any line was readable."""

    def __init__(self) -> None:
        self.readable = False

    def look(self, data: bytes | bytearray, start: int, stop: int) -> None:
        """Test lines of data[start:stop] until one is readable (the first, in a real log)."""
        while not self.readable and start < stop:
            eol = data.find(b"\n", start, stop)
            eol = stop if eol < 0 else eol
            self.readable = _readable(data[start:eol].decode("utf-8", errors="replace"))
            start = eol + 1


def _candidate_lines(
    path: str | os.PathLike[str], chunk_size: int, scan: _Scan
) -> Generator[tuple[int, str, bool], None, None]:
    """(line number, line, cut) for the wanted lines, found over big chunks at once; the last
    line comes with cut=True, wanted or not, when the file does not end with a line end.

    Why not a regex per line: Python would touch each of the ~10^7 lines of a GB log. The markers
    and the line ends are found by numpy over the whole chunk, so only lines holding a marker reach
    Python, and only wanted ones are decoded and parsed. A chunk holding "\\r" (CRLF or CR-only
    line ends) is copied with its line ends made "\\n" first, so lines and numbers are those of
    `parse_xid`.
    """
    buf = bytearray(chunk_size)
    view = memoryview(buf)
    filled = 0  # bytes of an incomplete line carried at buf[:filled]
    line_no = 1  # number of the line that starts at buf[0]
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(view[filled:])
            end = filled + n
            # Complete lines end at buf[stop - 1]. Before the end of the file, a "\r" in the last
            # byte read may be the first half of "\r\n": it waits for the next read.
            stop = max(buf.rfind(b"\n", 0, end), buf.rfind(b"\r", 0, end - 1 if n else end)) + 1
            if n and stop == 0:
                if end == len(buf):  # one line longer than the buffer: grow it
                    view.release()
                    buf.extend(bytes(len(buf)))
                    view = memoryview(buf)
                filled = end
                continue
            data: bytes | bytearray = buf
            data_stop = stop
            if buf.find(b"\r", 0, stop) >= 0:  # rare: copy, with every line end made "\n"
                data = bytes(buf[:stop]).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                data_stop = len(data)
            scan.look(data, 0, data_stop)
            spans, lines = _spans(data, data_stop)
            for start, eol, before in spans:
                yield line_no + before, data[start:eol].decode("utf-8", errors="replace"), False
            line_no += lines
            if not n:
                if stop < end:  # the file does not end with a line end: its last line may be cut
                    last = buf[stop:end].decode("utf-8", errors="replace")
                    scan.readable = scan.readable or _readable(last)
                    yield line_no, last, True
                return
            rest = end - stop
            buf[:rest] = buf[stop:end]
            filled = rest


def scan_xid_file(path: str | os.PathLike[str], *, chunk_size: int = 1 << 20) -> Iterator[XidEvent]:
    """Stream the Xid events of a (multi-GB) log file; the same events as
    `parse_xid(text, every_line=False)` on its text, and the same `ParseError` (raised once the
    file is read) when it holds no log."""
    parser = _LineParser()
    scan = _Scan()
    held: list[XidEvent] = []
    with closing(_candidate_lines(path, chunk_size, scan)) as lines:
        for line_no, line, cut in lines:
            events = parser.feed(line_no, line, cut=cut)
            if cut:
                held = events  # the last line: its fallback event waits for the verdict on the file
            else:
                yield from events
            if parser.full:
                break  # the events' bound: the last event says the rest was not read
    held += parser.finish()
    if not scan.readable and not parser.traces:
        with open(path, "rb") as f:
            raise _no_log(f.read(200).decode("utf-8", errors="replace"))
    yield from held
