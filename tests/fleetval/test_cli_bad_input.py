"""Bad invocations of `fleetval`: each ends with one `error:` line on stderr, nothing on stdout, a
non-zero exit (2 for a usage error, 1 otherwise) and never a traceback, however hostile the input
(an alias bomb, a 10^7-node spec, /dev/zero, a database that is not one). Output into a pipe that
closes early ends quietly."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import fleetval.cli as cli
import fleetval.sim.cli as sim_cli
from fleetval.cli import main
from fleetval.fleet.spec import load_fleet_spec
from fleetval.records import Result, Verdict
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import Store
from tests.paths import DEMO_FLEET, ROOT

USAGE, FAILED = 2, 1
DEMO = DEMO_FLEET.read_text()


def _alias_bomb() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    return DEMO + "\n".join(lines) + "\n"


def _racks(count: int, nodes: int) -> str:
    racks = "".join(f"  - {{name: r{i:04d}, profile: h100-sxm-ndr, nodes: {nodes}}}\n" for i in range(count))
    return DEMO.split("racks:")[0] + "racks:\n" + racks


# Fleet specs an attacker handed `sim load`; each file is written into the test's folder.
SPECS: dict[str, str | bytes] = {
    "bomb.yaml": _alias_bomb(),
    "recursive.yaml": "name: demo\nseed: 1\nprofiles: &p {x: *p}\n",
    "deep.yaml": "[" * 100_000 + "]" * 100_000,
    "deep-json.json": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "one-rack-10e7.yaml": _racks(1, 10**7),
    "racks-10e7.yaml": _racks(1000, 10**4),
    "too-large.yaml": "# padding\n" * 300_000 + DEMO,
    "duplicate-key.yaml": DEMO.replace("    gpus: 8\n", "    gpus: 8\n    gpus: 4\n"),
    "unknown-kind.yaml": DEMO.replace("dcgm.memory", "dcgm.melted"),
    "gpu-true.yaml": DEMO.replace("kind: dcgm.memory, gpu: 5", "kind: dcgm.memory, gpu: true"),
    "gpu-float.yaml": DEMO.replace("kind: dcgm.memory, gpu: 5", "kind: dcgm.memory, gpu: 5.0"),
    "code-string.yaml": DEMO.replace("code: 79", "code: '79'"),
    "code-negative.yaml": DEMO.replace("code: 79", "code: -79"),
    "count-negative.yaml": DEMO.replace("code: 79", "code: 79, count: -3"),
    "nodes-negative.yaml": DEMO.replace("nodes: 8}", "nodes: -8}", 1),
    "nodes-string.yaml": DEMO.replace("nodes: 8}", "nodes: '8'}", 1),
    "negative-factor.yaml": DEMO.replace(
        "kind: nccl.socket_fallback", "kind: nccl.nvlink_degraded, factor: -0.6"
    ),
    "nan-bandwidth.yaml": DEMO.replace("intra_busbw_gbps: 480", "intra_busbw_gbps: .nan"),
    "inf-bandwidth.yaml": DEMO.replace("inter_busbw_gbps: 370", "inter_busbw_gbps: .inf"),
    "list-driver.yaml": DEMO.replace("    fabric: ib\n", "    fabric: ib\n    driver_version: [570, 133]\n"),
    "empty-name.yaml": DEMO.replace("name: demo", "name: ''"),
    "path-name.yaml": DEMO.replace("name: demo", "name: ../../tmp/x"),
    "typo-faults.yaml": DEMO.replace("faults:", "fault:"),
    "not-a-mapping.yaml": "- just\n- a list\n",
    "empty.yaml": "",
    "nul.yaml": DEMO.encode() + b"extra: \x00\n",
    "not-utf8.yaml": DEMO.encode() + b"extra: \xff\xfe\n",
    "binary-tag.yaml": DEMO + "extra: !!binary aGVsbG8=\n",
}


@pytest.fixture(scope="module")
def pg_empty(pg_server_url: str) -> Iterator[str]:
    """An empty PostgreSQL database: no fleetval schema."""
    name = f"fleetval_badcli_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(pg_server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(pg_server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, pg_server_url: str, pg_empty: str
) -> Iterator[dict[str, Any]]:
    """The files, stores and servers the bad invocations point at."""
    tmp = tmp_path_factory.mktemp("bad-cli")
    for name, content in SPECS.items():
        (tmp / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    (tmp / "notes.txt").write_text("not a database\n" * 100)
    (tmp / "empty.db").touch()
    (tmp / "deep.txt").write_text("[" * 100_000 + "]" * 100_000)
    stores = {}
    for name, revision in (("store", "head"), ("old", "0003"), ("newer", "head")):
        url = f"sqlite:///{tmp}/{name}.db"
        engine = make_engine(url)
        upgrade(engine, revision)
        stores[name] = url
        if name == "store":
            spec = load_fleet_spec(DEMO)
            Store(engine).remember_fleet(spec.name, spec.seed, spec.raw)
            run_id = Store(engine).ensure_run("weekly/r1", suite="weekly", backend="sim")
            Store(engine).add_verdicts(
                run_id,
                [
                    Verdict("D-DEV-03", f"r01-n{i:02d}", Result.FAIL, "cordon", "r", "why", {}, {})
                    for i in range(500)
                ],
            )
        if name == "newer":
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
        engine.dispose()
    no_runs = f"sqlite:///{tmp}/no-runs.db"
    upgrade(make_engine(no_runs))
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    server = sa.make_url(pg_server_url)
    try:
        yield {
            "tmp": str(tmp),
            "demo": str(DEMO_FLEET),
            "no_runs": no_runs,
            "pg_empty": pg_empty,
            "pg_down": "postgresql+psycopg2://postgres@127.0.0.1:1/fleetval",
            "pg_no_db": server.set(database="fleetval_no_such_db").render_as_string(hide_password=False),
            "busy_port": str(busy.getsockname()[1]),
            **stores,
        }
    finally:
        busy.close()


@pytest.fixture(autouse=True)
def nothing_serves_or_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should a bad invocation get through, it fails the test instead of serving or running Airflow."""

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("a bad invocation got through")

    monkeypatch.setattr(threading.Event, "wait", refuse)
    monkeypatch.setattr(sim_cli, "_sim_dag", refuse)


