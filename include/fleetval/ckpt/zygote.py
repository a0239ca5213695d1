"""A process that imports the reference job (and PyTorch) once and forks a fresh child per run.

Started as `python -m fleetval.ckpt.zygote` by `fleetval.ckpt.local`. Requests arrive one JSON
line each on stdin (`entry`, `argv`, `env`, `log`, `cwd`); the reply is the child's pid on
stdout. Each child gets its own session, environment, working directory and stdout/stderr (the
log file), and runs `entry` ("module:function"). When a child ends, its status goes to
`<log>.exit` as a container runtime reports it (128+N for a signal). Single-threaded: requests and
reaping share one loop, so a fork never happens beside another thread.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
from typing import Any

PRELOAD = ("fleetval_ckpt_job.train", "fleetval_ckpt_job.storage")


def _run_child(request: dict[str, Any]) -> None:
    os.setsid()
    fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the child's own stdin, closed at exit
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    module, _, function = request["entry"].partition(":")
    sys.argv = [module, *request["argv"]]
    code = 1
    try:
        result = getattr(importlib.import_module(module), function)()
        code = result if isinstance(result, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # the job's crash is its exit status, as in any process
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _status(raw: int) -> int:
    return 128 + os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def main() -> None:
    for name in PRELOAD:
        warm = getattr(importlib.import_module(name), "warm", None)
        if warm is not None:
            warm()
    logs: dict[int, str] = {}
    stdin = sys.stdin.buffer
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([stdin], [], [], 0.02)
        if readable:
            line = stdin.readline()
            if not line:
                return
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _run_child(request)
            logs[pid] = request["log"]
            print(pid, flush=True)
        while logs:
            try:
                pid, raw = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            path = logs.pop(pid, None)
            if path is not None:
                with open(path + ".exit.tmp", "w") as f:
                    f.write(str(_status(raw)))
                os.replace(path + ".exit.tmp", path + ".exit")


if __name__ == "__main__":
    main()
