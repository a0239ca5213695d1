"""`nvidia-smi` (no arguments) as a MIG-partitioned GPU prints it: the GPU table, the `MIG devices:`
table and the `Processes:` table. What D-GPU-MIG-03/04 read in a tenant's container: which MIG
devices it sees, their memory use, and whose processes.

Real outputs this parser reads (fixtures in `tests/fixtures/mig/`, provenance in its SOURCES.md):
driver R525's 79-column layout (Scaleway, a container given one MIG device) and R560's 89-column
layout (Azure H100 NVL, three MIG devices):

    |   0  NVIDIA H100 NVL                On  |   00000001:00:00.0 Off |                   On |
    | N/A   31C    P0             62W /  400W |      64MiB /  95830MiB |     N/A      Default |
    |                                         |                        |              Enabled |
    ...
    | MIG devices:                                                                            |
    |  0    1   0   0  |              38MiB / 47488MiB    | 60      0 |  3   0    3    0    3 |
    |                  |                 0MiB / 65535MiB  |           |                       |
    ...
    | Processes:                                                                              |
    |  No running processes found                                                             |

Tables are read by their cells and tokens, never by column widths, so both layouts (and the
narrower and wider ones between) parse the same. Decisions (no silent pass):
- Input over 4 Mi characters, or a line over 4096, is a ParseError.
- Inside a table every `|` line is a border, a header line, or a row of that table; a row that
  does not read is a ParseError, never skipped. A GPU row must come with its second line, a MIG
  device row with its BAR1 line (a table cut mid-row is a ParseError), and a row is followed by
  its border (Processes: by another row or the closing border). A table ends only after a border:
  any other line inside it is an error, and a line that still holds a frame or cells (`…|`,
  `…-+`, `|…|`) is a table line with bytes before it, never the table's end; blank lines right
  under a row are a text cut there, and nothing may follow them. A table without rows is an error
  (an empty Processes table says "No running processes found"), and so is a row outside any table
  (its title or header damaged): damage never makes a table shorter, nor makes it vanish.
- A process row is GPU, GI, CI, PID, Type, name, memory: GI/CI are numbers or `N/A`, the name
  may hold spaces, memory is `<n>MiB` or `N/A`.
- Text with none of the three tables is a ParseError; text may hold other lines around them
  (shell prompts, section markers of a probe).
Pure: text in, records out; the only exception raised is `ParseError` (tool "nvidia-smi").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.errors import ParseError

TOOL: Final = "nvidia-smi"
MAX_INPUT_CHARS: Final = 4 * 1024 * 1024
MAX_LINE_CHARS: Final = 4096

_A: Final = re.ASCII
_LINE_END: Final = re.compile(r"\r\n|\r|\n")
_BORDER: Final = re.compile(r"^\+[-+]{3,}\+$", _A)
_HEAVY: Final = re.compile(r"^\|[=+|]{3,}\|$", _A)
_DRIVER: Final = re.compile(r"Driver Version:\s+(\d{1,4}(?:\.\d{1,4}){1,3})", _A)
_GPU_HEADER: Final = re.compile(r"^\|\s*GPU\s+Name\s+Persistence-M", _A)
_MIG_TITLE: Final = re.compile(r"^\|\s*MIG devices:\s*\|$", _A)
_PROC_TITLE: Final = re.compile(r"^\|\s*Processes:\s*\|$", _A)
_GPU_ROW: Final = re.compile(r"^\s*(\d{1,3})\s+(\S.{0,99}?)\s+(On|Off)\s*$", _A)
_MEM: Final = re.compile(r"^\s*(\d{1,9})MiB\s*/\s*(\d{1,9})MiB\s*$", _A)
_NA: Final = re.compile(r"^\s*N/A\s*$", _A)
_MIG_IDS: Final = re.compile(r"^\s*(\d{1,3})\s+(\d{1,3})\s+(\d{1,3})\s+(\d{1,3})\s*$", _A)
_MIG_SM: Final = re.compile(r"^\s*(\d{1,4})\s+(\d{1,9}|N/A)\s*$", _A)
_ENGINES: Final = re.compile(r"^\s*(\d{1,3})\s+(\d{1,3})\s+(\d{1,3})\s+(\d{1,3})\s+(\d{1,3})\s*$", _A)
_NO_PROCESSES: Final = re.compile(r"^\|\s*No running processes found\s*\|$", _A)
_ID_OR_NA: Final = re.compile(r"^(\d{1,3}|N/A)$", _A)
_PID: Final = re.compile(r"^\d{1,10}$", _A)
_PROC_MEM: Final = re.compile(r"^(\d{1,9})MiB$|^N/A$", _A)
_PROCESS_START: Final = re.compile(r"^\s*\d{1,3}\s+(?:\d{1,3}|N/A)\s+(?:\d{1,3}|N/A)\s+\d{1,10}\s+[CGM]", _A)
# What is left of a table line with bytes in front of it: its frame at the end, or its cells.
_TABLE_DEBRIS: Final = re.compile(r"(?:\||-\+)$|\|.*\|", _A)


@dataclass(frozen=True, slots=True)
class SmiGpu:
    """A GPU of the GPU table (index as the container numbers it)."""

    index: int
    name: str
    memory_used_mib: int | None  # None: N/A (R525 prints N/A for a MIG-enabled GPU)
    memory_total_mib: int | None
    mig_mode: str  # Enabled, Disabled or N/A

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "memory_used_mib": self.memory_used_mib,
            "memory_total_mib": self.memory_total_mib,
            "mig_mode": self.mig_mode,
        }


@dataclass(frozen=True, slots=True)
class SmiMigDevice:
    """A row of the `MIG devices:` table."""

    gpu: int
    gi: int
    ci: int
    dev: int
    memory_used_mib: int
    memory_total_mib: int
    bar1_used_mib: int | None
    bar1_total_mib: int | None
    sm: int
    engines: tuple[int, int, int, int, int]  # CE, ENC, DEC, OFA, JPG

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "gi": self.gi,
            "ci": self.ci,
            "dev": self.dev,
            "memory_used_mib": self.memory_used_mib,
            "memory_total_mib": self.memory_total_mib,
            "bar1_used_mib": self.bar1_used_mib,
            "bar1_total_mib": self.bar1_total_mib,
            "sm": self.sm,
            "engines": list(self.engines),
        }


@dataclass(frozen=True, slots=True)
class SmiProcess:
    """A row of the `Processes:` table."""

    gpu: int
    gi: int | None
    ci: int | None
    pid: int
    type: str
    name: str
    memory_mib: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "gi": self.gi,
            "ci": self.ci,
            "pid": self.pid,
            "type": self.type,
            "name": self.name,
            "memory_mib": self.memory_mib,
        }


@dataclass(frozen=True, slots=True)
class SmiReport:
    driver_version: str | None
    gpus: tuple[SmiGpu, ...]
    mig_devices: tuple[SmiMigDevice, ...]
    processes: tuple[SmiProcess, ...]
    tables: frozenset[str]  # which of "gpus", "mig", "processes" were there

    def to_json(self) -> dict[str, Any]:
        return {
            "driver_version": self.driver_version,
            "gpus": [g.to_json() for g in self.gpus],
            "mig_devices": [d.to_json() for d in self.mig_devices],
            "processes": [p.to_json() for p in self.processes],
            "tables": sorted(self.tables),
        }


def _error(reason: str, excerpt: str = "") -> ParseError:
    return ParseError(TOOL, reason, excerpt)


def _cells(line: str) -> list[str]:
    """The cells between the `|` of a table line (the outer bars dropped)."""
    return line[1:-1].split("|")


def _memory(cell: str, line: str) -> tuple[int, int] | None:
    if _NA.match(cell):
        return None
    m = _MEM.match(cell)
    if m is None:
        raise _error("unreadable memory usage", line)
    used, total = int(m[1]), int(m[2])
    if used > total:
        raise _error("memory used above its total", line)
    return used, total


@dataclass(slots=True)
class _State:
    gpus: list[SmiGpu] = field(default_factory=list)
    devices: list[SmiMigDevice] = field(default_factory=list)
    processes: list[SmiProcess] = field(default_factory=list)
    tables: set[str] = field(default_factory=set)
    driver: str | None = None


class _Table:
    """One table, fed line by line from its first line on (after a border, a non-table line ends it)."""

    def __init__(self, kind: str, state: _State) -> None:
        self.kind = kind
        self.state = state
        self.in_rows = False
        self.rows = 0  # row lines read ("No running processes found" is one)
        self.pending: list[str] = []  # the first line(s) of a GPU or MIG device row
        self.at_border = False  # the last line was the header's `===` line or a border
        self.cut = False  # a blank line right under a row: the text ends there, or it is damaged
        self.done = False  # the Processes table ends at its closing border
        state.tables.add(kind)

    def feed(self, line: str) -> bool:
        if self.done:
            return False
        if self.cut:
            if line:
                raise _error(f"{self.kind} table cut after a row, yet the text goes on", line)
            return True
        if not line.startswith("|") and not line.startswith("+"):
            if self.in_rows and _TABLE_DEBRIS.search(line):
                raise _error(f"a damaged {self.kind} table line (bytes before it)", line)
            if self.in_rows and not self.at_border and not self.pending:
                # Under a row comes its border or (Processes) another row; a blank line is a cut.
                if line:
                    raise _error(f"a line inside the {self.kind} table that is no row nor border", line)
                self.cut = True
                return True
            self.end(line)
            return False
        if not self.in_rows:
            if _HEAVY.match(line):
                self.in_rows = True
                self.at_border = True
            return True  # header lines, the title's borders
        self.at_border = _BORDER.match(line) is not None
        if self.at_border:
            if self.kind == "processes":
                self.end(line)
                self.done = True
                return True
            self._row_done(line)
            return True
        if not line.endswith("|"):
            raise _error(f"a {self.kind} table line without its closing bar", line)
        self.rows += 1
        if self.kind == "processes":
            self._process(line)
        elif self.kind == "gpus":
            self._gpu_line(line)
        else:
            self._mig_line(line)
        return True

    def end(self, line: str = "") -> None:
        if not self.in_rows or self.rows == 0:
            raise _error(f"{self.kind} table cut before its rows", line)
        self._row_done(line)
        self.in_rows = False

    def _row_done(self, line: str) -> None:
        if self.pending:
            raise _error(f"{self.kind} row cut before its last line", " / ".join(self.pending))

    def _gpu_line(self, line: str) -> None:
        self.pending.append(line)
        if len(self.pending) < 3:
            return
        first, second, third = (_cells(x) for x in self.pending)
        rows = self.pending
        self.pending = []
        if min(len(first), len(second), len(third)) < 3:
            raise _error("GPU row without its three cells", " / ".join(rows))
        m = _GPU_ROW.match(first[0])
        if m is None:
            raise _error("unreadable GPU row", rows[0])
        memory = _memory(second[1], rows[1])
        mode = third[2].strip()
        if mode not in ("Enabled", "Disabled", "N/A"):
            raise _error("unreadable MIG mode", rows[2])
        self.state.gpus.append(
            SmiGpu(int(m[1]), m[2], memory[0] if memory else None, memory[1] if memory else None, mode)
        )

    def _mig_line(self, line: str) -> None:
        self.pending.append(line)
        if len(self.pending) < 2:
            return
        rows = self.pending
        self.pending = []
        first, second = _cells(rows[0]), _cells(rows[1])
        if len(first) < 4 or len(second) < 2:
            raise _error("MIG device row without its four cells", " / ".join(rows))
        ids = _MIG_IDS.match(first[0])
        sm = _MIG_SM.match(first[2])
        engines = _ENGINES.match(first[3])
        memory = _memory(first[1], rows[0])
        if ids is None or sm is None or engines is None or memory is None:
            raise _error("unreadable MIG device row", rows[0])
        bar1 = _memory(second[1], rows[1])
        self.state.devices.append(
            SmiMigDevice(
                gpu=int(ids[1]),
                gi=int(ids[2]),
                ci=int(ids[3]),
                dev=int(ids[4]),
                memory_used_mib=memory[0],
                memory_total_mib=memory[1],
                bar1_used_mib=bar1[0] if bar1 else None,
                bar1_total_mib=bar1[1] if bar1 else None,
                sm=int(sm[1]),
                engines=(int(engines[1]), int(engines[2]), int(engines[3]), int(engines[4]), int(engines[5])),
            )
        )

    def _process(self, line: str) -> None:
        if _NO_PROCESSES.match(line):
            return
        words = line[1:-1].split()
        if len(words) < 7:
            raise _error("unreadable process row", line)
        gpu, gi, ci, pid, kind = words[:5]
        memory = words[-1]
        if not (
            gpu.isascii()
            and gpu.isdigit()
            and _ID_OR_NA.match(gi)
            and _ID_OR_NA.match(ci)
            and _PID.match(pid)
            and re.fullmatch(r"[CGM](\+[CGM])?", kind, _A)
            and _PROC_MEM.match(memory)
            and len(gpu) <= 3
        ):
            raise _error("unreadable process row", line)
        self.state.processes.append(
            SmiProcess(
                gpu=int(gpu),
                gi=None if gi == "N/A" else int(gi),
                ci=None if ci == "N/A" else int(ci),
                pid=int(pid),
                type=kind,
                name=" ".join(words[5:-1]),
                memory_mib=None if memory == "N/A" else int(memory.removesuffix("MiB")),
            )
        )


def _is_row(line: str) -> bool:
    """A row of the GPU, MIG devices or Processes table (outside them: its title or header lost)."""
    if not (line.startswith("|") and line.endswith("|")):
        return False
    cells = _cells(line)
    return bool(
        (len(cells) >= 3 and _GPU_ROW.match(cells[0]))
        or (len(cells) >= 4 and _MIG_IDS.match(cells[0]))
        or (len(cells) == 1 and (_PROCESS_START.match(cells[0]) or _NO_PROCESSES.match(line)))
    )


def parse_smi(text: str) -> SmiReport:
    """The GPUs, MIG devices and processes `nvidia-smi` printed (see the module doc)."""
    if not isinstance(text, str):
        raise _error("input is not text")
    if len(text) > MAX_INPUT_CHARS:
        raise _error(f"input over {MAX_INPUT_CHARS} characters", text[:200])
    state = _State()
    table: _Table | None = None
    previous = ""
    for raw in _LINE_END.split(text):
        if len(raw) > MAX_LINE_CHARS:
            raise _error(f"line over {MAX_LINE_CHARS} characters: not nvidia-smi output", raw[:200])
        line = raw.strip()
        if table is not None:
            if table.feed(line):
                previous = line
                continue
            table = None
        if (m := _DRIVER.search(line)) is not None and line.startswith("|"):
            state.driver = m[1]
        elif _GPU_HEADER.match(line):
            table = _Table("gpus", state)
        elif _MIG_TITLE.match(line):
            table = _Table("mig", state)
        elif _PROC_TITLE.match(line):
            table = _Table("processes", state)
        elif line.startswith("|") and _BORDER.match(previous) and "MIG devices" in line:
            raise _error("unreadable MIG devices title", line)
        elif _is_row(line):
            raise _error("a GPU, MIG device or process row outside its table (its title damaged)", line)
        previous = line
    if table is not None and not table.done:
        table.end()
    if not state.tables:
        raise _error("no nvidia-smi GPU, MIG devices or Processes table in the input", text[:200])
    return SmiReport(
        driver_version=state.driver,
        gpus=tuple(state.gpus),
        mig_devices=tuple(state.devices),
        processes=tuple(state.processes),
        tables=frozenset(state.tables),
    )
