"""`fleetval` command line (contract: docs/design.md, "CLI").

JSON on stdout; errors are one line on stderr starting `error:` and a non-zero exit, never a
traceback (usage errors exit 2, everything else 1). Evidence that cannot decide is not an error:
`judge` prints an inconclusive verdict and exits 0. Output into a pipe that closes early (`| head`)
ends quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from fleetval.ckpt.contract import FAULTS as CKPT_FAULTS
from fleetval.cli_base import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    db_url,
    emit,
    int_in,
    migrated_engine,
    number_in,
    read_input,
    text,
    verdict_json,
)
from fleetval.errors import FleetvalError, ParseError

# `judge --fail-exit-code`: the worst verdict as the exit status, for shell scripts (0: pass or warn).
VERDICT_EXIT_CODES = {"fail": 3, "error": 4, "inconclusive": 5}


def cmd_parse(args: argparse.Namespace) -> int:
    text = read_input(args.file)
    if args.tool == "dcgm":
        from fleetval.dcgm.parser import parse_dcgm

        emit(parse_dcgm(text).to_json())
    elif args.tool == "nccl":
        from fleetval.nccl.parser import parse_nccl

        emit(parse_nccl(text).to_json())
    elif args.tool == "mig":
        from fleetval.mig.parser import parse_mig

        emit(parse_mig(text))
    elif args.tool == "gpu-operator":
        emit(_parse_gpu_operator(text))
    elif args.tool == "kueue":
        from fleetval.kueue.parse import parse_workload
        from fleetval.kueue.reasons import detect_mode, waiting_reason

        workload = parse_workload(text)
        emit(
            {
                "workload": workload,
                "waiting_reason": waiting_reason(workload, dt.datetime.now(dt.UTC)).to_json(),
                "reason_mode": detect_mode([workload]),
            }
        )
    else:
        from fleetval.xid.parser import parse_xid, xid_log_to_json

        emit(xid_log_to_json(parse_xid(text)))
    return 0


def cmd_judge(args: argparse.Namespace) -> int:
    """Unreadable evidence is judged too (inconclusive), never an error exit: the judges take the
    parse error in place of the parsed output. With --fail-exit-code the worst verdict is the exit
    status (VERDICT_EXIT_CODES: fail before error before inconclusive; pass and warn exit 0)."""
    judged = _judge(args)
    emit(judged)
    if not args.fail_exit_code:
        return 0
    results = {str(verdict.get("result")) for verdict in judged.get("verdicts") or []}
    return next((code for result, code in VERDICT_EXIT_CODES.items() if result in results), 0)


def _judge(args: argparse.Namespace) -> dict[str, Any]:
    text = read_input(args.file)
    if args.tool == "dcgm":
        from fleetval.dcgm.judge import judge_dcgm
        from fleetval.dcgm.parser import DcgmReport, parse_dcgm

        report: DcgmReport | ParseError
        try:
            report = parse_dcgm(text)
        except ParseError as exc:
            report = exc
        return judge_dcgm(report, gate=args.gate, node=args.node, expected_gpus=args.gpus).to_json()
    if args.tool == "nccl":
        from fleetval.nccl.judge import judge_nccl_to_json
        from fleetval.nccl.parser import NcclRun, parse_nccl

        if args.baseline is None:
            raise FleetvalError("judge nccl needs --baseline GBPS (the measured baseline busbw)")
        run: NcclRun | ParseError
        try:
            run = parse_nccl(text)
        except ParseError as exc:
            run = exc
        return judge_nccl_to_json(run, args.baseline, args.ranks, expected_fabric=args.fabric)
    if args.tool == "sharing":
        return {"verdicts": [_judge_sharing(text, args.node).to_json()]}
    if args.tool == "operator":
        return {"verdicts": [_judge_operator(text, args).to_json()]}
    from fleetval.xid.judge import judge_xid, judge_xid_to_json
    from fleetval.xid.parser import XidEvent, parse_xid

    events: tuple[XidEvent, ...] | ParseError
    try:
        events = parse_xid(text)
    except ParseError as exc:
        events = exc
    return judge_xid_to_json(judge_xid(events, node=args.node))


def _parse_gpu_operator(text: str) -> dict[str, Any]:
    """Whichever GPU Operator output this is: operand pods, the controller's log, readiness
    markers, or a validator container's log (tried in that order)."""
    from fleetval.gpu_operator import parse

    try:
        return {"kind": "pods", "pods": [p.to_json() for p in parse.parse_operand_pods(text)]}
    except ParseError:
        pass
    try:
        return {"kind": "controller", **parse.parse_operator_log(text).to_json()}
    except ParseError:
        pass
    if markers := parse.parse_markers(text):
        return {"kind": "markers", "markers": sorted(markers)}
    log = parse.parse_validator_log(text)
    if log.outcome == "unknown":
        raise ParseError(
            "gpu-operator", "not operand pods, a controller log, markers or a validator log", text
        )
    return {"kind": "validator", **log.to_json()}


