"""Drive the demo through Airflow's REST API: wait for health, unpause, trigger, wait for the run."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any


def call(base: str, method: str, path: str, token: str | None = None, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read()
        return json.loads(raw) if raw else None


def wait_for(what: str, check: Any, timeout_s: float) -> Any:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            value = check()
            if value:
                return value
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            pass
        time.sleep(1)
    sys.exit(f"error: timed out after {timeout_s:.0f}s waiting for {what}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--dag", required=True)
    ap.add_argument("--conf", default="{}")
    ap.add_argument("--unpause", action="append", default=[], help="also unpause this DAG (repeatable)")
    ap.add_argument(
        "--await-run",
        action="store_true",
        help="do not trigger: wait for the DAG's first run (its schedule or event) to finish",
    )
    args = ap.parse_args()
    base = f"http://localhost:{args.port}"
    t0 = time.time()

    def healthy() -> bool:
        health = call(base, "GET", "/api/v2/monitor/health")
        return all(health.get(c, {}).get("status") == "healthy" for c in ("metadatabase", "scheduler"))

    wait_for("the Airflow api-server and scheduler", healthy, 180)
    login = {"username": args.user, "password": args.password}
    token = call(base, "POST", "/auth/token", body=login)["access_token"]
    for dag_id in [args.dag, *args.unpause]:
        wait_for(
            f"DAG {dag_id} to be parsed", lambda d=dag_id: call(base, "GET", f"/api/v2/dags/{d}", token), 120
        )
        call(base, "PATCH", f"/api/v2/dags/{dag_id}", token, {"is_paused": False})

    if args.await_run:

        def first_run() -> str | None:
            runs = call(base, "GET", f"/api/v2/dags/{args.dag}/dagRuns?order_by=-run_after&limit=1", token)
            return runs["dag_runs"][0]["dag_run_id"] if runs["dag_runs"] else None

        run_id = wait_for(f"a run of {args.dag}", first_run, 180)
        print(f"== {args.dag} run {run_id} started by its schedule or event")
    else:
        print(f"== Airflow healthy after {time.time() - t0:.0f}s")
        body = {"logical_date": None, "conf": json.loads(args.conf)}
        run_id = call(base, "POST", f"/api/v2/dags/{args.dag}/dagRuns", token, body)["dag_run_id"]
        print(f"== triggered {args.dag} run {run_id}")
    state = ""

    def finished() -> str | None:
        nonlocal state
        state = call(base, "GET", f"/api/v2/dags/{args.dag}/dagRuns/{run_id}", token)["state"]
        return state if state in ("success", "failed") else None

    wait_for(f"run {run_id} to finish", finished, 600)
    tis = call(base, "GET", f"/api/v2/dags/{args.dag}/dagRuns/{run_id}/taskInstances", token)
    summary = ", ".join(sorted({f"{ti['task_id']}:{ti['state']}" for ti in tis["task_instances"]}))
    print(f"== run {state} after {time.time() - t0:.0f}s ({summary})")
    if state != "success":
        sys.exit(f"error: the DAG run {run_id} ended {state}; see .demo/airflow.log")


if __name__ == "__main__":
    main()
