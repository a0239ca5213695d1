"""Run fleetval's DAGs on a local Airflow 3 against a cluster: what `fleetval sim run`, the demo,
the end-to-end tests and the benchmarks use, so all of them run the DAGs production runs.

`LocalAirflow` starts the Airflow components (`airflow standalone`: api-server, scheduler with
the LocalExecutor, dag-processor, triggerer) in a home of its own, with the repository's DAGs and
plugins (the fleet-health page), the `fleetval_db` and `kubernetes_default` connections pointing
at the given store and kubeconfig, and an admin and a read-only `viewer` user (simple auth
manager), and drives it through the REST API (trigger, unpause, wait). Airflow is a separate process
started from `PATH` (the venv's `airflow`); this module does not import it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.errors import FleetvalError
from fleetval.sim import reaper

ADMIN: Final = "admin"
VIEWER: Final = "viewer"
FINISHED: Final = frozenset({"success", "failed"})


class AirflowRunError(FleetvalError):
    """The local Airflow did not start, or a run did not finish in time."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def airflow_bin_dir() -> pathlib.Path:
    """Where `airflow` is: next to this interpreter (the project's venv), else on PATH. Standalone
    starts its components by name, so this folder goes first on their PATH."""
    beside = pathlib.Path(sys.executable).parent
    if (beside / "airflow").exists():
        return beside
    found = shutil.which("airflow")
    if found is None:
        raise AirflowRunError("`airflow` is not installed here (run from the project's venv: make venv)")
    return pathlib.Path(found).parent


def default_dags_folder() -> pathlib.Path:
    """The repository's `dags/` (the package is installed from the repository, editable)."""
    here = pathlib.Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "dags").is_dir() and (parent / "pools.json").is_file():
            return parent / "dags"
    raise AirflowRunError("cannot find the dags folder next to the fleetval package; pass it explicitly")


def default_local_settings() -> pathlib.Path | None:
    """The repository's `deploy/airflow_local_settings.py` (what the image installs), if there is one."""
    try:
        path = default_dags_folder().parent / "deploy" / "airflow_local_settings.py"
    except AirflowRunError:
        return None
    return path if path.is_file() else None


def default_plugins_folder() -> pathlib.Path | None:
    """The repository's `plugins/` (beside `dags/`), if there is one."""
    try:
        folder = default_dags_folder().parent / "plugins"
    except AirflowRunError:
        return None
    return folder if folder.is_dir() else None


