"""How the control plane's launcher tells a running component from one that has gone."""

from __future__ import annotations

import subprocess
import sys
import time

from fleetval.sim.controlplane.launcher import _alive, _proc_state

# A parent that never reaps its child: the child stays a zombie that is not ours to reap, as an
# orphaned component killed in a container whose init never reaps.
NEGLECTFUL_PARENT = """
import os, sys, time
pid = os.fork()
if pid == 0:
    os._exit(0)
print(pid, flush=True)
time.sleep(30)
"""


def test_a_zombie_that_is_not_ours_is_not_alive() -> None:
    parent = subprocess.Popen([sys.executable, "-c", NEGLECTFUL_PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while _proc_state(child) != "Z" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _proc_state(child) == "Z"
        assert not _alive(child)
        assert _alive(parent.pid)
    finally:
        parent.kill()
        parent.wait()


def test_a_reaped_process_is_not_alive() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not _alive(proc.pid)
    assert _proc_state(proc.pid) is None