def _judge_operator(text: str, args: argparse.Namespace) -> Any:
    """D-OP-01 from the operand pods (FILE) and, when given, markers, the controller's log and
    validator logs; unreadable pods are an inconclusive verdict."""
    from fleetval.gpu_operator import parse
    from fleetval.gpu_operator.judge import CRITERION, RULE_ID, judge_operands
    from fleetval.records import Result, Verdict

    try:
        pods = parse.parse_operand_pods(text)
    except ParseError as exc:
        return Verdict(CRITERION, args.node, Result.INCONCLUSIVE, "none", RULE_ID, f"operand pods: {exc}")
    validator = {}
    for item in args.validator_log:
        container, sep, path = item.partition("=")
        if not sep or not container or not path:
            raise FleetvalError(
                f"--validator-log {item!r}: use CONTAINER=FILE, e.g. driver-validation=log.txt"
            )
        validator[container] = parse.parse_validator_log(read_input(path))
    return judge_operands(
        args.node,
        pods,
        markers=parse.parse_markers(read_input(args.markers)) if args.markers else None,
        operator_log=parse.parse_operator_log(read_input(args.operator_log)) if args.operator_log else None,
        validator_logs=validator or None,
    )


def _judge_sharing(text: str, node: str) -> Any:
    """D-GPU-TS-01 on a Node object (`kubectl get node -o json`); one that cannot be read is an
    inconclusive verdict, as for any evidence."""
    from fleetval.mig.sharing import CRITERION, RULE_ID, judge_time_slicing
    from fleetval.records import Result, Verdict

    try:
        obj = json.loads(text)
        meta, status = obj.get("metadata") or {}, obj.get("status") or {}
        labels, capacity = meta.get("labels") or {}, status.get("capacity") or {}
        if not isinstance(labels, dict) or not isinstance(capacity, dict):
            raise ValueError("metadata.labels and status.capacity must be mappings")
    except (ValueError, AttributeError, RecursionError) as exc:
        reason = f"not a Node object: {_first_line(exc)}"
        return Verdict(CRITERION, node, Result.INCONCLUSIVE, "none", RULE_ID, reason)
    name = node if node != "node" else str(meta.get("name") or node)
    return judge_time_slicing(
        name, {str(k): str(v) for k, v in labels.items()}, {str(k): str(v) for k, v in capacity.items()}
    )


def cmd_mig_catalog(args: argparse.Namespace) -> int:
    from fleetval.mig.catalog import catalog

    gpus = catalog()
    if args.gpu:
        from fleetval.mig.catalog import gpu_for

        gpus = {(gpu := gpu_for(args.gpu)).name: gpu}
    emit({name: gpu.to_json() for name, gpu in gpus.items()})
    return 0


def cmd_mig_check(args: argparse.Namespace) -> int:
    """Whether a MIG layout is allowed on a GPU; a refused layout is an answer (exit 0), not an error."""
    from fleetval.mig.catalog import check_layout, gpu_for

    gpu = gpu_for(args.gpu)
    emit({"gpu": gpu.name, "profiles": list(args.profiles), **check_layout(gpu, args.profiles).to_json()})
    return 0


