"""NVIDIA MIG outputs: GPU instance profiles, placements, GPU instances, MIG devices and node labels.

Real outputs this parser reads (fixtures in `tests/fixtures/mig/`, provenance in its SOURCES.md):

    nvidia-smi mig -lgip     a table, two lines a profile; 77 columns, or 81 on Blackwell (wider Name)
    |   0  MIG 1g.10gb       19     7/7        9.62       No     14     1     0   |
    |                                                             1     1     0   |
    nvidia-smi mig -lgipp    GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
                             GPU  0 Profile ID  0 Placement : {0}:8
    nvidia-smi mig -lgi      |   0  MIG 1g.10gb         19        7          0:1     |
    nvidia-smi -L            GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-b4895dbf-...)
                               MIG 1g.10gb     Device  0: (UUID: MIG-3f6f389f-...)
    GFD / MIG manager labels {"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.10gb.count": "2", ...}

Saved outputs join several commands, with shell prompts, `-cgi` success lines and markdown between
them, so text is read line by line and every part found is kept; lines that belong to none of the
parts are skipped. Decisions (no silent pass: a damaged part is an error, never fewer rows):
- Input over 4 Mi characters is a ParseError; so is a text line over 4096 characters (no nvidia-smi
  line is a tenth of that). JSON labels are exempt from the line limit (`jq -c` prints one line).
- Tables are read by their columns' order, not their widths, after checking the header names the
  columns this parser expects (another layout is a ParseError, not a misread). Inside a table every
  line is a border, a row or the profile's second line, and every row has one border under it;
  anything else there is a damaged table (blank lines right under a row are a text cut there, and
  nothing may follow them). A table ends only after a border, at a line that is no table line: one
  that ends in a frame (`|`, `-+`) or holds a row (`| 0  MIG 1g…`) is a table line with bytes
  before it, and an error. An `-lgip`/`-lgi` row outside any table (its title or a line above it
  damaged) is an error too: damage never makes a table shorter. A header without rows, a profile
  without its second line (a table cut mid-row) and `Free` above `Total` are ParseErrors; a partial
  table cut after a complete row yields the rows it holds.
- A line that starts like a part's line (`GPU <n>:`, `(UUID:`, `MIG <p> Device`) must parse as one;
  so must a line with any of an `-lgipp` line's marks (`GPU … Profile`, `Profile ID`, `Placements:`,
  or ending in a `{…}:<n>` set), so a line that lost its GPU index or had its words reordered is an
  error, not a placement list one profile short. A MIG device line must follow its GPU line (another
  line between is a break), and no GPU lists a MIG device index or UUID twice.
- UUIDs are hex in the 8-4-4-4-12 form: `GPU-<uuid>`, and `MIG-<uuid>` (every fixture) or older
  drivers' `MIG-GPU-<gpu uuid>/<gi>/<ci>`; anything else in `(UUID: …)` is a ParseError.
- Numbers are ASCII digits of bounded length (`re.ASCII`; an Arabic-Indic "19" is no profile ID and
  `int()` never sees 5,000 digits).
- Label values the records read must be what GFD writes: counts are ASCII digits, `capable` is
  `true`/`false`; anything else is a ParseError quoting the label. MIG profile names in label keys
  are kept as the labels spell them (the device plugin writes `1g.10gb+me` as `1g.10gb.me`).
- `parse_mig` reads JSON when the text starts with `{` (a label object or a Node object), else the
  text outputs; it returns only the parts found, and text with none is a ParseError.
Pure functions: text in, records out; the only exception raised is `ParseError` (tool "mig").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.errors import ParseError

TOOL: Final = "mig"
MAX_INPUT_CHARS: Final = 4 * 1024 * 1024
MAX_LINE_CHARS: Final = 4096

_A: Final = re.ASCII
_LINE_END: Final = re.compile(r"\r\n|\r|\n")
_NAME: Final = r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,39}"  # 1g.10gb, 1g.24gb+me.all, 1g.24gb-me, 1c.3g.20gb
_N: Final = r"\d{1,4}"

_BORDER: Final = re.compile(r"^\+-{3,}\+$", _A)
_RULE: Final = re.compile(r"^\|={3,}\|$", _A)
_LGIP_TITLE: Final = re.compile(r"^\|\s*GPU instance profiles:\s*\|?$", _A)
_LGI_TITLE: Final = re.compile(r"^\|\s*GPU instances:\s*\|?$", _A)
_LGIP_HEADER: Final = ("GPU Name ID Instances Memory P2P SM DEC ENC", "Free/Total GiB CE JPEG OFA")
_LGI_HEADER: Final = ("GPU Name Profile Instance Placement", "ID ID Start:Size")
_LGIP_ROW: Final = re.compile(
    rf"^\|\s+(?P<gpu>\d{{1,3}})\s+MIG\s+(?P<name>{_NAME})\s+(?P<id>{_N})\s+(?P<free>{_N})/(?P<total>{_N})"
    rf"\s+(?P<mem>\d{{1,6}}(?:\.\d{{1,3}})?)\s+(?P<p2p>Yes|No|N/A)\s+(?P<sm>{_N})\s+(?P<dec>{_N})"
    rf"\s+(?P<enc>{_N})\s+\|$",
    _A,
)
_LGIP_ROW2: Final = re.compile(rf"^\|\s+(?P<ce>{_N})\s+(?P<jpeg>{_N})\s+(?P<ofa>{_N})\s+\|$", _A)
# What is left of a table line with bytes in front of it (or behind it): a frame at its end, or
# the start of a `-lgip`/`-lgi` row (`|   0  MIG 1g.10gb`) anywhere in it.
_TABLE_DEBRIS: Final = re.compile(r"(?:\||-\+)$|\|\s*\d{1,3}\s+MIG\s", _A)
_LGI_ROW: Final = re.compile(
    rf"^\|\s+(?P<gpu>\d{{1,3}})\s+MIG\s+(?P<name>{_NAME})\s+(?P<id>{_N})\s+(?P<gi>{_N})"
    rf"\s+(?P<start>{_N}):(?P<size>{_N})\s+\|$",
    _A,
)
_LGIPP: Final = re.compile(
    rf"^GPU\s+(?P<gpu>\d{{1,3}})\s+Profile\s+ID\s+(?P<id>{_N})\s+Placements?\s*:\s*"
    rf"\{{(?P<starts>[0-9,]{{0,512}})\}}:(?P<size>{_N})$",
    _A,
)
# Any mark of an -lgipp line (its GPU and Profile words, `Profile ID`, `Placements:`, the placement
# set that ends it): a line that lost or reordered words is still recognised, and refused.
_LGIPP_LIKE: Final = re.compile(
    r"^GPU.{0,64}\bProfile\b|\bProfile\s+ID\b|\bPlacements?\s*:|\{[0-9,\s]{0,512}\}\s*:\s*\d{1,9}$", _A
)
_HEX_UUID: Final = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
# The name ends at the first " (UUID: " (a lazy bounded name, then a literal: linear).
_GPU_LINE: Final = re.compile(
    rf"^GPU\s+(?P<index>\d{{1,3}}):\s+(?P<name>\S.{{0,199}}?) \(UUID: ?(?P<uuid>GPU-{_HEX_UUID})\)$", _A
)
_GPU_LINE_START: Final = re.compile(r"^GPU\s+[^\s:]{1,16}:", _A)
# Newer drivers print MIG-<uuid>, R450 printed MIG-GPU-<gpu uuid>/<gi>/<ci>.
_MIG_UUID: Final = rf"MIG-(?:{_HEX_UUID}|GPU-{_HEX_UUID}/\d{{1,3}}/\d{{1,3}})"
_MIG_LINE: Final = re.compile(
    rf"^MIG\s+(?P<profile>{_NAME})\s+Device\s+(?P<index>\d{{1,3}}):\s+\(UUID:\s*(?P<uuid>{_MIG_UUID})\)$",
    _A,
)
_MIG_LINE_START: Final = re.compile(r"^MIG\s+\S{1,64}\s+Device\b", _A)

# GPU Feature Discovery / GPU Operator labels.
_NV: Final = "nvidia.com/"
_MIG_PREFIX: Final = "nvidia.com/mig-"
_PROFILE: Final = re.compile(rf"^{_NAME}$", _A)
_SINGLE_PRODUCT: Final = re.compile(rf"^.{{1,200}}-MIG-(?P<profile>{_NAME})$", _A)
_COUNT: Final = re.compile(r"^\d{1,9}$", _A)
# Per-profile attribute (label key suffix) → MigResource field; `int` fields are counts.
_RESOURCE_ATTRS: Final = {
    "count": "count",
    "memory": "memory_mib",
    "multiprocessors": "multiprocessors",
    "slices.gi": "slices_gi",
    "slices.ci": "slices_ci",
    "engines.copy": "engines_copy",
    "engines.decoder": "engines_decoder",
    "engines.encoder": "engines_encoder",
    "engines.jpeg": "engines_jpeg",
    "engines.ofa": "engines_ofa",
    "replicas": "replicas",
    "product": "product",
    "sharing-strategy": "sharing_strategy",
}
_TEXT_ATTRS: Final = frozenset({"product", "sharing_strategy"})
# Labels that make a label set MIG/GFD evidence (besides any nvidia.com/mig* label).
_GPU_KEYS: Final = frozenset(
    f"{_NV}gpu.{k}" for k in ("product", "count", "replicas", "sharing-strategy", "memory")
)


@dataclass(frozen=True, slots=True)
class GiProfile:
    """One GPU instance profile of `nvidia-smi mig -lgip` (both of its table lines)."""

    gpu: int
    name: str
    profile_id: int
    instances_free: int
    instances_total: int
    memory_gib: float
    p2p: bool | None
    sm: int
    dec: int
    enc: int
    ce: int
    jpeg: int
    ofa: int

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "name": self.name,
            "profile_id": self.profile_id,
            "instances_free": self.instances_free,
            "instances_total": self.instances_total,
            "memory_gib": self.memory_gib,
            "p2p": self.p2p,
            "sm": self.sm,
            "dec": self.dec,
            "enc": self.enc,
            "ce": self.ce,
            "jpeg": self.jpeg,
            "ofa": self.ofa,
        }


@dataclass(frozen=True, slots=True)
class Placements:
    """Where a profile may start (`nvidia-smi mig -lgipp`): slice indexes, and the slices it takes."""

    gpu: int
    profile_id: int
    starts: tuple[int, ...]
    size: int

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "profile_id": self.profile_id,
            "starts": list(self.starts),
            "size": self.size,
        }


@dataclass(frozen=True, slots=True)
class GpuInstance:
    """One GPU instance of `nvidia-smi mig -lgi`."""

    gpu: int
    name: str
    profile_id: int
    instance_id: int
    placement_start: int
    placement_size: int

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "name": self.name,
            "profile_id": self.profile_id,
            "instance_id": self.instance_id,
            "placement_start": self.placement_start,
            "placement_size": self.placement_size,
        }


@dataclass(frozen=True, slots=True)
class MigDevice:
    """A MIG device line of `nvidia-smi -L`."""

    profile: str
    index: int
    uuid: str

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "index": self.index, "uuid": self.uuid}


@dataclass(frozen=True, slots=True)
class MigGpu:
    """A GPU line of `nvidia-smi -L` with the MIG devices listed under it (none: MIG not in use)."""

    index: int
    name: str
    uuid: str
    devices: tuple[MigDevice, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "devices": [d.to_json() for d in self.devices],
        }


@dataclass(frozen=True, slots=True)
class MigResource:
    """One MIG profile as GFD labels it: `nvidia.com/mig-<profile>.*` (mixed strategy), or the
    `nvidia.com/gpu.*` labels of a single-strategy node whose product ends in `-MIG-<profile>`."""

    profile: str
    count: int | None = None
    memory_mib: int | None = None
    multiprocessors: int | None = None
    slices_gi: int | None = None
    slices_ci: int | None = None
    engines_copy: int | None = None
    engines_decoder: int | None = None
    engines_encoder: int | None = None
    engines_jpeg: int | None = None
    engines_ofa: int | None = None
    replicas: int | None = None
    product: str | None = None
    sharing_strategy: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "count": self.count,
            "memory_mib": self.memory_mib,
            "multiprocessors": self.multiprocessors,
            "slices_gi": self.slices_gi,
            "slices_ci": self.slices_ci,
            "engines_copy": self.engines_copy,
            "engines_decoder": self.engines_decoder,
            "engines_encoder": self.engines_encoder,
            "engines_jpeg": self.engines_jpeg,
            "engines_ofa": self.engines_ofa,
            "replicas": self.replicas,
            "product": self.product,
            "sharing_strategy": self.sharing_strategy,
        }


@dataclass(frozen=True, slots=True)
class MigLabels:
    """What a node's GFD and MIG manager labels say about MIG (None: the label is absent)."""

    strategy: str | None
    config: str | None
    config_state: str | None
    capable: bool | None
    product: str | None
    gpu_count: int | None
    replicas: int | None
    sharing_strategy: str | None
    resources: tuple[MigResource, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "config": self.config,
            "config_state": self.config_state,
            "capable": self.capable,
            "product": self.product,
            "gpu_count": self.gpu_count,
            "replicas": self.replicas,
            "sharing_strategy": self.sharing_strategy,
            "resources": [r.to_json() for r in self.resources],
        }


