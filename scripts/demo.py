"""make demo: the simulated demo fleet served as a Kubernetes API (`fleetval sim serve`), Airflow 3
standalone on the embedded default (SQLite) pointed at it, and the weekly sweep as the cron runs it:
one probe pod task per node through the KubernetesPodOperator. Prints the verdicts, then delivers
Xid 79 lines and shows the event-driven remediation (cordon, an r3 probe pod, back to service or
quarantine), then the Kueue contention scenarios (`kueue_contention`), and ends on the fleet-health
page (the plugin in plugins/: every verdict of the demo fleet by rack and layer), whose address
and login it prints, serving the UI until Ctrl-C.

    python scripts/demo.py [--exit-after-summary] [--port 8080]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import urllib.request

from fleetval.fleet.spec import load_fleet_spec
from fleetval.sim.airflow_run import ADMIN, VIEWER, AirflowRunError, LocalAirflow
from fleetval.sim.kube.cluster import SimKubeCluster
from fleetval.sim.kube.server import KubeApiServer
from fleetval.sim.kube.tls import server_tls
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.models import VerdictRow
from fleetval.store.repository import Store

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO = ROOT / ".demo"
FLEET = ROOT / "include" / "fleetval" / "sim" / "fleets" / "demo.yaml"
PASSWORD = "fleetval"
VIEWER_PASSWORD = "fleetval-viewer"
# Probes last 2 % of their real time (an r2 about 3 s) and stay on their worker: deferral is for
# real diagnostics (minutes); a trigger firing seconds after the deferral races Airflow's bookkeeping.
TIME_SCALE = 0.02
# How long a run may take before the demo gives up: a 2-core machine busy with other work needs
# several times the few minutes the weekly sweep takes on a quiet one (one wave at a time).
RUN_TIMEOUT_S = 3600


def fleetval(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "fleetval.cli", *args], check=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exit-after-summary", action="store_true", help="stop once the summary is printed")
    ap.add_argument("--port", type=int, default=int(os.environ.get("FLEETVAL_DEMO_PORT", "8080")))
    args = ap.parse_args()

    shutil.rmtree(DEMO, ignore_errors=True)  # every demo starts from an empty store and Airflow home
    DEMO.mkdir()
    db = f"sqlite:///{DEMO / 'fleetval.db'}"
    print(f"== fleetval store: {db}")
    engine = make_engine(db)
    upgrade(engine)
    cluster = SimKubeCluster(load_fleet_spec(FLEET.read_text()), engine, time_scale=TIME_SCALE)
    # HTTPS with its own CA in the kubeconfig: kubectl sends a bearer token over TLS only.
    server = KubeApiServer(cluster, tls=server_tls(DEMO))
    server.start()
    kubeconfig = server.write_kubeconfig(DEMO / "kubeconfig")
    print(f"== the simulated cluster's Kubernetes API: {server.url} (kubeconfig {kubeconfig})")
    airflow = LocalAirflow(
        DEMO,
        db,
        kubeconfig,
        port=args.port,
        password=PASSWORD,
        use_schedules=True,  # unpausing runs the latest weekly slot, as the cron would
        deferrable_probes=False,
        users={VIEWER: ("viewer", VIEWER_PASSWORD)},
    )
    try:
        print(f"== starting Airflow 3 (standalone) on :{args.port} — log: {airflow.log_path}")
        started = time.monotonic()
        airflow.start()
        print(f"== Airflow healthy after {time.monotonic() - started:.0f}s")
        airflow.unpause("xid_remediation")
        airflow.unpause("weekly_health_sweep")
        run = airflow.first_run("weekly_health_sweep")
        print(f"== weekly_health_sweep run {run} started by its schedule (waves: weekly_health_sweep_wave)")
        waves = "weekly_health_sweep_wave"

        def progress(waited_s: float) -> None:
            try:
                states = airflow.run_states(waves)
            except (OSError, KeyError, ValueError):  # a busy api-server: the next report will say
                return
            verdicts = Store(engine).count(VerdictRow)
            print(
                f"   {waited_s:4.0f}s: waves {states.get('success', 0) + states.get('failed', 0)} done, "
                f"{states.get('running', 0)} running, {states.get('queued', 0)} queued; "
                f"{verdicts} verdicts stored",
                flush=True,
            )

        state = airflow.wait_run("weekly_health_sweep", run, timeout_s=RUN_TIMEOUT_S, report=progress)
        print(f"== run {state}")
        print()
        fleetval("verdicts", "--db", db)
        print()
        show_nodes(db)
        # The Xid breaker's default (10 % of 16 nodes: one) would withhold the second cordon with an
        # F-SAFE-01 alert; operators tune it without a deploy, through this Variable.
        breaker = {"key": "fleetval_xid_breaker", "value": json.dumps({"max_fleet_fraction": 0.125})}
        airflow.call("POST", "/api/v2/variables", breaker)
        print(
            "== Xid breaker: at most 2 of 16 nodes cordoned for Xids in 5 min (Variable fleetval_xid_breaker)"
        )
        print(
            "== Xid 79 (GPU fell off the bus) on GPU 2 of r01-n01 (a one-off) and of r02-n08 (the "
            "device plugin withdrew it): the event wakes xid_remediation"
        )
        nodes = ["--node", "r01-n01", "--node", "r02-n08"]
        inject = ["sim", "inject-xid", str(FLEET), "--db", db, *nodes, "--code", "79", "--gpu", "2"]
        subprocess.run([sys.executable, "-m", "fleetval.cli", *inject], check=True, stdout=subprocess.DEVNULL)
        run = airflow.first_run("xid_remediation")
        print(
            f"== xid_remediation run {run}: "
            f"{airflow.wait_run('xid_remediation', run, timeout_s=RUN_TIMEOUT_S)}"
        )
        print()
        fleetval("verdicts", "--db", db)
        print()
        show_nodes(db)
        airflow.unpause("kueue_contention")
        run = airflow.first_run("kueue_contention")
        print(
            f"== kueue_contention run {run} (its weekly slot): the shipped Kueue scenarios, one at a "
            "time, on the simulated cluster's Kueue"
        )
        print(f"== run {airflow.wait_run('kueue_contention', run, timeout_s=RUN_TIMEOUT_S)}")
        print()
        fleetval("verdicts", "--db", db)
        print()
        fleet_page_summary(airflow)
        print()
        print(
            f'Fleet health: http://localhost:{args.port}/plugin/fleet-health  (in the UI: "Fleet health" in'
        )
        print(f"              its navigation; the page alone: http://localhost:{args.port}/fleet/)")
        print(
            f"Airflow UI:   http://localhost:{args.port}  (login {ADMIN} / {PASSWORD};"
            f" read-only: {VIEWER} / {VIEWER_PASSWORD})"
        )
        print(f"Verdicts:     fleetval verdicts --db {db} [--format json]")
        labels = "fleetval.io/quarantine,fleetval.io/health"
        print(f"Cluster:      kubectl --kubeconfig {kubeconfig} get nodes -L {labels}")
        if not args.exit_after_summary:
            print("Serving until Ctrl-C.")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        print("\n== stopping")
    except AirflowRunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        airflow.stop()
        server.stop()
    return 0


def show_nodes(db: str) -> None:
    """Each node's current state by the rule the fleet page colours it with (`fleetval nodes`)."""
    print("== each node now (the fleet page's rule: a node's newest judgement per layer, an r3 deciding)")
    fleetval("nodes", "--db", db)
    print()