def cmd_drill_run(args: argparse.Namespace) -> int:
    """The checkpoint drill on this machine with the reference job (or a contract-following
    command). A defect the drill finds is a verdict (exit 0); a drill that cannot run is an error."""
    import shlex
    import tempfile
    import time

    from fleetval.ckpt.drill import DrillPlan, fault_flags
    from fleetval.ckpt.judge import judge_drill
    from fleetval.ckpt.local import LocalDrill, job_available

    faults = fault_flags(args.fault)
    plan = (
        DrillPlan.for_steps(args.steps, grace_s=args.grace) if args.steps else DrillPlan(grace_s=args.grace)
    )
    if (missing := job_available()) is not None:
        raise FleetvalError(missing)
    command = tuple(shlex.split(args.command)) if args.command else ()
    if command and faults:
        raise FleetvalError("--fault breaks the reference job on purpose; not with --command")
    with tempfile.TemporaryDirectory(prefix="fleetval-drill-") as scratch:
        root = Path(args.dir) if args.dir else Path(scratch)
        started = time.monotonic()
        subject = f"{'command' if command else 'reference-job'}@local"
        evidence = LocalDrill(plan, root, faults, command, subject).run()
        verdicts = judge_drill(evidence)
        emit(
            {
                "plan": plan.to_json(),
                "faults": [f"ckpt.{f}" for f in faults],
                "wall_s": round(time.monotonic() - started, 2),
                "verdicts": [v.to_json() for v in verdicts],
            }
        )
    return 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from alembic.util import CommandError

    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import current, upgrade

    engine = make_engine(args.db)
    try:
        upgrade(engine)
    except CommandError as exc:  # e.g. a revision this fleetval does not know: a newer store
        raise FleetvalError(f"cannot upgrade the store: {str(exc).splitlines()[0]}") from None
    emit({"db": engine.url.render_as_string(hide_password=True), "revision": current(engine)})
    return 0