@dataclass(slots=True)
class _Found:
    """The parts one pass over the text found (`seen`: a part's table or line was there)."""

    lgip: list[GiProfile] = field(default_factory=list)
    lgipp: list[Placements] = field(default_factory=list)
    lgi: list[GpuInstance] = field(default_factory=list)
    devices: list[tuple[MigGpu, list[MigDevice]]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)


def _error(reason: str, excerpt: str = "") -> ParseError:
    return ParseError(TOOL, reason, excerpt)


def _bounded(text: str) -> None:
    if not isinstance(text, str):
        raise _error("input is not text")
    if len(text) > MAX_INPUT_CHARS:
        raise _error(f"input over {MAX_INPUT_CHARS} characters", text[:200])


def _lines(text: str) -> Iterator[str]:
    """The text's lines, stripped (markdown indentation, trailing blanks of a copy)."""
    for line in _LINE_END.split(text):
        if len(line) > MAX_LINE_CHARS:
            raise _error(f"line over {MAX_LINE_CHARS} characters: not nvidia-smi output", line[:200])
        yield line.strip()


def _header_words(line: str) -> str:
    return " ".join(line.strip("|").split())


class _Table:
    """One `-lgip` or `-lgi` table, fed line by line from its title on."""

    def __init__(self, kind: str, found: _Found) -> None:
        self.kind = kind
        self.found = found
        self.header: list[str] = []
        self.in_rows = False
        self.rows = 0
        self.pending: re.Match[str] | None = None  # an -lgip profile's first line
        self.at_border = False  # the last line was the header's rule or a border: the table may end
        self.cut = False  # a blank line right under a row: the text ends there, or it is damaged

    def feed(self, line: str) -> bool:
        """Take one line; False when the line is past the table (the caller reads it)."""
        if not self.in_rows:
            if _RULE.match(line):
                expected = _LGIP_HEADER if self.kind == "lgip" else _LGI_HEADER
                if tuple(self.header) != expected:
                    raise _error(f"unknown -{self.kind} column layout", " / ".join(self.header))
                self.in_rows = True
                self.at_border = True
            elif line.startswith("|") and not _BORDER.match(line):
                if words := _header_words(line):
                    self.header.append(words)
            else:
                raise _error(f"-{self.kind} table header cut before its rows", line)
            return True
        if self.cut:
            if line:
                raise _error(f"-{self.kind} table cut after a row, yet the text goes on", line)
            return True
        if _BORDER.match(line):
            self._no_pending(line)
            if self.at_border:  # every row has one border under it: a line between them was lost
                raise _error(f"-{self.kind} table lost a row (a border right under another)", line)
            self.at_border = True
            return True
        if line.startswith("|"):
            if self.kind == "lgi":
                self._lgi_row(line)
            else:
                self._lgip_row(line)
            self.at_border = False
            return True
        if _TABLE_DEBRIS.search(line):
            raise _error(f"damaged -{self.kind} table line (bytes before or after it)", line)
        if not self.at_border and self.pending is None:
            # Under a complete row comes its border; a blank line there is where a cut text ends.
            if line:
                raise _error(f"-{self.kind} row not followed by its border", line)
            self.cut = True
            return True
        self.end(line)
        return False

    def _no_pending(self, line: str) -> None:
        if self.pending is not None:
            raise _error("-lgip profile without its second line (table cut mid-row)", self.pending.string)

    def _lgi_row(self, line: str) -> None:
        m = _LGI_ROW.match(line)
        if m is None:
            raise _error("unreadable -lgi row", line)
        if int(m["size"]) < 1:
            raise _error("-lgi placement of size 0", line)
        self.found.lgi.append(
            GpuInstance(
                gpu=int(m["gpu"]),
                name=m["name"],
                profile_id=int(m["id"]),
                instance_id=int(m["gi"]),
                placement_start=int(m["start"]),
                placement_size=int(m["size"]),
            )
        )
        self.rows += 1

    def _lgip_row(self, line: str) -> None:
        if (first := _LGIP_ROW.match(line)) is not None:
            self._no_pending(line)
            if int(first["free"]) > int(first["total"]):
                raise _error("-lgip Free above Total", line)
            self.pending = first
            return
        second = _LGIP_ROW2.match(line)
        if second is None:
            raise _error("unreadable -lgip row", line)
        m = self.pending
        if m is None:
            raise _error("-lgip second line without its profile line", line)
        self.pending = None
        self.found.lgip.append(
            GiProfile(
                gpu=int(m["gpu"]),
                name=m["name"],
                profile_id=int(m["id"]),
                instances_free=int(m["free"]),
                instances_total=int(m["total"]),
                memory_gib=float(m["mem"]),
                p2p={"Yes": True, "No": False}.get(m["p2p"]),
                sm=int(m["sm"]),
                dec=int(m["dec"]),
                enc=int(m["enc"]),
                ce=int(second["ce"]),
                jpeg=int(second["jpeg"]),
                ofa=int(second["ofa"]),
            )
        )
        self.rows += 1

    def end(self, line: str = "") -> None:
        """The table is over (a line outside it, or the end of the text)."""
        if not self.in_rows:
            raise _error(f"-{self.kind} table header cut before its rows", " / ".join(self.header) or line)
        self._no_pending(line)
        if self.rows == 0:
            raise _error(f"-{self.kind} table without rows", line)


