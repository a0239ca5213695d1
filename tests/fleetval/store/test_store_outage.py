"""PostgreSQL restarting in the middle of a sweep: the step ends with one line (StoreUnavailable),
not the driver's chain of tracebacks, and the retry leaves exactly the rows a clean run leaves.

A private PostgreSQL server (initdb in a temporary folder) is stopped at the N-th SQL statement
of the wave's write path, for N spread over the whole path, then started again for the retry."""

from __future__ import annotations

import datetime as dt
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from fleetval.dcgm import weekly
from fleetval.fleet.spec import load_fleet_spec
from fleetval.policy.blast_radius import ActionBudget, DiagnosisBudget
from fleetval.probes import outputs as probe_outputs
from fleetval.sim.images import dcgm_report
from fleetval.sim.kube.cluster import SimKubeCluster
from fleetval.sim.kube.server import KubeApiServer
from fleetval.store.engine import StoreUnavailable, make_engine, outage_as_error
from fleetval.store.migrate import upgrade
from fleetval.store.models import Measurement
from fleetval.store.repository import Store
from tests.paths import DEMO_FLEET
from tests.simkube import SimKube

FLEET = load_fleet_spec(DEMO_FLEET.read_text())
AS_OF = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


class PrivatePostgres:
    """A throwaway PostgreSQL server this test may stop and start at will."""

    def __init__(self, base: pathlib.Path) -> None:
        self.data = base / "data"
        self.port = _free_port()
        self.base = base
        # PostgreSQL refuses to run as root: as root, run it as the `postgres` user.
        self.prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.prefix:
            shutil.chown(base, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def _run(self, *argv: str) -> None:
        subprocess.run([*self.prefix, *argv], check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.base / "log"), "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def postgres() -> Iterator[PrivatePostgres]:
    if not (shutil.which("initdb") and shutil.which("pg_ctl")):
        pytest.skip("initdb / pg_ctl are not installed: no private PostgreSQL server to restart")
    # Not under pytest's temporary folder: the `postgres` user must be able to reach it.
    base = pathlib.Path(tempfile.mkdtemp(prefix="fleetval-pg-"))
    try:
        server = PrivatePostgres(base)
        server.start()
        yield server
        server.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def fresh_store(postgres: PrivatePostgres, name: str) -> Store:
    admin = sa.create_engine(postgres.url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    engine = make_engine(postgres.url(name))
    upgrade(engine)
    return Store(engine)


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Callable[[Store], SimKube]]:
    servers: list[KubeApiServer] = []

    def start(store: Store) -> SimKube:
        server = KubeApiServer(SimKubeCluster(FLEET, None))  # its own state in memory
        server.start()
        servers.append(server)
        kubeconfig = server.write_kubeconfig(tmp_path / f"kubeconfig-{len(servers)}")
        return SimKube(server, store, kubeconfig, "")

    yield start
    for server in servers:
        server.stop()


def sweep_wave(store: Store, kube: SimKube) -> None:
    """The weekly sweep's write path for one wave: the run, the probes' raw output (what each
    probe task stores when its pod completes), the judgement and the node actions, coverage."""
    run_key = "weekly_health_sweep/scheduled__outage"
    run_id = store.ensure_run(run_key, suite="weekly", backend="kubernetes")
    meta = store.run_meta(run_id)
    if "plan" in meta:  # a retry keeps the first attempt's plan, as `plan_waves` does
        plan = weekly.SweepPlan.from_json(meta["plan"])
    else:
        nodes = kube.cluster.list_nodes()
        plan = weekly.plan_sweep(nodes, DiagnosisBudget(1.0, 1.0), max_waves=16, max_wave_size=16)
        store.update_run_meta(run_id, plan=plan.to_json())
    specs = weekly.wave_probes(plan, 0, run_key=run_key)
    for spec in specs:
        raw = dcgm_report(FLEET, spec.node, 2)
        output = probe_outputs.probe_output(spec, raw, exit_code=0, error=None, finished_at=AS_OF.timestamp())
        probe_outputs.store_probe_outputs(store, run_id, [output])
    weekly.judge_wave(
        store,
        kube.cluster,
        run_id=run_id,
        run_key=run_key,
        plan=plan,
        wave_index=0,
        action_budget=ActionBudget(1.0, 1.0),
        dry_run=False,
        as_of=AS_OF,
    )
    swept = store.probed_nodes(run_id, completed_only=True)
    store.add_verdicts(run_id, [weekly.coverage_verdict(plan, swept, as_of=AS_OF)])
    store.finish_run(run_id)


def rows(store: Store) -> dict[str, Any]:
    [run_id] = {r["run_id"] for r in store.verdicts()}
    return {
        "verdicts": sorted(
            (r["criterion"], r["subject"], r["result"], r["action"], r["rule_id"]) for r in store.verdicts()
        ),
        "probes": sorted((p["probe_key"], p["exit_code"], len(p["raw"])) for p in store.probes(run_id)),
        "measurements": store.count(Measurement),
        "node_events": sorted((e["event_key"], e["kind"], e["dry_run"]) for e in store.node_events()),
    }


def statements(store: Store, kube: SimKube) -> int:
    count = 0

    def counted(*_: Any) -> None:
        nonlocal count
        count += 1

    sa.event.listen(store.engine, "before_cursor_execute", counted)
    sweep_wave(store, kube)
    sa.event.remove(store.engine, "before_cursor_execute", counted)
    return count


def test_a_restart_mid_wave_is_one_line_and_the_retry_matches_a_clean_run(
    postgres: PrivatePostgres, cluster: Callable[[Store], SimKube]
) -> None:
    clean = fresh_store(postgres, "clean")
    total = statements(clean, cluster(clean))
    expected = rows(clean)
    # The wave judged every node, found the demo fleet's faults and acted on them.
    assert (
        len(expected["probes"]) == 15
    )  # r02-n08's withdrawn GPU: not swept and expected["measurements"] > 0
    assert "r01-n03/cordon/node" in {e[0].split("/", 2)[-1] for e in expected["node_events"]}

    for kill_at in sorted({1, 2, *range(3, total, max(1, total // 6)), total}):
        store = fresh_store(postgres, f"outage_{kill_at}")
        kube = cluster(store)
        seen = 0

        def restart_at_n(*_: Any, kill_at: int = kill_at) -> None:
            nonlocal seen
            seen += 1
            if seen == kill_at:
                postgres.stop()

        sa.event.listen(store.engine, "before_cursor_execute", restart_at_n)
        with pytest.raises(StoreUnavailable) as caught, outage_as_error():
            sweep_wave(store, kube)
        sa.event.remove(store.engine, "before_cursor_execute", restart_at_n)
        message = str(caught.value)
        assert message.startswith("the fleetval store is unreachable: ") and "\n" not in message
        assert caught.value.__cause__ is None and caught.value.__suppress_context__

        postgres.start()
        sweep_wave(store, kube)  # the retry, in the same process: pooled connections are stale
        assert rows(store) == expected, f"restart at statement {kill_at} of {total}"
        store.engine.dispose()