def cmd_verdicts(args: argparse.Namespace) -> int:
    from fleetval.store.repository import Store

    store = Store(migrated_engine(args.db))
    run = store.find_run(args.run_key)
    if run is None:
        raise FleetvalError("no such run in the store" if args.run_key else "the store holds no runs yet")
    run_id, run_key = run
    rows = store.verdicts(run_id)
    if args.format == "json":
        emit({"run_id": run_id, "run_key": run_key, "verdicts": [verdict_json(v) for v in rows]})
        return 0
    shown = [r for r in rows if args.all or r["criterion"] != "D-DEV-04" or r["result"] != "pass"]
    header = ("subject", "criterion", "result", "action")
    table = [header] + [(r["subject"], r["criterion"], r["result"], r["action"]) for r in shown]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    print(f"run {run_key}")
    for row in table:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    # Per-GPU records (D-DEV-04) counted apart: a node verdict and a GPU record are not one unit.
    verdict_counts: dict[str, int] = {}
    gpu_counts: dict[str, int] = {}
    for r in rows:
        counts = gpu_counts if r["criterion"] == "D-DEV-04" else verdict_counts
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    hidden = len(rows) - len(shown)
    parts = [
        f"{what}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        for what, counts in (("verdicts", verdict_counts), ("GPU records", gpu_counts))
        if counts
    ]
    print("; ".join(parts) + (f" ({hidden} passing GPU records not shown)" if hidden else ""))
    print("each node's current state: fleetval nodes --db URL")
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    from fleetval.store import fleet_health

    grid = fleet_health.fleet_grid(migrated_engine(args.db))
    inv = grid.inventory
    nodes = [n for nodes in inv.by_rack.values() for n in nodes]
    rows: list[dict[str, Any]] = [
        {
            "node": node,
            "rack": inv.rack_of[node],
            "state": grid.state(node),
            "layers": {layer: grid.state(node, layer) for layer in grid.layers},
            "not_probed": inv.skipped.get(node),
        }
        for node in nodes
    ]
    if args.attention:
        rows = [r for r in rows if r["state"] != "pass" or r["not_probed"]]
    if args.format == "json":
        emit({"layers": list(grid.layers), "nodes": rows})
        return 0
    header = ("node", "rack", "state", *grid.layers, "note")
    table = [header] + [
        (
            r["node"],
            r["rack"],
            r["state"],
            *r["layers"].values(),
            f"not probed by the newest weekly sweep: {r['not_probed']}" if r["not_probed"] else "",
        )
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    states: dict[str, int] = {}
    for node in nodes:
        states[grid.state(node)] = states.get(grid.state(node), 0) + 1
    print(
        f"{len(nodes)} nodes in {len(inv.by_rack)} racks: "
        + ", ".join(
            f"{n} {k}"
            for k, n in sorted(states.items(), key=lambda kv: -fleet_health.SEVERITY.get(kv[0], -1))
        )
        + (f"; {len(inv.skipped)} not probed by the newest weekly sweep" if inv.skipped else "")
    )
    return 0


def cmd_criteria(args: argparse.Namespace) -> int:
    from fleetval.criteria import CATALOG_VERSION, CRITERIA, IMPLEMENTED_BY, criteria_markdown

    if args.format == "markdown":
        print(criteria_markdown(), end="")
        return 0

    emit(
        {
            "version": CATALOG_VERSION,
            "criteria": [
                {
                    "id": c.id,
                    "layer": c.layer,
                    "statement": c.statement,
                    "parameters": c.parameters,
                    "implemented_by": IMPLEMENTED_BY.get(c.id),
                }
                for c in CRITERIA
            ],
        }
    )
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def cmd_scenario_list(args: argparse.Namespace) -> int:
    from fleetval.kueue.suite import shipped

    emit([{"id": s.id, "title": s.title, "criteria": list(s.criteria)} for s in shipped()])
    return 0


def cmd_scenario_check(args: argparse.Namespace) -> int:
    """Validate scenario files (manifests against the Kueue CRDs) without touching a cluster."""
    from fleetval.kueue.suite import check_text

    emit([check_text(read_input(path), path) for path in args.files])
    return 0


def cmd_scenario_run(args: argparse.Namespace) -> int:
    """Run Kueue scenarios against the kubeconfig's cluster, or a simulated one started here.
    A scenario that fails is a verdict (exit 0); only a run that cannot start is an error."""
    from fleetval.kueue.suite import resolve, run_scenarios, shipped

    scenarios = [resolve(ref) for ref in args.scenarios] if args.scenarios else shipped()
    run_key = args.run_key or f"kueue/{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}"
    if not args.kubeconfig and not _simulator_installed():
        raise FleetvalError("no simulator installed to run the scenarios on: give --kubeconfig")
    store = None
    if args.db:
        from fleetval.store.engine import make_engine
        from fleetval.store.migrate import upgrade
        from fleetval.store.repository import Store

        engine = make_engine(args.db)
        upgrade(engine)
        store = Store(engine)
    options = {"image": args.image, "kueue_namespace": args.kueue_namespace}
    if args.kubeconfig:
        if args.fleet or args.fault:
            raise FleetvalError("--fleet and --fault shape the simulated cluster; not with --kubeconfig")
        from kubernetes import config

        api = config.new_client_from_config(config_file=args.kubeconfig, context=args.context)
        outcomes = run_scenarios(api, scenarios, run_key, store=store, **options)
    else:
        from fleetval.sim.cli import scenarios_on_sim

        outcomes = scenarios_on_sim(args, scenarios, run_key, store, options)
    emit(
        {
            "run_key": run_key,
            "scenarios": [o.to_json() for o in outcomes],
            "verdicts": [v.to_json() for o in outcomes for v in o.verdicts],
        }
    )
    return 0


def _simulator_installed() -> bool:
    """The simulator's commands (`sim`, `cluster`, scenarios on a simulated cluster) come with the
    simulator only: the product's commands work without it."""
    import importlib.util

    return importlib.util.find_spec("fleetval.sim") is not None


def build_parser() -> argparse.ArgumentParser:
    from fleetval.fleet.spec import MAX_GPUS

    simulator = _simulator_installed()
    parser = _Parser(prog="fleetval", description="GPU-fleet validation: parse, judge, simulate.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p_parse = sub.add_parser("parse", help="parse a tool's raw output into JSON")
    p_parse.add_argument("tool", choices=["dcgm", "nccl", "xid", "kueue", "mig", "gpu-operator"])
    p_parse.add_argument("file", help="raw output file, or - for stdin")
    p_parse.set_defaults(func=cmd_parse)

    p_judge = sub.add_parser("judge", help="judge a tool's raw output against policy")
    p_judge.add_argument("tool", choices=["dcgm", "nccl", "xid", "sharing", "operator"])
    p_judge.add_argument("file")
    p_judge.add_argument("--gate", choices=["onboarding", "weekly", "post-xid"], default="weekly")
    p_judge.add_argument("--node", default="node", type=text(253), help="subject node name for the verdicts")
    p_judge.add_argument(
        "--baseline", type=number_in(0.0, 100_000.0, low_open=True), help="nccl: baseline busbw in GB/s"
    )
    p_judge.add_argument(
        "--ranks", type=int_in(1, 10_000_000), help="nccl: number of ranks (overrides the output)"
    )
    p_judge.add_argument("--fabric", choices=["ib", "roce"], help="nccl: the fabric the profile declares")
    p_judge.add_argument(
        "--gpus",
        type=int_in(1, MAX_GPUS),
        help="dcgm: the node's GPU count; a report that does not cover every GPU cannot pass",
    )
    p_judge.add_argument("--markers", type=text(4096), help="operator: `ls /run/nvidia/validations` output")
    p_judge.add_argument("--operator-log", type=text(4096), help="operator: the gpu-operator pod's log")
    p_judge.add_argument(
        "--validator-log",
        action="append",
        default=[],
        type=text(4096),
        help="operator: CONTAINER=FILE, a validation container's log (repeatable)",
    )
    p_judge.add_argument(
        "--fail-exit-code",
        action="store_true",
        help="exit with the worst verdict: 3 fail, 4 error, 5 inconclusive (0: pass or warn)",
    )
    p_judge.set_defaults(func=cmd_judge)

    p_db = sub.add_parser("db", help="database schema")
    db_sub = p_db.add_subparsers(dest="db_command", required=True)
    p_up = db_sub.add_parser("upgrade", help="apply migrations")
    p_up.add_argument(
        "--db",
        required=True,
        type=db_url,
        help="SQLAlchemy URL, e.g. postgresql+psycopg2://… or sqlite:///f.db",
    )
    p_up.set_defaults(func=cmd_db_upgrade)

    if simulator:  # in this place: `fleetval --help` lists the groups in the order added
        from fleetval.sim.cli import register as register_sim

        register_sim(sub)

    p_mig = sub.add_parser("mig", help="the MIG profile catalog and layout checks")
    mig_sub = p_mig.add_subparsers(dest="mig_command", required=True, parser_class=_Parser)
    p_mig_cat = mig_sub.add_parser("catalog", help="MIG profiles per GPU (all, or --gpu)")
    p_mig_cat.add_argument("--gpu", type=text(253), help="a GPU name or GFD product label")
    p_mig_cat.set_defaults(func=cmd_mig_catalog)
    p_mig_check = mig_sub.add_parser("check", help="is this MIG layout allowed on this GPU, and why not")
    p_mig_check.add_argument("--gpu", required=True, type=text(253), help="a GPU name or GFD product label")
    p_mig_check.add_argument(
        "profiles", nargs="+", type=text(64), help="profiles, e.g. 3g.40gb 1g.10gb 1g.10gb"
    )
    p_mig_check.set_defaults(func=cmd_mig_check)

    p_scn = sub.add_parser("scenario", help="Kueue contention scenarios (the scheduling layer)")
    scn_sub = p_scn.add_subparsers(dest="scenario_command", required=True, parser_class=_Parser)
    p_scn_list = scn_sub.add_parser("list", help="the shipped scenarios")
    p_scn_list.set_defaults(func=cmd_scenario_list)
    p_scn_check = scn_sub.add_parser("check", help="validate scenario files against the Kueue CRDs")
    p_scn_check.add_argument("files", nargs="+", help="scenario YAML files")
    p_scn_check.set_defaults(func=cmd_scenario_check)
    p_scn_run = scn_sub.add_parser(
        "run", help="run scenarios (default: all shipped) against a cluster, or a simulated one"
    )
    p_scn_run.add_argument("scenarios", nargs="*", help="scenario files or shipped scenario ids")
    p_scn_run.add_argument("--kubeconfig", type=text(4096), help="the cluster (default: a simulated one)")
    p_scn_run.add_argument("--context", type=text(253), help="kubeconfig context")
    p_scn_run.add_argument("--fleet", type=text(4096), help="simulated cluster: fleet spec (default: demo)")
    p_scn_run.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=["kueue.no_reclaim", "kueue.no_borrowing", "kueue.partial_gang", "kueue.wrong_reason"],
        help="simulated cluster: a Kueue fault to inject (repeatable)",
    )
    p_scn_run.add_argument("--db", type=db_url, help="store the run records and verdicts here")
    p_scn_run.add_argument("--run-key", type=text(250))
    p_scn_run.add_argument(
        "--image", type=text(512), help="the jobs' image (default: Kubernetes' e2e busybox; a mirror)"
    )
    p_scn_run.add_argument(
        "--kueue-namespace", type=text(63), default="kueue-system", help="where Kueue's manager runs"
    )
    p_scn_run.set_defaults(func=cmd_scenario_run)

    p_drill = sub.add_parser("drill", help="checkpoint save/resume drills (the job layer)")
    drill_sub = p_drill.add_subparsers(dest="drill_command", required=True, parser_class=_Parser)
    p_drill_run = drill_sub.add_parser(
        "run", help="run the checkpoint drill here with the reference job; prints D-JOB-CKPT verdicts"
    )
    p_drill_run.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=[f"ckpt.{f}" for f in CKPT_FAULTS],
        help="break the reference job on purpose (repeatable)",
    )
    p_drill_run.add_argument(
        "--steps", type=int_in(6, 100_000), help="steps per run (default 150; saves every third of it)"
    )
    p_drill_run.add_argument(
        "--grace", type=number_in(0.5, 3600.0), default=30.0, help="SIGTERM grace period, s (default 30)"
    )
    p_drill_run.add_argument(
        "--command", type=text(4096), help="drill this command instead (it must follow the drill contract)"
    )
    p_drill_run.add_argument(
        "--dir", type=text(4096), help="checkpoint directories here (default: a temporary one)"
    )
    p_drill_run.set_defaults(func=cmd_drill_run)

    p_ver = sub.add_parser("verdicts", help="show the verdicts of a run (default: the latest)")
    p_ver.add_argument("--db", required=True, type=db_url)
    p_ver.add_argument("--run-key", type=text(250))
    p_ver.add_argument("--format", choices=["table", "json"], default="table")
    p_ver.add_argument("--all", action="store_true", help="table: include passing per-GPU records")
    p_ver.set_defaults(func=cmd_verdicts)

    p_nodes = sub.add_parser(
        "nodes", help="each node's current state per layer: the fleet page's rule, on the console"
    )
    p_nodes.add_argument("--db", required=True, type=db_url)
    p_nodes.add_argument("--format", choices=["table", "json"], default="table")
    p_nodes.add_argument("--attention", action="store_true", help="only nodes not passing (or not probed)")
    p_nodes.set_defaults(func=cmd_nodes)

    if simulator:
        from fleetval.sim.cli import register_cluster

        register_cluster(sub)

    from fleetval.metrics.cli import add_parser as add_metrics_parser

    add_metrics_parser(sub, db_url=db_url, int_in=int_in, open_store=migrated_engine)

    p_crit = sub.add_parser("criteria", help="list the criteria catalog")
    p_crit.add_argument("--format", choices=["json", "markdown"], default="json")
    p_crit.set_defaults(func=cmd_criteria)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _run(argv)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except KeyboardInterrupt:  # during start-up (building the parser, its imports) too
        _error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader (`| head`) has what it wanted. As Python's docs on SIGPIPE advise: point
        # stdout at devnull so the exit's flush cannot fail again, and end quietly.
        with contextlib.suppress(OSError, ValueError):  # no file descriptor: a test's capture
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error already reported on one line
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    from sqlalchemy.exc import SQLAlchemyError

    from fleetval.store.engine import outage_as_error

    try:
        with outage_as_error():
            return int(args.func(args))
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except (FleetvalError, ValueError, KeyError) as exc:
        _error(_first_line(exc))
    except RecursionError:
        _error("the input is nested too deeply to read")
    except MemoryError:
        _error("out of memory reading the input")
    except OSError as exc:
        _error(f"{exc.strerror or _first_line(exc)}" + (f": {exc.filename}" if exc.filename else ""))
    except SQLAlchemyError as exc:  # not an outage (that is StoreUnavailable): a refusal
        _error(f"the store refused the request: {_first_line(getattr(exc, 'orig', None) or exc)}")
    except Exception as exc:  # the contract is one line, even for a bug
        _error(f"unexpected {type(exc).__name__}: {_first_line(exc)}")
    return EXIT_FAILED


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