def _placements(line: str) -> Placements:
    m = _LGIPP.match(line)
    if m is None:
        raise _error("unreadable -lgipp line", line)
    parts = m["starts"].split(",") if m["starts"] else []
    if any(not 1 <= len(p) <= 4 for p in parts):
        raise _error("unreadable -lgipp placement set", line)
    if int(m["size"]) < 1:
        raise _error("-lgipp placement of size 0", line)
    return Placements(int(m["gpu"]), int(m["id"]), tuple(int(p) for p in parts), int(m["size"]))


def _scan(text: str) -> _Found:
    """One pass over the text: every part's records, and which parts were there."""
    _bounded(text)
    found = _Found()
    table: _Table | None = None
    devices: list[MigDevice] | None = None  # the `-L` GPU's devices, while its MIG lines may follow
    for line in _lines(text):
        if table is not None:
            if table.feed(line):
                continue
            table = None
        if _LGIP_TITLE.match(line) or _LGI_TITLE.match(line):
            kind = "lgip" if _LGIP_TITLE.match(line) else "lgi"
            table = _Table(kind, found)
            found.seen.add(kind)
            devices = None
        elif _LGIP_ROW.match(line) or _LGI_ROW.match(line):
            # Its table ended early or lost its title: reading on would return fewer rows.
            raise _error("-lgip/-lgi row outside its table (a line above it is damaged)", line)
        elif _LGIPP_LIKE.search(line):
            found.lgipp.append(_placements(line))
            found.seen.add("lgipp")
            devices = None
        elif _MIG_LINE_START.match(line):
            m = _MIG_LINE.match(line)
            if m is None:
                raise _error("unreadable nvidia-smi -L MIG device line", line)
            if devices is None:
                raise _error("nvidia-smi -L MIG device line without its GPU line above it", line)
            if any(d.index == int(m["index"]) or d.uuid == m["uuid"] for d in devices):
                raise _error("nvidia-smi -L lists a MIG device twice", line)
            devices.append(MigDevice(m["profile"], int(m["index"]), m["uuid"]))
        elif _GPU_LINE_START.match(line) or "(UUID:" in line:
            m = _GPU_LINE.match(line)
            if m is None:
                raise _error("unreadable nvidia-smi -L line", line)
            devices = []
            found.devices.append((MigGpu(int(m["index"]), m["name"].rstrip(), m["uuid"]), devices))
            found.seen.add("devices")
        else:
            devices = None
    if table is not None:
        table.end()
    return found


