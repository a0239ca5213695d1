"""Reading a drill's raw evidence: a training run's stdout and a checkpoint directory's listing.

Pure. A run's log is read line by line: lines that are not JSON objects are the job's own chatter
and are counted, not fatal; a step line whose fields have the wrong types is counted as bad (and a
run with bad step lines cannot pass the loss criterion). A listing that is not the inspect tool's
JSON is a ParseError.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetval.ckpt.contract import LISTING_FORMAT, MANIFEST_FORMAT, checkpoint_step
from fleetval.errors import ParseError

MAX_LINE = 1 << 16  # a step line is a few hundred bytes; anything longer is not one


@dataclass(frozen=True, slots=True)
class StepRecord:
    step: int
    loss: float
    seconds: float | None
    state: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class RunLog:
    steps: tuple[StepRecord, ...] = ()
    events: tuple[Mapping[str, Any], ...] = ()
    other_lines: int = 0
    bad_lines: int = 0

    def of(self, event: str) -> list[Mapping[str, Any]]:
        return [e for e in self.events if e.get("event") == event]

    @property
    def start(self) -> Mapping[str, Any] | None:
        starts = self.of("start")
        return starts[0] if starts else None

    @property
    def from_step(self) -> int | None:
        start = self.start
        value = start.get("from_step") if start else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def last_event(self) -> Mapping[str, Any] | None:
        return self.events[-1] if self.events else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def parse_run_log(text: str) -> RunLog:
    steps: list[StepRecord] = []
    events: list[Mapping[str, Any]] = []
    other = bad = 0
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{") or len(line) > MAX_LINE:
            other += bool(line)
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            other += 1
            continue
        if not isinstance(record, dict):
            other += 1
            continue
        if "event" in record:
            if isinstance(record["event"], str):
                events.append(record)
            else:
                bad += 1
            continue
        if "step" not in record:
            other += 1
            continue
        step, loss = record.get("step"), _number(record.get("loss"))
        state = record.get("state") or {}
        if (
            not isinstance(step, int)
            or isinstance(step, bool)
            or step < 1
            or loss is None
            or not isinstance(state, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in state.items())
        ):
            bad += 1
            continue
        seconds = _number(record.get("seconds"))
        steps.append(
            StepRecord(step, loss, seconds if seconds is not None and math.isfinite(seconds) else None, state)
        )
    return RunLog(tuple(steps), tuple(events), other, bad)


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    name: str
    step: int
    files: Mapping[str, tuple[int, str]]  # name -> (bytes, sha256) as found on the storage
    manifest: Mapping[str, Any] | None
    manifest_error: str | None

    def integrity_problems(self) -> list[str]:
        """Why this checkpoint is not complete and intact: its manifest, and every file against it."""
        if self.manifest is None:
            return [self.manifest_error or "no manifest.json"]
        problems = []
        if self.manifest.get("format") != MANIFEST_FORMAT:
            problems.append(f"manifest format {self.manifest.get('format')!r} is not {MANIFEST_FORMAT}")
        if self.manifest.get("step") != self.step:
            problems.append(f"manifest step {self.manifest.get('step')!r} does not match {self.name}")
        listed = self.manifest.get("files")
        if not isinstance(listed, dict) or not listed:
            return [*problems, "the manifest lists no files"]
        for filename, expected in sorted(listed.items()):
            found = self.files.get(filename)
            expected = expected if isinstance(expected, dict) else {}
            if found is None:
                problems.append(f"{filename} is missing")
            elif found[0] != expected.get("bytes"):
                problems.append(f"{filename} has {found[0]} bytes, the manifest says {expected.get('bytes')}")
            elif found[1] != expected.get("sha256"):
                problems.append(f"{filename} does not match its sha256 in the manifest")
        return problems

    def components(self) -> list[str]:
        listed = (self.manifest or {}).get("components")
        return [str(c) for c in listed] if isinstance(listed, list) else []


@dataclass(frozen=True, slots=True)
class Listing:
    latest: str | None
    latest_present: bool
    checkpoints: Mapping[str, StoredCheckpoint] = field(default_factory=dict)
    temporary: tuple[str, ...] = ()

    def intact_steps(self) -> list[int]:
        return sorted(c.step for c in self.checkpoints.values() if not c.integrity_problems())

    def last_complete(self) -> int:
        """The newest intact checkpoint's step, 0 when there is none (a resume starts fresh)."""
        intact = self.intact_steps()
        return intact[-1] if intact else 0


def parse_listing(text: str) -> Listing:
    try:
        data = json.loads(text.strip().splitlines()[-1] if text.strip() else "")
    except (ValueError, RecursionError) as exc:
        raise ParseError("ckpt-listing", f"not JSON: {exc}", text) from None
    if not isinstance(data, dict) or data.get("format") != LISTING_FORMAT:
        raise ParseError("ckpt-listing", f"not a {LISTING_FORMAT} listing", text)
    entries = data.get("checkpoints")
    if not isinstance(entries, list):
        raise ParseError("ckpt-listing", "checkpoints is not a list", text)
    checkpoints: dict[str, StoredCheckpoint] = {}
    for entry in entries:
        name = entry.get("name") if isinstance(entry, dict) else None
        step = checkpoint_step(name) if isinstance(name, str) else None
        files = entry.get("files") if isinstance(entry, dict) else None
        if step is None or not isinstance(files, dict):
            raise ParseError("ckpt-listing", f"a checkpoint entry is malformed: {str(entry)[:80]}", text)
        found: dict[str, tuple[int, str]] = {}
        for filename, info in files.items():
            if (
                not isinstance(info, dict)
                or not isinstance(info.get("bytes"), int)
                or not isinstance(info.get("sha256"), str)
            ):
                raise ParseError("ckpt-listing", f"{name}/{filename}: bytes and sha256 expected", text)
            found[str(filename)] = (int(info["bytes"]), str(info["sha256"]))
        manifest = entry.get("manifest")
        error = entry.get("manifest_error")
        checkpoints[str(name)] = StoredCheckpoint(
            name=str(name),
            step=step,
            files=found,
            manifest=manifest if isinstance(manifest, dict) else None,
            manifest_error=str(error)
            if error
            else (None if isinstance(manifest, dict) else "manifest is not an object"),
        )
    latest = data.get("latest")
    temporary = data.get("temporary") or []
    return Listing(
        latest=str(latest) if isinstance(latest, str) and latest else None,
        latest_present=bool(data.get("latest_present")),
        checkpoints=checkpoints,
        temporary=tuple(str(t) for t in temporary) if isinstance(temporary, list) else (),
    )
