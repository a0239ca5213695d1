"""`fleetval scenario list | check | run`: JSON out, one-line errors, verdicts stored."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
import sqlalchemy as sa

from fleetval.cli import main
from fleetval.kueue.suite import shipped_files


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_list_and_check(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    code, listed, _ = run(capsys, "scenario", "list")
    assert code == 0 and [s["id"] for s in listed] == list(shipped_files())
    code, checked, _ = run(capsys, "scenario", "check", str(shipped_files()["x-03-lending-limit"]))
    assert code == 0 and checked[0]["criteria"] == ["D-SCHED-03"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        shipped_files()["x-03-lending-limit"].read_text().replace("lendingLimit: 2", "lendingLimit: lots")
    )
    code, out, err = run(capsys, "scenario", "check", str(bad))
    assert code == 1 and out is None
    assert err.startswith(f"error: {bad}: objects[2] (ClusterQueue team-b-cq): refused by the clusterqueues")
    assert err.count("\n") == 1
    code, _, err = run(capsys, "scenario", "run", "no-such-scenario")
    assert code == 1 and "neither a scenario file nor a shipped scenario" in err
    code, _, err = run(
        capsys, "scenario", "run", "--kubeconfig", "/nonexistent", "--fault", "kueue.no_reclaim"
    )
    assert code == 1 and "--fleet and --fault shape the simulated cluster" in err


@pytest.mark.postgres
def test_run_on_the_simulated_cluster_stores_the_record_then_the_verdicts(
    capsys: pytest.CaptureFixture[str], pg_url: str
) -> None:
    code, out, _ = run(
        capsys,
        "scenario",
        "run",
        "x-08-misconfigured",
        "--fault",
        "kueue.wrong_reason",
        "--db",
        pg_url,
        "--run-key",
        "k1",
    )
    assert code == 0
    [scenario] = out["scenarios"]
    assert scenario["kueue_version"] == "v0.19.2" and not scenario["harness_error"]
    assert [(v["criterion"], v["result"]) for v in out["verdicts"]] == [("D-SCHED-07", "pass")]
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        raw = conn.execute(sa.text("select tool, raw, probe_key from probes")).one()
        stored = conn.execute(sa.text("select criterion, result, subject from verdicts")).all()
    engine.dispose()
    assert raw.tool == "kueue-scenario" and raw.probe_key == "kueue/x-08-misconfigured"
    record = json.loads(raw.raw if isinstance(raw.raw, str) else bytes(raw.raw).decode())
    assert record["results"][0]["ok"] is True and record["observations"]
    assert [tuple(r) for r in stored] == [("D-SCHED-07", "pass", "kueue/x-08-misconfigured")]