def _part(text: str, part: str, what: str) -> _Found:
    found = _scan(text)
    if part not in found.seen:
        raise _error(f"no {what} in the input", text[:200])
    return found


def parse_lgip(text: str) -> list[GiProfile]:
    """The GPU instance profiles of `nvidia-smi mig -lgip` (both table widths), in table order."""
    return _part(text, "lgip", "`nvidia-smi mig -lgip` table").lgip


def parse_lgipp(text: str) -> list[Placements]:
    """The possible placements of each profile (`nvidia-smi mig -lgipp`), in output order."""
    return _part(text, "lgipp", "`nvidia-smi mig -lgipp` line").lgipp


def parse_lgi(text: str) -> list[GpuInstance]:
    """The GPU instances of `nvidia-smi mig -lgi`, in table order."""
    return _part(text, "lgi", "`nvidia-smi mig -lgi` table").lgi


def parse_mig_list(text: str) -> list[MigGpu]:
    """Each GPU of `nvidia-smi -L` with its MIG devices (profile, device index, UUID)."""
    return _gpus(_part(text, "devices", "`nvidia-smi -L` listing"))


def _gpus(found: _Found) -> list[MigGpu]:
    return [MigGpu(gpu.index, gpu.name, gpu.uuid, tuple(devices)) for gpu, devices in found.devices]


