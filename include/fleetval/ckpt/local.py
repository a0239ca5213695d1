"""Running the drill on this machine: the reference job (or a command that follows the drill
contract) as real processes, real signals, a real directory.

The reference job imports PyTorch, which takes seconds; a drill starts seven runs. Runs of the
reference job therefore fork from a zygote process that imported the job once
(`fleetval.ckpt.zygote`): each run is a fresh process with its own pid, session, environment,
stdout and signal handlers, started in milliseconds. A `--command` run is a plain subprocess. The
simulated cluster's kubelet starts the drill image's containers through the same `start_entry`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fleetval.ckpt import contract
from fleetval.ckpt.drill import REFERENCE, RESUME_SUFFIX, DrillPlan
from fleetval.ckpt.judge import (
    CORRUPT,
    KILL,
    SIGTERM,
    DrillEvidence,
    Interruption,
    RunRecord,
    ScenarioEvidence,
)
from fleetval.ckpt.parse import parse_listing, parse_run_log
from fleetval.errors import FleetvalError, ParseError

POLL_S = 0.02
_server_lock = threading.Lock()


class LaunchError(FleetvalError):
    pass


class Process(Protocol):
    def exit_code(self) -> int | None: ...
    def send(self, signum: int) -> None: ...
    def output(self) -> str: ...


def _signal_exit(code: int | None) -> int | None:
    """A process killed by signal N exits 128+N, as a container runtime reports it."""
    return None if code is None else (128 - code if code < 0 else code)


class _Zygote:
    """The `fleetval.ckpt.zygote` process of this process: started on first use, one at a time."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    def spawn(self, request: dict[str, Any]) -> int:
        with _server_lock:
            if self._process is None or self._process.poll() is not None:
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "fleetval.ckpt.zygote"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    start_new_session=True,
                )
                assert self._process.stdout is not None
                if self._process.stdout.readline().strip() != b"ready":
                    raise LaunchError(
                        "the reference job could not be loaded (fleetval.ckpt.zygote did not start)"
                    )
            assert self._process.stdin is not None and self._process.stdout is not None
            self._process.stdin.write(json.dumps(request).encode() + b"\n")
            self._process.stdin.flush()
            reply = self._process.stdout.readline().strip()
            if not reply.isdigit():
                raise LaunchError("fleetval.ckpt.zygote stopped while starting a run")
            return int(reply)


_zygote = _Zygote()


class _Output:
    def __init__(self, path: Path) -> None:
        self.path = path

    def output(self) -> str:
        try:
            return self.path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class ForkedProcess(_Output):
    def __init__(
        self, entry: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path
    ) -> None:
        super().__init__(log_path)
        log_path.write_text("")
        self._exit_path = Path(str(log_path) + ".exit")
        self._exit_path.unlink(missing_ok=True)
        self.pid = _zygote.spawn(
            {"entry": entry, "argv": list(argv), "env": dict(env), "log": str(log_path), "cwd": str(cwd)}
        )
        self._code: int | None = None

    def exit_code(self) -> int | None:
        if self._code is None and self._exit_path.exists():
            self._code = int(self._exit_path.read_text())
        return self._code

    def send(self, signum: int) -> None:
        if self.exit_code() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)


