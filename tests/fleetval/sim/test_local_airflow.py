"""A local Airflow (fleetval.sim.airflow_run): its process group does not outlive a CLI killed with
SIGKILL (the reaper), and a long wait for a run reports its progress."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetval.sim import reaper

# A stand-in for `fleetval sim run`: starts a process group (Airflow's place) and its reaper,
# says who they are, and waits to be killed.
PARENT = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, time
    from pathlib import Path
    from fleetval.sim import reaper
    group = subprocess.Popen(["sleep", "300"], start_new_session=True)
    guard = reaper.spawn(group.pid, Path(sys.argv[1]))
    print(json.dumps({"group": group.pid, "reaper": guard.pid}), flush=True)
    if sys.argv[2] == "stop":  # what LocalAirflow.stop does, but leaving the reaper to notice
        time.sleep(1.0)
        os.killpg(group.pid, signal.SIGTERM)
        group.wait()
    time.sleep(300)
    """
)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie (its parent, the killed stand-in, not reaped yet by init) counts as gone.
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split(") ", 1)[1].startswith("Z")


def _until(predicate: Callable[[], bool], timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _start_parent(home: Path, mode: str) -> tuple[subprocess.Popen[str], dict[str, int]]:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(home), mode],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert parent.stdout is not None
    return parent, json.loads(parent.stdout.readline())


def test_a_parent_killed_with_sigkill_takes_its_group_and_home_with_it(tmp_path: Path) -> None:
    home = tmp_path / "airflow-home"
    home.mkdir()
    (home / "airflow.log").write_text("still writing")
    parent, pids = _start_parent(home, "wait")
    time.sleep(1.0)  # the reaper is watching
    assert not _gone(pids["group"])
    parent.kill()
    parent.wait()
    assert _until(lambda: _gone(pids["group"])), "the group outlived its parent"
    assert _until(lambda: not home.exists()), "the home was left behind"
    assert _until(lambda: _gone(pids["reaper"]))


def test_a_group_stopped_normally_leaves_the_home_to_its_owner(tmp_path: Path) -> None:
    home = tmp_path / "airflow-home"
    home.mkdir()
    parent, pids = _start_parent(home, "stop")
    assert _until(lambda: _gone(pids["reaper"])), "the reaper lingers after a normal stop"
    assert home.exists()
    parent.kill()
    parent.wait()


def test_what_ignores_sigterm_gets_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)",
        ],
        start_new_session=True,
    )
    time.sleep(0.5)  # its handler is installed
    reaper.reap(stubborn.pid, tmp_path, grace_s=1.0)
    assert stubborn.wait(timeout=10) == -signal.SIGKILL
    assert not tmp_path.exists()


def test_waiting_for_a_run_reports_progress_until_it_ends(tmp_path: Path, monkeypatch: Any) -> None:
    """`make demo` waits minutes for the weekly sweep: it is told how the wait goes, then the state."""
    from fleetval.sim.airflow_run import LocalAirflow

    airflow = LocalAirflow(tmp_path, "sqlite://", tmp_path / "kubeconfig")
    answers = iter(["queued", "running", "running", "success"])
    monkeypatch.setattr(airflow, "call", lambda _method, _path: {"state": next(answers)})
    reported: list[float] = []
    state = airflow.wait_run("d", "r", report=reported.append, report_every_s=0.0)
    assert state == "success" and len(reported) == 3 and reported == sorted(reported)