@dataclass
class LocalAirflow:
    home: pathlib.Path
    db_url: str
    kubeconfig: pathlib.Path
    dags_folder: pathlib.Path = field(default_factory=default_dags_folder)
    plugins_folder: pathlib.Path | None = field(default_factory=default_plugins_folder)
    # Installed as $AIRFLOW_HOME/config/airflow_local_settings.py, as the image installs it.
    local_settings: pathlib.Path | None = field(default_factory=default_local_settings)
    port: int = 0
    parallelism: int = 4
    # Off: only the runs this harness triggers happen (unpausing a scheduled DAG would also start
    # its latest slot, a second sweep of the same cluster).
    use_schedules: bool = False
    # Probe tasks defer while their pod runs (production's default). Off for instant simulated
    # probes: a trigger that fires within seconds of the deferral races the executor's report of
    # the deferral in Airflow 3.3, and the task is failed and retried.
    deferrable_probes: bool = True
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    # More users of the simple auth manager: name → (role, password). Roles: viewer, user, op, admin.
    users: dict[str, tuple[str, str]] = field(
        default_factory=lambda: {VIEWER: ("viewer", secrets.token_urlsafe(12))}
    )
    extra_env: dict[str, str] = field(default_factory=dict)
    _env: dict[str, str] = field(default_factory=dict)
    # The caller's temporary home: removed by the reaper too if the caller is killed (SIGKILL).
    remove_home_if_orphaned: bool = False
    _proc: subprocess.Popen[bytes] | None = None
    _reaper: subprocess.Popen[bytes] | None = None
    _tokens: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://localhost:{self.port}"

    @property
    def log_path(self) -> pathlib.Path:
        return self.home / "airflow.log"

    def env(self) -> dict[str, str]:
        airflow_home = self.home / "airflow"
        # Nothing of the caller's Airflow configuration leaks in: this Airflow is self-contained.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        return {
            **inherited,
            "PATH": f"{airflow_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            **({"AIRFLOW__CORE__PLUGINS_FOLDER": str(self.plugins_folder)} if self.plugins_folder else {}),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            # A task's start-up parse of a file that imports the KubernetesPodOperator took over the
            # default 30 s on a loaded 2-core machine (~10 s of CPU), and the task was rescheduled.
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "15",
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": str(self.use_schedules),
            "FLEETVAL_PROBE_DEFERRABLE": "true" if self.deferrable_probes else "false",
            # Without schedules no event-triggered run is created, so the Xid watcher must not
            # reserve lines for one: runs are triggered by hand and claim every pending line.
            "FLEETVAL_XID_SOURCE": "inbox" if self.use_schedules else "manual",
            "AIRFLOW__API__PORT": str(self.port),
            # Its own log-server ports: two local Airflows (a test and a demo) may run at once.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__API__BASE_URL": self.base,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
                [f"{ADMIN}:admin", *(f"{name}:{role}" for name, (role, _) in self.users.items())]
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW_CONN_FLEETVAL_DB": json.dumps({"conn_type": "generic", "extra": {"url": self.db_url}}),
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
                {
                    "conn_type": "kubernetes",
                    "extra": {"kube_config_path": str(self.kubeconfig), "namespace": "fleetval"},
                }
            ),
            **self.extra_env,
        }

    def _airflow(self, *args: str) -> None:
        with self.log_path.open("ab") as log:
            result = subprocess.run(
                [str(airflow_bin_dir() / "airflow"), *args],
                env=self._env,
                stdout=log,
                stderr=log,
                check=False,
            )
        if result.returncode != 0:
            raise AirflowRunError(f"`airflow {' '.join(args)}` failed; see {self.log_path}")

    def start(self, *, timeout_s: float = 240) -> LocalAirflow:
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        (self.home / "passwords.json").write_text(json.dumps(self.passwords()))
        self._env = self.env()
        if self.local_settings is not None:
            config_dir = pathlib.Path(self._env["AIRFLOW_HOME"]) / "config"
            config_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.local_settings, config_dir / "airflow_local_settings.py")
        self._airflow("db", "migrate")
        pools = self.dags_folder.parent / "pools.json"
        if pools.is_file():
            self._airflow("pools", "import", str(pools))
        self._airflow("dags", "reserialize")
        log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [str(airflow_bin_dir() / "airflow"), "standalone"],
            env=self._env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        # Its own session keeps a terminal's Ctrl-C for us to handle; the reaper ends it if we die.
        self._reaper = reaper.spawn(self._proc.pid, self.home if self.remove_home_if_orphaned else None)
        self.wait_for("the Airflow api-server and scheduler", self._healthy, timeout_s)
        return self

    def stop(self) -> None:
        if self._proc is None:
            return
        group = self._proc.pid
        try:
            os.killpg(group, signal.SIGTERM)
            self._proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        # standalone can exit before its children (an api_server outlived a bench run): wait for
        # the whole group, then kill what is left.
        deadline = time.monotonic() + 15
        while _group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        self._proc = None
        if self._reaper is not None:
            self._reaper.terminate()
            self._reaper.wait()
            self._reaper = None

    def __enter__(self) -> LocalAirflow:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- REST ---------------------------------------------------------------------------------
    def call(self, method: str, path: str, body: Any = None, *, auth: bool = True) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if auth:
            request.add_header("Authorization", f"Bearer {self.token()}")
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return json.loads(raw) if raw else None

    def passwords(self) -> dict[str, str]:
        return {ADMIN: self.password, **{name: password for name, (_, password) in self.users.items()}}

    def token(self, user: str = ADMIN) -> str:
        """A JWT for `user` (POST /auth/token), kept for later calls."""
        if user not in self._tokens:
            login = {"username": user, "password": self.passwords()[user]}
            self._tokens[user] = str(self.call("POST", "/auth/token", login, auth=False)["access_token"])
        return self._tokens[user]

    def _healthy(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise AirflowRunError(f"Airflow exited with {self._proc.returncode}; see {self.log_path}")
        health = self.call("GET", "/api/v2/monitor/health", auth=False)
        return all(
            health.get(c, {}).get("status") == "healthy" for c in ("metadatabase", "scheduler", "triggerer")
        )

    def wait_for(self, what: str, check: Any, timeout_s: float, interval_s: float = 1.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                value = check()
                if value:
                    return value
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
            time.sleep(interval_s)
        raise AirflowRunError(f"timed out after {timeout_s:.0f}s waiting for {what}; see {self.log_path}")

    def unpause(self, dag_id: str, *, timeout_s: float = 120) -> None:
        self.wait_for(
            f"DAG {dag_id} to be parsed", lambda: self.call("GET", f"/api/v2/dags/{dag_id}"), timeout_s
        )
        self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None, run_id: str | None = None) -> str:
        """A manual run; `run_id` names it (the DAGs key their fleetval run by it, so the same
        name resumes the same stored run), else Airflow names it."""
        self.unpause(dag_id)
        body: dict[str, Any] = {"logical_date": None, "conf": conf or {}}
        if run_id is not None:
            body["dag_run_id"] = run_id
        run = self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)
        return str(run["dag_run_id"])

    def wait_run(
        self,
        dag_id: str,
        run_id: str,
        *,
        timeout_s: float = 900,
        report: Callable[[float], None] | None = None,
        report_every_s: float = 15.0,
    ) -> str:
        """The run's final state; `report(seconds waited)` is called every `report_every_s` (a
        console's progress line: a sweep of many waves takes minutes)."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
        started = last_report = time.monotonic()

        def finished() -> str | None:
            nonlocal last_report
            state = self.call("GET", path)["state"]
            if state in FINISHED:
                return str(state)
            if report is not None and time.monotonic() - last_report >= report_every_s:
                last_report = time.monotonic()
                report(last_report - started)
            return None

        return str(self.wait_for(f"{dag_id} run {run_id} to finish", finished, timeout_s))

    def run_states(self, dag_id: str) -> dict[str, int]:
        """How many runs of `dag_id` are in each state (queued, running, success, failed)."""
        runs = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=1000")["dag_runs"]
        counts: dict[str, int] = {}
        for run in runs:
            counts[str(run["state"])] = counts.get(str(run["state"]), 0) + 1
        return counts

    def first_run(self, dag_id: str, *, timeout_s: float = 300) -> str:
        """Wait for the DAG's first run (its schedule or an event started it); its run id."""

        def newest() -> str | None:
            runs = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=1")["dag_runs"]
            return str(runs[0]["dag_run_id"]) if runs else None

        return str(self.wait_for(f"a run of {dag_id}", newest, timeout_s))

    def task_states(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances?limit=1000"
        return list(self.call("GET", path)["task_instances"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(
            self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=run_after&limit=1000")["dag_runs"]
        )


def _group_alive(group: int) -> bool:
    """Whether a process of `group` still runs (zombies waiting for their reaper do not count)."""
    proc = pathlib.Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            return True
    return False