class CommandProcess(_Output):
    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path) -> None:
        super().__init__(log_path)
        with log_path.open("wb") as log:
            try:
                self._popen = subprocess.Popen(
                    list(argv),
                    env=dict(env),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                raise LaunchError(f"cannot run {argv[0]!r}: {exc}") from None
        self.pid = self._popen.pid

    def exit_code(self) -> int | None:
        return _signal_exit(self._popen.poll())

    def send(self, signum: int) -> None:
        """SIGTERM goes to the process, as a runtime sends it to PID 1; SIGKILL ends its whole
        session, as a container's end kills every process in it."""
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                (os.killpg if signum == signal.SIGKILL else os.kill)(self.pid, signum)


def job_available() -> str | None:
    """Why the reference job cannot run here, or None."""
    missing = [m for m in ("torch", "fleetval_ckpt_job") if importlib.util.find_spec(m) is None]
    if missing:
        return (
            f"the reference job cannot run here ({', '.join(missing)} not installed): "
            "pip install torch==2.13.0 && pip install --no-deps -e jobs/ckpt-reference"
        )
    return None


def start_entry(
    entry: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path
) -> ForkedProcess:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return ForkedProcess(entry, argv, {**base, **env}, log_path, cwd)


def wait(process: Process, timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while (code := process.exit_code()) is None and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return code


def wait_for_event(process: Process, event: str, timeout_s: float) -> tuple[int | None, bool]:
    """Wait until the run logs `event`: the step it names, and whether the run was still running.
    Only new output is read on each poll, and only lines that mention the event are decoded."""
    deadline, seen, needle = time.monotonic() + timeout_s, 0, f'"{event}"'
    while time.monotonic() < deadline:
        running = process.exit_code() is None
        text = process.output()
        end = text.rfind("\n") + 1  # complete lines only; a partial one is read next time
        for line in text[seen:end].splitlines():
            if needle in line:
                found = parse_run_log(line).of(event)
                if found and isinstance(found[0].get("step"), int):
                    return int(found[0]["step"]), running
        seen = max(seen, end)
        if not running:
            return None, False
        time.sleep(POLL_S)
    return None, process.exit_code() is None


@dataclass
class LocalDrill:
    """Carries out a DrillPlan here. `command` runs a contract-following job instead of the
    reference job; the inspect and corrupt tools always come from the reference job's package."""

    plan: DrillPlan
    root: Path
    faults: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    subject: str = "reference-job@local"

    def _start(self, run: str, directory: Path) -> Process:
        env = self.plan.env(run, str(directory), self.faults)
        log_path = self.root / f"{run}.log"
        if self.command:
            return CommandProcess(self.command, {**os.environ, **env}, log_path, self.root)
        return start_entry(contract.TRAIN_ENTRY, [], env, log_path, self.root)

    def _tool(self, entry: str, directory: Path, name: str) -> str:
        process = start_entry(entry, [str(directory)], {}, self.root / f"{name}.out", self.root)
        code = wait(process, 60)
        if code != 0:
            raise LaunchError(f"{entry} exited {code}: {process.output()[-300:]}")
        return process.output()

    def _finish(self, process: Process) -> RunRecord:
        code = wait(process, self.plan.run_timeout_s)
        if code is None:
            process.send(signal.SIGKILL)
            wait(process, 10)
            return RunRecord(parse_run_log(process.output()), None, f"ran past {self.plan.run_timeout_s:g} s")
        return RunRecord(parse_run_log(process.output()), code)

    def _scenario(self, name: str) -> ScenarioEvidence:
        directory = self.root / name
        process = self._start(name, directory)
        plan = self.plan
        if name == KILL:
            step, alive = wait_for_event(process, "save_paused", plan.run_timeout_s)
            process.send(signal.SIGKILL)
            interrupted = self._finish(process)
            interruption = Interruption(landed=step is not None and alive, at_step=step)
        elif name == SIGTERM:
            step, alive = wait_for_event(process, "holding", plan.run_timeout_s)
            sent = time.monotonic()
            process.send(signal.SIGTERM)
            code = wait(process, plan.grace_s)
            killed = code is None
            if killed:  # what the kubelet does when the grace period ends
                process.send(signal.SIGKILL)
            interrupted = self._finish(process)
            interruption = Interruption(
                landed=step is not None and alive,
                at_step=step,
                grace_s=plan.grace_s,
                seconds_to_exit=None if killed else round(time.monotonic() - sent, 3),
                killed_after_grace=killed,
            )
        else:
            interrupted = self._finish(process)
            corrupted: dict[str, Any] = {}
            error = None
            try:
                corrupted = json.loads(
                    self._tool(contract.CORRUPT_ENTRY, directory, f"{name}.corrupt").splitlines()[-1]
                )
            except (LaunchError, ValueError, IndexError) as exc:
                error = str(exc)
            interruption = Interruption(landed=bool(corrupted) and error is None, corrupted=corrupted)
        listing, listing_error = None, None
        try:
            listing = parse_listing(self._tool(contract.INSPECT_ENTRY, directory, f"{name}.listing"))
        except (LaunchError, ParseError) as exc:
            listing_error = str(exc)
        resumed = self._finish(self._start(name + RESUME_SUFFIX, directory))
        return ScenarioEvidence(interrupted, interruption, listing, resumed, listing_error)

    def run(self) -> DrillEvidence:
        self.root.mkdir(parents=True, exist_ok=True)
        reference = self._finish(self._start(REFERENCE, self.root / REFERENCE))
        # The reference runs alone (its save times are evidence); the interrupted scenarios are
        # independent directories and run side by side.
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            futures = {name: pool.submit(self._scenario, name) for name in (KILL, SIGTERM, CORRUPT)}
            scenarios = {name: future.result() for name, future in futures.items()}
        return DrillEvidence(self.subject, self.plan.steps, reference, scenarios)