INJECT = ["sim", "inject-xid", "demo", "--db", "{store}", "--node", "r01-n01"]
RUN = ["sim", "run", "{demo}", "--db", "{no_runs}"]
SERVE = ["sim", "serve", "{demo}", "--state-dir", "{tmp}/state"]
JUDGE_NCCL = ["judge", "nccl", "{tmp}/notes.txt"]

# (id, argv, exit code, what stderr's one line says)
CASES: list[tuple[str, list[str], int, str]] = [
    # --- usage --------------------------------------------------------------------------------
    ("no-arguments", [], USAGE, "the following arguments are required: command"),
    ("unknown-command", ["frobnicate"], USAGE, "invalid choice: 'frobnicate'"),
    ("parse-no-tool", ["parse"], USAGE, "required: tool, file"),
    ("parse-unknown-tool", ["parse", "pdf", "{tmp}/notes.txt"], USAGE, "invalid choice: 'pdf'"),
    ("judge-unknown-gate", ["judge", "dcgm", "{tmp}/notes.txt", "--gate", "monthly"], USAGE, "--gate"),
    (
        "judge-empty-node",
        ["judge", "dcgm", "{tmp}/notes.txt", "--node", ""],
        USAGE,
        "--node: must not be empty",
    ),
    ("baseline-nan", [*JUDGE_NCCL, "--baseline", "nan"], USAGE, "--baseline: must be a finite number"),
    ("baseline-inf", [*JUDGE_NCCL, "--baseline", "inf"], USAGE, "--baseline: must be a finite number"),
    ("baseline-negative", [*JUDGE_NCCL, "--baseline=-5"], USAGE, "--baseline: must be in (0, 100000]"),
    ("baseline-zero", [*JUDGE_NCCL, "--baseline", "0"], USAGE, "--baseline: must be in (0, 100000]"),
    ("baseline-text", [*JUDGE_NCCL, "--baseline", "fast"], USAGE, "--baseline: must be a number, got 'fast'"),
    ("ranks-zero", [*JUDGE_NCCL, "--baseline", "400", "--ranks", "0"], USAGE, "--ranks: must be 1..10000000"),
    ("ranks-negative", [*JUDGE_NCCL, "--baseline", "400", "--ranks=-8"], USAGE, "--ranks: must be 1..1000"),
    (
        "ranks-float",
        [*JUDGE_NCCL, "--baseline", "400", "--ranks", "8.5"],
        USAGE,
        "--ranks: must be an integer",
    ),
    ("db-no-subcommand", ["db"], USAGE, "required: db_command"),
    ("db-upgrade-no-db", ["db", "upgrade"], USAGE, "required: --db"),
    ("db-empty", ["db", "upgrade", "--db", ""], USAGE, "--db: the database URL is empty"),
    ("db-blank", ["db", "upgrade", "--db", "   "], USAGE, "--db: the database URL is empty"),
    ("db-not-a-url", ["db", "upgrade", "--db", "not a url"], USAGE, "--db: not a database URL"),
    ("db-bad-port", ["db", "upgrade", "--db", "postgresql://h:port/db"], USAGE, "--db: not a database URL"),
    ("db-mysql", ["db", "upgrade", "--db", "mysql://u@h/db"], USAGE, "in PostgreSQL or SQLite, not 'mysql'"),
    (
        "db-no-driver",
        ["db", "upgrade", "--db", "postgresql+nodriver://h/db"],
        USAGE,
        "unknown database driver",
    ),
    ("db-no-scheme-driver", ["db", "upgrade", "--db", "nope://x"], USAGE, "not 'nope'"),
    (
        "sqlite-missing-folder",
        ["db", "upgrade", "--db", "sqlite:///{tmp}/missing/dir/f.db"],
        USAGE,
        "/missing/dir does not exist",
    ),
    ("sqlite-is-a-folder", ["db", "upgrade", "--db", "sqlite:///{tmp}"], USAGE, "is a folder, not a file"),
    ("verdicts-empty-db", ["verdicts", "--db", ""], USAGE, "--db: the database URL is empty"),
    (
        "verdicts-empty-run-key",
        ["verdicts", "--db", "{store}", "--run-key", ""],
        USAGE,
        "--run-key: must not be",
    ),
    (
        "verdicts-bad-format",
        ["verdicts", "--db", "{store}", "--format", "xml"],
        USAGE,
        "invalid choice: 'xml'",
    ),
    ("load-empty-db", ["sim", "load", "{demo}", "--db", ""], USAGE, "--db: the database URL is empty"),
    ("load-no-db", ["sim", "load", "{demo}"], USAGE, "required: --db"),
    ("xid-code-zero", [*INJECT, "--code", "0"], USAGE, "--code: must be 1..999, got 0"),
    ("xid-code-negative", [*INJECT, "--code=-79"], USAGE, "--code: must be 1..999, got -79"),
    ("xid-code-huge", [*INJECT, "--code", "100000"], USAGE, "--code: must be 1..999"),
    ("xid-code-text", [*INJECT, "--code", "seventy-nine"], USAGE, "--code: must be an integer"),
    ("xid-no-code", INJECT, USAGE, "required: --code"),
    ("xid-count-zero", [*INJECT, "--code", "79", "--count", "0"], USAGE, "--count: must be 1..10000, got 0"),
    ("xid-count-negative", [*INJECT, "--code", "79", "--count=-3"], USAGE, "--count: must be 1..10000"),
    (
        "xid-count-huge",
        [*INJECT, "--code", "79", "--count", "1000000000"],
        USAGE,
        "--count: must be 1..10000",
    ),
    ("xid-gpu-negative", [*INJECT, "--code", "79", "--gpu=-1"], USAGE, "--gpu: must be 0..15, got -1"),
    ("xid-gpu-huge", [*INJECT, "--code", "79", "--gpu", "99"], USAGE, "--gpu: must be 0..15, got 99"),
    ("xid-empty-tag", [*INJECT, "--code", "79", "--tag", ""], USAGE, "--tag: must not be empty"),
    ("xid-long-tag", [*INJECT, "--code", "79", "--tag", "t" * 500], USAGE, "--tag: at most 100 characters"),
    ("xid-empty-node", [*INJECT[:-1], "", "--code", "79"], USAGE, "--node: must not be empty"),
    ("xid-no-node", [*INJECT[:-2], "--code", "79"], USAGE, "required: --node"),
    ("run-time-scale-nan", [*RUN, "--time-scale", "nan"], USAGE, "--time-scale: must be a finite number"),
    ("run-time-scale-inf", [*RUN, "--time-scale", "inf"], USAGE, "--time-scale: must be a finite number"),
    ("run-time-scale-negative", [*RUN, "--time-scale=-1"], USAGE, "--time-scale: must be in [0, 100]"),
    ("run-fleet-fraction-zero", [*RUN, "--max-fleet-fraction", "0"], USAGE, "must be in (0, 1], got 0"),
    ("run-fleet-fraction-big", [*RUN, "--max-fleet-fraction", "1.5"], USAGE, "must be in (0, 1], got 1.5"),
    ("run-rack-fraction-nan", [*RUN, "--max-rack-fraction", "nan"], USAGE, "must be a finite number"),
    ("run-action-fraction-neg", [*RUN, "--max-action-fraction=-0.1"], USAGE, "must be in (0, 1]"),
    ("run-empty-run-key", [*RUN, "--run-key", ""], USAGE, "--run-key: must not be empty"),
    ("run-unknown-suite", [*RUN, "--suite", "monthly"], USAGE, "invalid choice: 'monthly'"),
    ("run-empty-db", ["sim", "run", "{demo}", "--db", ""], USAGE, "--db: the database URL is empty"),
    ("serve-port-huge", [*SERVE, "--port", "70000"], USAGE, "--port: must be 0..65535, got 70000"),
    ("serve-port-negative", [*SERVE, "--port=-1"], USAGE, "--port: must be 0..65535, got -1"),
    ("serve-empty-token", [*SERVE, "--token", ""], USAGE, "--token: must not be empty"),
    ("serve-empty-db", [*SERVE, "--db", ""], USAGE, "--db: the database URL is empty"),
    (
        "serve-empty-state-dir",
        ["sim", "serve", "{demo}", "--state-dir", ""],
        USAGE,
        "--state-dir: must not be",
    ),
    ("serve-time-scale-nan", [*SERVE, "--time-scale", "nan"], USAGE, "--time-scale: must be a finite number"),
    ("criteria-bad-format", ["criteria", "--format", "pdf"], USAGE, "invalid choice: 'pdf'"),
    # --- input files ------------------------------------------------------------------------
    ("parse-missing-file", ["parse", "dcgm", "{tmp}/missing.txt"], FAILED, "cannot read {tmp}/missing.txt"),
    ("parse-a-folder", ["parse", "dcgm", "{tmp}"], FAILED, "Is a directory"),
    ("parse-dev-zero", ["parse", "xid", "/dev/zero"], FAILED, "cannot read /dev/zero: larger than 256 MiB"),
    ("parse-deep-json", ["parse", "dcgm", "{tmp}/deep.txt"], FAILED, ""),  # the parser's own words
    # --- the store ----------------------------------------------------------------------------
    ("db-unreachable", ["db", "upgrade", "--db", "{pg_down}"], FAILED, "the fleetval store is unreachable"),
    ("db-no-such-database", ["verdicts", "--db", "{pg_no_db}"], FAILED, "does not exist on that"),
    ("db-upgrade-no-such-database", ["db", "upgrade", "--db", "{pg_no_db}"], FAILED, "create it (`createdb "),
    ("db-not-a-database", ["db", "upgrade", "--db", "sqlite:///{tmp}/notes.txt"], FAILED, "not a database"),
    ("db-newer-revision", ["db", "upgrade", "--db", "{newer}"], FAILED, "cannot upgrade the store: "),
    ("verdicts-unreachable", ["verdicts", "--db", "{pg_down}"], FAILED, "the fleetval store is unreachable"),
    (
        "verdicts-no-store-file",
        ["verdicts", "--db", "sqlite:///{tmp}/none.db"],
        FAILED,
        "no fleetval store at",
    ),
    ("verdicts-unmigrated-pg", ["verdicts", "--db", "{pg_empty}"], FAILED, "holds no fleetval store yet"),
    ("nodes-empty-db", ["nodes", "--db", ""], USAGE, "--db: the database URL is empty"),
    ("nodes-bad-format", ["nodes", "--db", "{store}", "--format", "xml"], USAGE, "invalid choice: 'xml'"),
    ("nodes-no-store-file", ["nodes", "--db", "sqlite:///{tmp}/none.db"], FAILED, "no fleetval store at"),
    (
        "verdicts-unmigrated-sqlite",
        ["verdicts", "--db", "sqlite:///{tmp}/empty.db"],
        FAILED,
        "no fleetval store",
    ),
    ("verdicts-old-schema", ["verdicts", "--db", "{old}"], FAILED, "schema is at revision 0003"),
    ("verdicts-newer-schema", ["verdicts", "--db", "{newer}"], FAILED, "schema is at revision 0099"),
    ("verdicts-not-a-database", ["verdicts", "--db", "sqlite:///{tmp}/notes.txt"], FAILED, "not a database"),
    ("verdicts-no-runs", ["verdicts", "--db", "{no_runs}"], FAILED, "the store holds no runs yet"),
    ("verdicts-unknown-run", ["verdicts", "--db", "{store}", "--run-key", "nope"], FAILED, "no such run"),
    (
        "xid-unknown-fleet",
        [*INJECT[:2], "nope", *INJECT[3:], "--code", "79"],
        FAILED,
        "no simulated fleet 'nope'",
    ),
    (
        "xid-unknown-fleet-unmigrated",
        ["sim", "inject-xid", "nope", "--db", "{pg_empty}", "--node", "r01-n01", "--code", "79"],
        FAILED,
        "holds no fleetval store yet",
    ),
    ("xid-unknown-node", [*INJECT[:-1], "r09-n01", "--code", "79"], FAILED, "unknown node 'r09-n01'"),
    ("xid-gpu-off-node", [*INJECT, "--code", "79", "--gpu", "8"], FAILED, "has GPUs 0..7, not 8"),
    (
        "xid-bad-spec-file",
        ["sim", "inject-xid", "{tmp}/gpu-true.yaml", "--db", "{store}", "--node", "r01-n01", "--code", "79"],
        FAILED,
        "faults[0].gpu: must be an integer, got True",
    ),
    # --- fleet specs --------------------------------------------------------------------------
    ("spec-missing", ["sim", "load", "{tmp}/missing.yaml", "--db", "{no_runs}"], FAILED, "cannot read"),
    ("spec-alias-bomb", ["sim", "load", "{tmp}/bomb.yaml", "--db", "{no_runs}"], FAILED, "(YAML aliases)"),
    (
        "spec-recursive-alias",
        ["sim", "load", "{tmp}/recursive.yaml", "--db", "{no_runs}"],
        FAILED,
        "contains itself",
    ),
    ("spec-deep", ["sim", "load", "{tmp}/deep.yaml", "--db", "{no_runs}"], FAILED, "nested deeper than 32"),
    ("spec-deep-json", ["sim", "load", "{tmp}/deep-json.json", "--db", "{no_runs}"], FAILED, "nested deeper"),
    (
        "spec-10e7-nodes-one-rack",
        ["sim", "load", "{tmp}/one-rack-10e7.yaml", "--db", "{no_runs}"],
        FAILED,
        "racks[0].nodes: must be 1..100000, got 10000000",
    ),
    (
        "spec-10e7-nodes-over-racks",
        ["sim", "load", "{tmp}/racks-10e7.yaml", "--db", "{no_runs}"],
        FAILED,
        "racks: more than 100000 nodes in all",
    ),
    (
        "spec-too-large",
        ["sim", "load", "{tmp}/too-large.yaml", "--db", "{no_runs}"],
        FAILED,
        "larger than 2 MiB",
    ),
    (
        "spec-duplicate-key",
        ["sim", "load", "{tmp}/duplicate-key.yaml", "--db", "{no_runs}"],
        FAILED,
        "profiles.h100-sxm-ndr.gpus: given twice",
    ),
    (
        "spec-unknown-kind",
        ["sim", "run", "{tmp}/unknown-kind.yaml", "--db", "{no_runs}"],
        FAILED,
        "dcgm.melted",
    ),
    ("spec-gpu-true", ["sim", "load", "{tmp}/gpu-true.yaml", "--db", "{no_runs}"], FAILED, "got True"),
    ("spec-gpu-float", ["sim", "load", "{tmp}/gpu-float.yaml", "--db", "{no_runs}"], FAILED, "got 5.0"),
    (
        "spec-code-string",
        ["sim", "load", "{tmp}/code-string.yaml", "--db", "{no_runs}"],
        FAILED,
        "code: must be an",
    ),
    (
        "spec-code-negative",
        ["sim", "load", "{tmp}/code-negative.yaml", "--db", "{no_runs}"],
        FAILED,
        "got -79",
    ),
    (
        "spec-count-negative",
        ["sim", "load", "{tmp}/count-negative.yaml", "--db", "{no_runs}"],
        FAILED,
        "count:",
    ),
    (
        "spec-nodes-negative",
        ["sim", "load", "{tmp}/nodes-negative.yaml", "--db", "{no_runs}"],
        FAILED,
        "got -8",
    ),
    ("spec-nodes-string", ["sim", "load", "{tmp}/nodes-string.yaml", "--db", "{no_runs}"], FAILED, "got '8'"),
    (
        "spec-negative-factor",
        ["sim", "load", "{tmp}/negative-factor.yaml", "--db", "{no_runs}"],
        FAILED,
        "faults[5].factor: must be in (0, 1], got -0.6",
    ),
    (
        "spec-nan-bandwidth",
        ["sim", "load", "{tmp}/nan-bandwidth.yaml", "--db", "{no_runs}"],
        FAILED,
        "got nan",
    ),
    (
        "spec-inf-bandwidth",
        ["sim", "load", "{tmp}/inf-bandwidth.yaml", "--db", "{no_runs}"],
        FAILED,
        "got inf",
    ),
    (
        "spec-list-driver",
        ["sim", "load", "{tmp}/list-driver.yaml", "--db", "{no_runs}"],
        FAILED,
        "driver_version",
    ),
    (
        "spec-empty-name",
        ["sim", "load", "{tmp}/empty-name.yaml", "--db", "{no_runs}"],
        FAILED,
        "name: must not",
    ),
    (
        "spec-path-name",
        ["sim", "serve", "{tmp}/path-name.yaml", "--state-dir", "{tmp}/s"],
        FAILED,
        "not a name",
    ),
    (
        "spec-typo-section",
        ["sim", "load", "{tmp}/typo-faults.yaml", "--db", "{no_runs}"],
        FAILED,
        "key 'fault'",
    ),
    (
        "spec-not-a-mapping",
        ["sim", "load", "{tmp}/not-a-mapping.yaml", "--db", "{no_runs}"],
        FAILED,
        "a mapping",
    ),
    ("spec-empty", ["sim", "load", "{tmp}/empty.yaml", "--db", "{no_runs}"], FAILED, "must be a mapping"),
    ("spec-nul", ["sim", "load", "{tmp}/nul.yaml", "--db", "{no_runs}"], FAILED, "not valid YAML"),
    ("spec-not-utf8", ["sim", "load", "{tmp}/not-utf8.yaml", "--db", "{no_runs}"], FAILED, "not valid YAML"),
    (
        "spec-binary-tag",
        ["sim", "load", "{tmp}/binary-tag.yaml", "--db", "{no_runs}"],
        FAILED,
        "unsupported YAML type",
    ),
    ("spec-a-folder", ["sim", "load", "{tmp}", "--db", "{no_runs}"], FAILED, "Is a directory"),
    # --- sim run and serve ---------------------------------------------------------------------
    (
        "run-reference-unknown-node",
        [*RUN, "--suite", "nccl", "--reference", "r99-n01"],
        FAILED,
        "unknown node 'r99-n01'",
    ),
    ("run-reference-wrong-suite", [*RUN, "--reference", "r01-n01"], FAILED, "for --suite nccl only"),
    (
        "serve-state-dir-is-a-file",
        ["sim", "serve", "{demo}", "--state-dir", "{tmp}/notes.txt"],
        FAILED,
        "a file",
    ),
    (
        "serve-kubeconfig-missing-folder",
        [*SERVE, "--kubeconfig", "{tmp}/missing/kubeconfig"],
        FAILED,
        "/missing does not exist",
    ),
    ("serve-port-in-use", [*SERVE, "--port", "{busy_port}"], FAILED, "Address already in use"),
]


