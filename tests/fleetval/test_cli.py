"""The CLI contract (docs/design.md, "CLI"): JSON on stdout, one `error:` line on stderr, exit codes."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from fleetval.cli import main
from fleetval.records import Result, Verdict
from fleetval.store import migrations as store_migrations
from fleetval.store.engine import make_engine
from fleetval.store.repository import Store
from tests.paths import FIXTURES, ROOT

DCGM_423 = FIXTURES / "dcgm" / "dcgm4.2.3-r2-text-pcie-fail-internal-error-issue253.txt"
DCGM_MEMORY = FIXTURES / "dcgm" / "dcgm-r2-text-fragment-gpu-memory-fail-thermal-mlengineering.txt"
DCGM_PASS = FIXTURES / "dcgm" / "dcgm3-r2-pass-json-virtualclient.json"
DEMO = ROOT / "include" / "fleetval" / "sim" / "fleets" / "demo.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip().startswith("{") else {}), err


def test_parse_dcgm_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = run(capsys, "parse", "dcgm", str(DCGM_423))
    assert code == 0
    assert {"dcgm_version", "driver_version", "level", "overall", "tests"} <= data.keys()
    assert data["dcgm_version"] == "4.2.3"
    pcie = next(t for t in data["tests"] if t["name"] == "pcie")
    assert pcie["result"] == "fail"
    assert {"name", "category", "result", "gpus", "warnings"} <= pcie.keys()


def test_judge_dcgm_internal_error_is_not_a_hardware_fail(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = run(capsys, "judge", "dcgm", str(DCGM_423), "--gate", "onboarding", "--node", "n1")
    assert code == 0
    assert data["result"] == "inconclusive"
    assert data["action"] == "rerun_diagnostic"


def test_judge_dcgm_memory_failure_rejects_at_onboarding(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = run(capsys, "judge", "dcgm", str(DCGM_MEMORY), "--gate", "onboarding", "--node", "n1")
    assert code == 0
    assert data["result"] == "fail"
    assert data["action"] == "reject"
    gpu0 = next(
        v for v in data["verdicts"] if v["criterion"] == "D-DEV-04" and v["evidence"]["gpu_index"] == "0"
    )
    assert gpu0["result"] == "fail"


@pytest.mark.parametrize(
    ("fixture", "code"),
    [
        (DCGM_PASS, 0),
        (DCGM_MEMORY, 3),
        (DCGM_423, 5),  # inconclusive: a DCGM internal error decides nothing
    ],
    ids=["pass", "fail", "inconclusive"],
)
def test_judge_fail_exit_code_is_the_worst_verdict(
    capsys: pytest.CaptureFixture[str], fixture: Path, code: int
) -> None:
    assert run(capsys, "judge", "dcgm", str(fixture))[0] == 0  # the default: JSON says it all
    exit_code, data, _ = run(capsys, "judge", "dcgm", str(fixture), "--fail-exit-code")
    assert exit_code == code
    assert data["verdicts"]  # the same document is printed


def test_judge_fail_exit_code_on_garbage_is_not_a_pass(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "garbage").write_bytes(b"\x00\xff not a kernel log of any kind")
    for tool in ("xid", "dcgm"):
        assert run(capsys, "judge", tool, str(tmp_path / "garbage"), "--fail-exit-code")[0] != 0


@pytest.mark.parametrize(
    "content",
    ["", "garbage\x00\xff not dcgm", '{"DCGM Diagnostic": {'],
    ids=["empty", "garbage", "truncated-json"],
)
def test_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text(content, encoding="utf-8", errors="surrogateescape")
    code, _, err = run(capsys, "parse", "dcgm", str(bad))
    assert code == 1
    assert err.startswith("error: ")
    assert len(err.strip().splitlines()) == 1
    code, data, _ = run(capsys, "judge", "dcgm", str(bad))
    assert code == 0
    assert data["result"] == "inconclusive"  # garbage never passes


def test_missing_file_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "parse", "dcgm", "/nonexistent/file")
    assert code == 1
    assert err.startswith("error: cannot read")
    code, _, err = run(capsys, "judge", "nope", "x")
    assert code == 2
    assert err.startswith("error: ")


def test_judge_xid_cordons_on_fell_off_bus(capsys: pytest.CaptureFixture[str]) -> None:
    log = FIXTURES / "xid" / "xid79-fallen-off-bus-variants-gpud-testcases.log"
    code, data, _ = run(capsys, "judge", "xid", str(log))
    assert code == 0
    assert data["events"][0]["node_action"] == "cordon"
    assert {"class", "action", "node_action"} <= data["events"][0].keys()


def test_db_upgrade(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/f.db"
    code, data, _ = run(capsys, "db", "upgrade", "--db", db)
    newest = max(p.name[:4] for p in (Path(store_migrations.__file__).parent / "versions").glob("[0-9]*.py"))
    assert (code, data["revision"]) == (0, newest)
    # `sim run --suite weekly` runs the DAGs on a local Airflow: tests/e2e/test_cli_sim_run.py.


def test_sim_load_then_inject_xid_by_fleet_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/s.db"
    code, out, _ = run(capsys, "sim", "load", str(DEMO), "--db", db)
    assert code == 0 and out == {"fleet": "demo", "nodes": 16, "faults": 6}
    code, out, _ = run(capsys, "sim", "inject-xid", "demo", "--db", db, "--node", "r01-n01", "--code", "79")
    assert code == 0 and out == {"fleet": "demo", "nodes": 1, "lines": 2}  # GPU-at-PCI line + the Xid
    code, out, _ = run(
        capsys,
        "sim",
        "inject-xid",
        str(DEMO),
        "--db",
        db,
        "--node",
        "r01-n02",
        "--code",
        "48",
        "--count",
        "3",
    )
    assert code == 0 and out["lines"] == 4
    code, _, err = run(capsys, "sim", "inject-xid", "nope", "--db", db, "--node", "r01-n01", "--code", "79")
    assert code != 0 and err.startswith("error: no simulated fleet 'nope'") and err.count("\n") == 1
    code, _, err = run(capsys, "sim", "inject-xid", "demo", "--db", db, "--node", "r09-n01", "--code", "79")
    assert code != 0 and "unknown node 'r09-n01'" in err
    code, _, err = run(
        capsys, "sim", "inject-xid", "demo", "--db", db, "--node", "r01-n01", "--code", "79", "--gpu", "8"
    )
    assert code != 0 and "GPUs 0..7, not 8" in err


def test_sim_run_triggers_each_suites_dag_with_its_params(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dagbag: Any
) -> None:
    """What `sim run` hands the local Airflow: the suite's DAG, a conf its Params accept (the DAGs'
    own budget defaults), and the step before the trigger (xid: the spec's Xid faults delivered)."""
    import fleetval.sim.cli as sim_cli
    from fleetval.store import xid_inbox
    from fleetval.store.engine import make_engine

    triggered: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    def local_airflow(_args: Any, _spec: Any, dag_id: str, conf: dict[str, Any], **kw: Any) -> int:
        before = kw.get("before_trigger")
        triggered.append((dag_id, conf, before(None) if before else {}))
        return 0

    monkeypatch.setattr(sim_cli, "_sim_dag", local_airflow)
    db = f"sqlite:///{tmp_path}/s.db"
    for suite in ("weekly", "xid", "nccl"):
        assert run(capsys, "sim", "run", str(DEMO), "--db", db, "--suite", suite)[0] == 0
    for dag_id, conf, _extra in triggered:
        params = dagbag.dags[dag_id].params
        assert set(conf) <= set(params), dag_id
        for key, value in conf.items():
            assert value == params[key], (dag_id, key)  # the DAG's own defaults
    assert [t[0] for t in triggered] == ["weekly_health_sweep", "xid_remediation", "post_upgrade_nccl_sweep"]
    assert triggered[2][2] == {"baselines": []}  # no --reference: busbw stays inconclusive
    run_id = Store(make_engine(db)).ensure_run("claim", suite="xid", backend="kubernetes")
    pending = xid_inbox.claim(
        make_engine(db), run_id, dispatch_ids=None, now=dt.datetime.now(dt.UTC), max_nodes=99
    )
    assert list(pending) == ["r02-n08"]  # the demo spec's Xid 79, delivered before the trigger


def test_sim_run_run_key_names_the_dag_run_so_a_rerun_resumes_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DAGs key their stored run by the Airflow run's name: `--run-key` names it, so the same
    key is the same stored run (a killed run rerun is finished, not duplicated), in every suite."""
    import fleetval.sim.airflow_run as airflow_run

    named: list[tuple[str, str | None]] = []

    class Airflow:
        def __init__(self, *_args: Any, **_kw: Any) -> None:
            pass

        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

        def trigger(self, dag_id: str, conf: dict[str, Any], run_id: str | None = None) -> str:
            named.append((dag_id, run_id))
            return run_id or "manual__generated"

        def wait_run(self, *_args: Any, **_kw: Any) -> str:
            return "success"

    monkeypatch.setattr(airflow_run, "LocalAirflow", Airflow)
    db = f"sqlite:///{tmp_path}/s.db"
    for suite in ("weekly", "xid", "nccl", "weekly"):
        code, data, _ = run(capsys, "sim", "run", str(DEMO), "--db", db, "--suite", suite, "--run-key", "k1")
        assert code == 0 and data["run_key"].endswith("/k1")
    assert named == [
        ("weekly_health_sweep", "k1"),
        ("xid_remediation", "k1"),
        ("post_upgrade_nccl_sweep", "k1"),
        ("weekly_health_sweep", "k1"),
    ]
    code, _, err = run(capsys, "sim", "run", str(DEMO), "--db", db, "--suite", "weekly", "--run-key", "a b")
    assert code == 2 and "run key" in err


def test_sim_run_bad_spec_is_one_error_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(DEMO.read_text().replace("dcgm.memory", "dcgm.melted"))
    code, _, err = run(capsys, "sim", "run", str(spec), "--db", f"sqlite:///{tmp_path}/f.db")
    assert code == 1
    assert err.startswith("error: fleet spec: faults[0].kind: unknown fault kind 'dcgm.melted'")


def test_criteria_catalog_lists_every_mission_id(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = run(capsys, "criteria")
    ids = {c["id"] for c in data["criteria"]}
    assert code == 0
    assert {"D-DEV-01", "D-NET-NCCL-04", "D-SCHED-07", "D-JOB-CKPT-07", "D-GPU-TS-01", "D-OP-04"} <= ids


def test_criteria_doc_is_the_catalog() -> None:
    """docs/criteria.md is generated from the catalog (`fleetval criteria --format markdown`)."""
    from fleetval.criteria import criteria_markdown
    from tests.paths import ROOT

    assert (ROOT / "docs" / "criteria.md").read_text() == criteria_markdown(), (
        "regenerate: fleetval criteria --format markdown > docs/criteria.md"
    )


def test_without_the_simulator_the_product_commands_remain(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulator may be installed apart: without it `fleetval` has no `sim` or `cluster`
    group, and the product's commands still parse and run."""
    import argparse
    import sys

    from fleetval.cli import build_parser

    # None in sys.modules: find_spec answers "not installed", and an import fails.
    for name in [n for n in sys.modules if n.startswith("fleetval.sim.")] + [
        "fleetval.sim",
        "fleetval.sim.cli",
    ]:
        monkeypatch.setitem(sys.modules, name, None)
    parser = build_parser()
    groups = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "sim" not in groups and "cluster" not in groups
    assert {"parse", "judge", "db", "mig", "scenario", "drill", "verdicts", "nodes", "metrics"} <= set(groups)
    for argv in (
        ["judge", "xid", "kern.log", "--node", "r01-n01"],
        ["db", "upgrade", "--db", "sqlite:///f.db"],
        ["mig", "check", "--gpu", "A100-SXM4-40GB", "3g.20gb"],
        ["scenario", "run", "--kubeconfig", "kubeconfig"],
        ["verdicts", "--db", "sqlite:///f.db"],
    ):
        assert parser.parse_args(argv).func.__module__ == "fleetval.cli", argv
    assert main(["criteria"]) == 0
    capsys.readouterr()
    assert main(["sim", "load", str(DEMO), "--db", "sqlite:///f.db"]) == 2
    assert "invalid choice: 'sim'" in capsys.readouterr().err
    assert main(["scenario", "run"]) == 1
    assert (
        capsys.readouterr().err
        == "error: no simulator installed to run the scenarios on: give --kubeconfig\n"
    )


def test_sim_serve_serves_the_fleet_until_terminated(tmp_path: Path) -> None:
    """`fleetval sim serve` prints where it serves, answers the real client, and stops on SIGTERM
    with its state saved (a second start continues the same cluster)."""
    import signal
    import subprocess
    import sys

    from kubernetes import client, config

    def serve() -> tuple[subprocess.Popen[str], dict[str, str]]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleetval.cli", "sim", "serve", str(DEMO), "--state-dir", str(tmp_path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        lines = []
        while not lines or lines[-1] != "}\n":
            lines.append(proc.stdout.readline())
        return proc, json.loads("".join(lines))

    proc, info = serve()
    try:
        core = client.CoreV1Api(config.new_client_from_config(config_file=info["kubeconfig"]))
        assert len(core.list_node().items) == 16
        core.patch_node("r01-n01", {"spec": {"unschedulable": True}})
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    proc, info = serve()
    try:
        core = client.CoreV1Api(config.new_client_from_config(config_file=info["kubeconfig"]))
        assert core.read_node("r01-n01").spec.unschedulable is True
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_nodes_prints_each_nodes_current_state_by_the_pages_rule(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An Xid run's cordon decision then its r3 seconds later: the console says what the page
    says (the r3 decides), names the node the weekly sweep did not probe and why, and counts
    nodes, not verdicts."""
    from fleetval.store import fleet_health

    db = f"sqlite:///{tmp_path}/n.db"
    assert run(capsys, "db", "upgrade", "--db", db)[0] == 0
    store = Store(make_engine(db))
    plan = {"rack_of": {"n1": "r1", "n2": "r1", "n3": "r2"}, "skipped": {"n3": "GPU withdrawn"}, "waves": []}
    weekly = store.ensure_run("w", suite="weekly", backend="test", meta={"plan": plan})
    for node in ("n1", "n2"):
        store.add_verdicts(weekly, [_verdict("D-DEV-03", node, "pass")], node=node)
    xid = store.ensure_run("x", suite="xid", backend="test")
    store.add_verdicts(xid, [_verdict("D-DEV-06", "n1", "fail")], node="n1")
    store.add_verdicts(xid, [_verdict("D-DEV-02", "n1", "pass")], node="n1")
    store.add_verdicts(xid, [_verdict("D-DEV-06", "n2", "fail")], node="n2")
    code, data, _ = run(capsys, "nodes", "--db", db, "--format", "json")
    states = {n["node"]: (n["state"], n["not_probed"]) for n in data["nodes"]}
    assert code == 0 and states == {
        "n1": ("pass", None),
        "n2": ("fail", None),
        "n3": ("untested", "GPU withdrawn"),
    }
    grid = fleet_health.fleet_grid(store.engine)  # the page's own reading
    assert {n: grid.state(n) for n in ("n1", "n2", "n3")} == {k: v[0] for k, v in states.items()}
    assert main(["nodes", "--db", db]) == 0
    table = capsys.readouterr().out
    assert "not probed by the newest weekly sweep: GPU withdrawn" in table
    assert table.rstrip().splitlines()[-1] == (
        "3 nodes in 2 racks: 1 fail, 1 pass, 1 untested; 1 not probed by the newest weekly sweep"
    )
    assert main(["nodes", "--db", db, "--attention", "--format", "json"]) == 0
    assert [n["node"] for n in json.loads(capsys.readouterr().out)["nodes"]] == ["n2", "n3"]


def _verdict(criterion: str, subject: str, result: str) -> Verdict:
    return Verdict(criterion, subject, Result(result), "none", "test.rule", result, {})