def fleet_page_summary(airflow: LocalAirflow) -> None:
    """What the fleet-health page shows now, read through the api-server as the viewer (so the
    page, its plugin and Airflow's authentication are what the demo ends on)."""
    request = urllib.request.Request(f"{airflow.base}/fleet/")
    request.add_header("Authorization", f"Bearer {airflow.token(VIEWER)}")
    with urllib.request.urlopen(request, timeout=120) as response:
        page = response.read().decode()
    totals = re.search(r'<div class="summary" id="totals">(.*?)</div>\s*<h3>', page, re.S)
    counts = re.findall(
        r"<b>(\d+)</b><span class=\"badge r-[a-z]+\">([a-z]+)</span>", totals.group(1) if totals else ""
    )
    nodes = re.search(r"(\d+) nodes in (\d+) racks", page)
    print(
        "== the fleet-health page: "
        + (f"{nodes.group(1)} nodes in {nodes.group(2)} racks, " if nodes else "")
        + ", ".join(f"{n} {word}" for n, word in counts if n != "0")
    )
    for node, rack, layer, result in re.findall(
        r'<tr><td class="mono"><a href="[^"]+">([^<]+)</a></td><td class="mono">([^<]*)</td><td>([a-z]+)</td>'
        r'<td><span class="badge r-[a-z]+">([a-z]+)</span>',
        page,
    ):
        print(f"   needs attention: {node} (rack {rack}) {layer} {result}")


if __name__ == "__main__":
    sys.exit(main())