@pytest.mark.parametrize(("argv", "code", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_invocation_is_one_error_line(
    capsys: pytest.CaptureFixture[str], world: dict[str, Any], argv: list[str], code: int, message: str
) -> None:
    args = [a.format(**world) for a in argv]
    assert main(args) == code
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    assert message.format(**world) in err
    assert "Traceback" not in err


def test_every_case_is_named_once() -> None:
    assert len({c[0] for c in CASES}) == len(CASES) >= 88


def test_reading_a_store_never_creates_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["verdicts", "--db", f"sqlite:///{tmp_path}/none.db"]) == FAILED
    assert main(
        ["sim", "inject-xid", "demo", "--db", f"sqlite:///{tmp_path}/x.db", "--node", "a", "--code", "79"]
    )
    assert list(tmp_path.iterdir()) == []


def test_a_refused_spec_touches_no_store(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(_alias_bomb())
    assert main(["sim", "load", str(tmp_path / "bomb.yaml"), "--db", f"sqlite:///{tmp_path}/s.db"]) == FAILED
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [
        (RecursionError("maximum recursion depth exceeded"), FAILED, "error: the input is nested too deeply"),
        (MemoryError(), FAILED, "error: out of memory"),
        (OSError(28, "No space left on device", "/var/x"), FAILED, "error: No space left on device: /var/x"),
        (
            sa.exc.DataError("INSERT …", {}, ValueError("value too long\nDETAIL: x")),
            FAILED,
            "error: the store refused the request: value too long",
        ),
        (RuntimeError("a bug\nwith two lines"), FAILED, "error: unexpected RuntimeError: a bug"),
        (KeyboardInterrupt(), 130, "error: interrupted"),
    ],
    ids=["recursion", "memory", "os", "database", "bug", "interrupt"],
)
def test_whatever_a_command_raises_is_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    raised: BaseException,
    code: int,
    message: str,
) -> None:
    def command(_args: Any) -> int:
        raise raised

    monkeypatch.setattr(cli, "cmd_criteria", command)
    assert main(["criteria"]) == code
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(message) and err.count("\n") == 1


def test_an_interrupt_during_start_up_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the parser is built (its imports take a moment) is not a traceback."""

    def interrupted() -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["criteria"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err == "error: interrupted\n"


def _closed_pipe() -> int:
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to write_end is EPIPE
    return write_end


@pytest.mark.parametrize(
    "argv",
    [["criteria"], ["criteria", "--format", "markdown"], ["verdicts", "--db", "{store}"], ["--help"]],
    ids=["json", "markdown", "table", "help"],
)
def test_output_into_a_closed_pipe_ends_quietly(world: dict[str, Any], argv: list[str]) -> None:
    """`fleetval … | head`: the reader left; no BrokenPipeError traceback, no message."""
    stdout = _closed_pipe()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fleetval.cli", *(a.format(**world) for a in argv)],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    finally:
        os.close(stdout)
    assert done.stderr == ""
    assert done.returncode in (0, 1)


def test_piped_into_head(world: dict[str, Any]) -> None:
    done = subprocess.run(
        f"{sys.executable} -m fleetval.cli verdicts --db '{world['store']}' --all | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.stdout == "run weekly/r1\n" and done.stderr == ""