def _count(labels: Mapping[str, str], key: str) -> int | None:
    if key not in labels:
        return None
    value = labels[key]
    if not isinstance(value, str) or not _COUNT.match(value):
        raise _error(f"label {key} is not a count", f"{key}={value!r}")
    return int(value)


def _text(labels: Mapping[str, str], key: str) -> str | None:
    if key not in labels:
        return None
    value = labels[key]
    if not isinstance(value, str):
        raise _error(f"label {key} is not a string", f"{key}={value!r}")
    return value


def _resource(labels: Mapping[str, str], profile: str, prefix: str) -> MigResource:
    """A profile's labels under `prefix` (`nvidia.com/mig-<profile>.` or `nvidia.com/gpu.`)."""
    values: dict[str, Any] = {}
    for attr, name in _RESOURCE_ATTRS.items():
        key = prefix + attr
        values[name] = _text(labels, key) if name in _TEXT_ATTRS else _count(labels, key)
    return MigResource(profile, **values)


def _mixed_profiles(labels: Mapping[str, str]) -> set[str]:
    """Profiles named by `nvidia.com/mig-<profile>.<attr>` keys (longest known attribute first)."""
    attrs = sorted(_RESOURCE_ATTRS, key=len, reverse=True)
    profiles = set()
    for key in labels:
        if not isinstance(key, str) or not key.startswith(_MIG_PREFIX):
            continue
        rest = key[len(_MIG_PREFIX) :]
        for attr in attrs:
            profile = rest.removesuffix("." + attr)
            if profile != rest and _PROFILE.match(profile):
                profiles.add(profile)
                break
    return profiles


