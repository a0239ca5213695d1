"""A process group that dies with the process that started it.

`fleetval sim run` and the demo start Airflow in a session of its own (so a Ctrl-C in the terminal
reaches the CLI, which stops Airflow in order). A CLI killed with SIGKILL cannot stop anything, and
its Airflow (16 processes) would go on writing to the store, its temporary home left behind. The
reaper is a small process beside that group: once the process that started it is gone, it sends
the group SIGTERM, then SIGKILL after a grace period, and removes the folder it was given.

    python -m fleetval.sim.reaper --parent PID --group PGID [--remove DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

POLL_S: Final = 0.5
GRACE_S: Final = 20.0  # Airflow's components stop in a few seconds on SIGTERM


def spawn(group: int, remove: Path | None = None) -> subprocess.Popen[bytes]:
    """A reaper for `group` that acts once this process is gone; terminate it on a normal stop."""
    argv = [sys.executable, "-m", "fleetval.sim.reaper", "--parent", str(os.getpid()), "--group", str(group)]
    if remove is not None:
        argv += ["--remove", str(remove)]
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not in the terminal's group: a Ctrl-C is the CLI's to handle
    )


def _exists(pid: int, *, group: bool = False) -> bool:
    """Whether the process (or the process group) `pid` is still there: signal 0 checks only."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(group: int, remove: Path | None, grace_s: float = GRACE_S) -> None:
    """SIGTERM the group, SIGKILL what is left after `grace_s`, then remove the folder."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _exists(group, group=True) and time.monotonic() < deadline:
        time.sleep(POLL_S / 5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    if remove is not None:
        shutil.rmtree(remove, ignore_errors=True)


def watch(parent: int, group: int, remove: Path | None) -> None:
    """Wait for `parent` to go (a reaper reparented away from it: the parent died), then reap."""
    while os.getppid() == parent and _exists(parent):
        if not _exists(group, group=True):
            return  # stopped normally, and nothing told us yet
        time.sleep(POLL_S)
    if _exists(group, group=True):
        reap(group, remove)
    elif remove is not None:
        shutil.rmtree(remove, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetval.sim.reaper")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--group", type=int, required=True)
    parser.add_argument("--remove", type=Path)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the parent's to handle
    watch(args.parent, args.group, args.remove)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