def parse_mig_labels(labels: Mapping[str, str]) -> MigLabels:
    """What GFD and the MIG manager say in a node's labels; labels without any MIG or GPU label of
    theirs are a ParseError (no evidence), a label whose value GFD could not have written too."""
    if not isinstance(labels, Mapping):
        raise _error("labels are not a mapping")
    if not any(isinstance(k, str) and (k.startswith(f"{_NV}mig") or k in _GPU_KEYS) for k in labels):
        raise _error("no nvidia.com/mig* or nvidia.com/gpu.* label: not GFD or MIG manager labels")
    capable = _text(labels, f"{_NV}mig.capable")
    if capable not in (None, "true", "false"):
        raise _error("label nvidia.com/mig.capable is not true or false", f"{capable!r}")
    strategy = _text(labels, f"{_NV}mig.strategy")
    product = _text(labels, f"{_NV}gpu.product")
    resources = [_resource(labels, p, f"{_MIG_PREFIX}{p}.") for p in sorted(_mixed_profiles(labels))]
    single = _SINGLE_PRODUCT.match(product.removesuffix("-SHARED")) if product is not None else None
    if strategy == "single" and single is not None:
        resources.append(_resource(labels, single["profile"], f"{_NV}gpu."))
    return MigLabels(
        strategy=strategy,
        config=_text(labels, f"{_NV}mig.config"),
        config_state=_text(labels, f"{_NV}mig.config.state"),
        capable=None if capable is None else capable == "true",
        product=product,
        gpu_count=_count(labels, f"{_NV}gpu.count"),
        replicas=_count(labels, f"{_NV}gpu.replicas"),
        sharing_strategy=_text(labels, f"{_NV}gpu.sharing-strategy"),
        resources=tuple(resources),
    )


def parse_mig_labels_json(text: str) -> MigLabels:
    """`parse_mig_labels` on a JSON file: a bare object of labels, or a Node object (metadata.labels)."""
    _bounded(text)
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON, or an int over 4,300 digits
        raise _error(f"not JSON: {str(exc)[:120]}", text[:200]) from None
    if not isinstance(obj, dict):
        raise _error("JSON is not an object of labels nor a Node object", text[:200])
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        obj = meta.get("labels")
        if not isinstance(obj, dict):
            raise _error("Node object without metadata.labels", text[:200])
    if not all(isinstance(v, str) for v in obj.values()):
        raise _error("not a label object: a value is not a string", text[:200])
    return parse_mig_labels(obj)


def parse_mig(text: str) -> dict[str, Any]:
    """Every MIG part the text holds (the `fleetval parse mig` document): `lgip`, `lgipp`, `lgi`,
    `devices` (`nvidia-smi -L`), or `labels` for JSON; only the parts found, and at least one."""
    _bounded(text)
    if text.lstrip().startswith("{"):
        return {"labels": parse_mig_labels_json(text).to_json()}
    found = _scan(text)
    if not found.seen:
        raise _error("no MIG output (-lgip, -lgipp, -lgi, nvidia-smi -L) nor labels in the input", text[:200])
    parts: dict[str, list[Any]] = {
        "lgip": found.lgip,
        "lgipp": found.lgipp,
        "lgi": found.lgi,
        "devices": _gpus(found),
    }
    return {name: [r.to_json() for r in records] for name, records in parts.items() if name in found.seen}
