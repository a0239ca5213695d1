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
import io
import json
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from fleetval.ckpt.contract import FAULTS as CKPT_FAULTS
from fleetval.errors import FleetvalError, ParseError

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from fleetval.fleet.spec import FleetSpec

EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
# `judge --fail-exit-code`: the worst verdict as the exit status, for shell scripts (0: pass or warn).
VERDICT_EXIT_CODES = {"fail": 3, "error": 4, "inconclusive": 5}
MIB = 1024 * 1024
# A tool's output (a DCGM report, an NCCL log, a kernel log) is far below this; /dev/zero is not.
MAX_INPUT_BYTES = 256 * MIB


def _read(path: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The text of `path` (or stdin for -), at most `limit` bytes; bytes that are not UTF-8 are
    kept (surrogateescape), newlines read as text mode reads them."""
    try:
        if path == "-":
            stdin = getattr(sys.stdin, "buffer", None)
            data = (
                stdin.read(limit + 1)
                if stdin is not None
                else sys.stdin.read(limit + 1).encode("utf-8", "surrogateescape")
            )
        else:
            with open(path, "rb") as file:
                data = file.read(limit + 1)
    except OSError as exc:
        raise FleetvalError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise FleetvalError(f"cannot read {path}: larger than {limit / MIB:g} MiB")
    with io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as text:
        return text.read()


def _read_spec(path: str) -> FleetSpec:
    from fleetval.fleet.spec import MAX_SPEC_CHARS, load_fleet_spec

    return load_fleet_spec(_read(path, limit=MAX_SPEC_CHARS))


def _migrated_engine(url: str) -> Engine:
    """An engine on a store that exists and has this fleetval's schema (commands that only read
    or add rows never create a store or change its schema)."""
    from alembic.script import ScriptDirectory

    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import MIGRATIONS, current

    engine = make_engine(url)
    database = engine.url.database
    # Connecting to a missing SQLite file would create an empty one.
    is_file_store = engine.url.get_backend_name() == "sqlite" and database not in (None, "", ":memory:")
    if is_file_store and not Path(str(database)).is_file():
        raise FleetvalError(f"no fleetval store at {database}: create it with `fleetval db upgrade --db URL`")
    have = current(engine)
    want = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    if have is None:
        raise FleetvalError("the database holds no fleetval store yet: run `fleetval db upgrade --db URL`")
    if have != want:
        raise FleetvalError(
            f"the store's schema is at revision {have}, this fleetval reads {want}: run "
            "`fleetval db upgrade --db URL` (a store newer than this fleetval needs a newer fleetval)"
        )
    return engine


def _emit(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def cmd_parse(args: argparse.Namespace) -> int:
    text = _read(args.file)
    if args.tool == "dcgm":
        from fleetval.dcgm.parser import parse_dcgm

        _emit(parse_dcgm(text).to_json())
    elif args.tool == "nccl":
        from fleetval.nccl.parser import parse_nccl

        _emit(parse_nccl(text).to_json())
    elif args.tool == "mig":
        from fleetval.mig.parser import parse_mig

        _emit(parse_mig(text))
    elif args.tool == "gpu-operator":
        _emit(_parse_gpu_operator(text))
    elif args.tool == "kueue":
        from fleetval.kueue.parse import parse_workload
        from fleetval.kueue.reasons import detect_mode, waiting_reason

        workload = parse_workload(text)
        _emit(
            {
                "workload": workload,
                "waiting_reason": waiting_reason(workload, dt.datetime.now(dt.UTC)).to_json(),
                "reason_mode": detect_mode([workload]),
            }
        )
    else:
        from fleetval.xid.parser import parse_xid, xid_log_to_json

        _emit(xid_log_to_json(parse_xid(text)))
    return 0


def cmd_judge(args: argparse.Namespace) -> int:
    """Unreadable evidence is judged too (inconclusive), never an error exit: the judges take the
    parse error in place of the parsed output. With --fail-exit-code the worst verdict is the exit
    status (VERDICT_EXIT_CODES: fail before error before inconclusive; pass and warn exit 0)."""
    judged = _judge(args)
    _emit(judged)
    if not args.fail_exit_code:
        return 0
    results = {str(verdict.get("result")) for verdict in judged.get("verdicts") or []}
    return next((code for result, code in VERDICT_EXIT_CODES.items() if result in results), 0)


def _judge(args: argparse.Namespace) -> dict[str, Any]:
    text = _read(args.file)
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
        validator[container] = parse.parse_validator_log(_read(path))
    return judge_operands(
        args.node,
        pods,
        markers=parse.parse_markers(_read(args.markers)) if args.markers else None,
        operator_log=parse.parse_operator_log(_read(args.operator_log)) if args.operator_log else None,
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
    _emit({name: gpu.to_json() for name, gpu in gpus.items()})
    return 0


def cmd_mig_check(args: argparse.Namespace) -> int:
    """Whether a MIG layout is allowed on a GPU; a refused layout is an answer (exit 0), not an error."""
    from fleetval.mig.catalog import check_layout, gpu_for

    gpu = gpu_for(args.gpu)
    _emit({"gpu": gpu.name, "profiles": list(args.profiles), **check_layout(gpu, args.profiles).to_json()})
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
        _emit(
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
    _emit({"db": engine.url.render_as_string(hide_password=True), "revision": current(engine)})
    return 0


def cmd_sim_run(args: argparse.Namespace) -> int:
    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import upgrade
    from fleetval.store.repository import Store

    spec = _read_spec(args.fleet)
    if args.reference and args.suite != "nccl":
        raise FleetvalError("--reference names baseline nodes for --suite nccl only")
    for node in args.reference:
        spec.profile_of(node)  # an unknown node is an error now, not after Airflow has started
    _default_budgets(args)
    engine = make_engine(args.db)
    upgrade(engine)
    Store(engine).remember_fleet(spec.name, spec.seed, spec.raw)
    if args.suite == "weekly":
        conf = {
            "dry_run": bool(args.dry_run),
            "max_fleet_fraction": args.max_fleet_fraction,
            "max_rack_fraction": args.max_rack_fraction,
            "max_action_fraction": args.max_action_fraction,
        }
        return _sim_dag(args, spec, "weekly_health_sweep", conf)
    if args.suite == "xid":
        from fleetval.xid.simulated_source import inject_spec_faults

        conf = {
            "dry_run": bool(args.dry_run),
            "max_fleet_fraction": args.max_action_fraction,
            "max_rack_fraction": args.max_rack_fraction,
        }

        def deliver(_airflow: Any) -> dict[str, Any]:  # once Airflow is up: time-to-cordon starts here
            at = dt.datetime.now(dt.UTC)
            inject_spec_faults(engine, spec, at=at, tag=args.run_key or f"{at:%Y%m%dT%H%M%S.%f}")
            return {}

        return _sim_dag(args, spec, "xid_remediation", conf, before_trigger=deliver)
    conf = {"nodes": [], "repeats": 3, "dry_run": bool(args.dry_run)}
    return _sim_dag(
        args,
        spec,
        "post_upgrade_nccl_sweep",
        conf,
        before_trigger=lambda airflow: _nccl_reference_baselines(args, spec, Store(engine), airflow),
    )


def _default_budgets(args: argparse.Namespace) -> None:
    """Fill the budgets not given with the defaults the suite's DAG uses."""
    from fleetval.policy.blast_radius import ActionBudget, DiagnosisBudget
    from fleetval.xid.steps import XidBreaker

    if args.suite == "xid":
        breaker = XidBreaker()
        defaults = {
            "max_action_fraction": breaker.max_fleet_fraction,
            "max_rack_fraction": breaker.max_rack_fraction,
        }
    else:
        defaults = {
            "max_fleet_fraction": DiagnosisBudget().max_fleet_fraction,
            "max_rack_fraction": DiagnosisBudget().max_rack_fraction,
            "max_action_fraction": ActionBudget().max_fleet_fraction,
        }
    for name in ("max_fleet_fraction", "max_rack_fraction", "max_action_fraction"):
        if getattr(args, name) is None:
            setattr(args, name, defaults.get(name, DiagnosisBudget().max_fleet_fraction))


DEFER_MIN_TIME_SCALE = 0.2  # r2's 150 s × 0.2 = 30 s


def _sim_dag(
    args: argparse.Namespace,
    spec: Any,
    dag_id: str,
    conf: dict[str, Any],
    *,
    before_trigger: Callable[[Any], dict[str, Any]] | None = None,
) -> int:
    """A suite as production runs it: its DAG on a local Airflow, probes as pods of the simulated
    cluster served on 127.0.0.1 for the run."""
    import tempfile

    from fleetval.sim.airflow_run import LocalAirflow
    from fleetval.sim.kube.cluster import SimKubeCluster
    from fleetval.sim.kube.server import KubeApiServer
    from fleetval.store.engine import make_engine
    from fleetval.store.repository import Store

    engine = make_engine(args.db)
    if args.reset:
        SimKubeCluster(spec, engine).reset()
    server = KubeApiServer(SimKubeCluster(spec, engine, time_scale=args.time_scale))
    server.start()
    with tempfile.TemporaryDirectory(prefix="fleetval-sim-run-") as tmp:
        home = Path(tmp)
        # Deferral only when a simulated r2 lasts long enough (≥ 30 s) not to race Airflow's
        # report of the deferral itself (see LocalAirflow.deferrable_probes).
        airflow = LocalAirflow(
            home,
            args.db,
            server.write_kubeconfig(home / "kubeconfig"),
            deferrable_probes=args.time_scale >= DEFER_MIN_TIME_SCALE,
            remove_home_if_orphaned=True,
        )
        try:
            airflow.start()
            extra = before_trigger(airflow) if before_trigger is not None else {}
            run_id = airflow.trigger(dag_id, conf, run_id=args.run_key)
            state = airflow.wait_run(dag_id, run_id)
        finally:
            airflow.stop()
            server.stop()
    store = Store(engine)
    run_key = f"{dag_id}/{run_id}"
    fv_run = store.run_id(run_key)
    verdicts = store.verdicts(fv_run) if fv_run is not None else []
    _emit(
        {
            "run_key": run_key,
            "airflow_state": state,
            **extra,
            "verdicts": [_verdict_json(v) for v in verdicts],
        }
    )
    return 0 if state == "success" else EXIT_FAILED


def _nccl_reference_baselines(
    args: argparse.Namespace, spec: Any, store: Any, airflow: Any
) -> dict[str, Any]:
    """`--reference` nodes: the sweep DAG measures them first (a dry run), and their measurements
    become the promoted baselines (as onboarding does): verdicts are only ever judged against
    measured baselines. Without reference nodes, busbw verdicts are inconclusive."""
    from fleetval.nccl import baselines as nccl_baselines
    from fleetval.nccl import plan as nccl_plan

    if not args.reference:
        return {"baselines": []}
    dag_id = "post_upgrade_nccl_sweep"
    reference_conf = {"nodes": list(args.reference), "repeats": 1, "dry_run": True}
    run_id = airflow.trigger(
        dag_id, reference_conf, run_id=f"{args.run_key}-reference" if args.run_key else None
    )
    state = airflow.wait_run(dag_id, run_id, timeout_s=1800)
    ref_run = store.run_id(f"{dag_id}/{run_id}")
    if state != "success" or ref_run is None:
        raise FleetvalError(f"the reference run {run_id} ended {state}: no baseline to judge against")
    baselines = []
    profiles = {spec.profile_of(n).name: spec.profile_of(n) for n in args.reference}
    for _name, profile in sorted(profiles.items()):
        # On a cluster a node's profile is GPU feature discovery's product label.
        for scope in (nccl_plan.intra_scope(profile.gpus), nccl_plan.inter_scope(profile.gpus)):
            made = nccl_baselines.establish_baseline(store, ref_run, profile.gpu_product, scope)
            store.promote_baseline(made.baseline_id)
            baselines.append(
                {
                    "profile": profile.gpu_product,
                    "scope": scope,
                    "id": made.baseline_id,
                    "version": made.version,
                    "busbw_gbps": made.value,
                }
            )
    return {"reference_run_key": f"{dag_id}/{run_id}", "baselines": baselines}


def cmd_sim_serve(args: argparse.Namespace) -> int:
    """Serve the simulated cluster's Kubernetes API until interrupted."""
    import signal
    import threading

    from fleetval.sim.kube.cluster import SimKubeCluster
    from fleetval.sim.kube.server import KubeApiServer
    from fleetval.sim.kube.tls import server_tls
    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import upgrade
    from fleetval.store.repository import Store

    spec = _read_spec(args.fleet)
    state_dir = Path(args.state_dir)
    if state_dir.exists() and not state_dir.is_dir():
        raise FleetvalError(f"--state-dir {state_dir} is a file, not a folder")
    kubeconfig_path = Path(args.kubeconfig or state_dir / f"{spec.name}.kubeconfig")
    if args.kubeconfig and not kubeconfig_path.parent.is_dir():
        raise FleetvalError(
            f"--kubeconfig {kubeconfig_path}: the folder {kubeconfig_path.parent} does not exist"
        )
    db = args.db or f"sqlite:///{(state_dir / (spec.name + '.db')).resolve()}"
    state_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(db)
    upgrade(engine)
    Store(engine).remember_fleet(spec.name, spec.seed, spec.raw)
    cluster = SimKubeCluster(spec, engine, time_scale=args.time_scale)
    if args.reset:
        cluster.reset()
    # HTTPS: kubectl sends the kubeconfig's bearer token over https only
    server = KubeApiServer(cluster, port=args.port, token=args.token, tls=server_tls(state_dir))
    server.start()
    stop = threading.Event()
    try:
        # The handler before the line a caller waits for: a SIGTERM right after it still saves state.
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        kubeconfig = server.write_kubeconfig(kubeconfig_path)
        _emit({"fleet": spec.name, "server": server.url, "kubeconfig": str(kubeconfig), "db": db})
        sys.stdout.flush()
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def cmd_sim_load(args: argparse.Namespace) -> int:
    """Load a fleet spec into the store the simulated cluster keeps its state in (what
    `sim serve` does first); `--reset` drops the state a previous server left."""
    from fleetval.sim.kube.cluster import SimKubeCluster
    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import upgrade
    from fleetval.store.repository import Store

    spec = _read_spec(args.fleet)
    engine = make_engine(args.db)
    upgrade(engine)
    Store(engine).remember_fleet(spec.name, spec.seed, spec.raw)
    cluster = SimKubeCluster(spec, engine)
    if args.reset:
        cluster.reset()
    cluster.start()
    _emit({"fleet": spec.name, "nodes": len(spec.nodes()), "faults": len(spec.faults)})
    return 0


def cmd_verdicts(args: argparse.Namespace) -> int:
    from fleetval.store.repository import Store

    store = Store(_migrated_engine(args.db))
    run = store.find_run(args.run_key)
    if run is None:
        raise FleetvalError("no such run in the store" if args.run_key else "the store holds no runs yet")
    run_id, run_key = run
    rows = store.verdicts(run_id)
    if args.format == "json":
        _emit({"run_id": run_id, "run_key": run_key, "verdicts": [_verdict_json(v) for v in rows]})
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

    grid = fleet_health.fleet_grid(_migrated_engine(args.db))
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
        _emit({"layers": list(grid.layers), "nodes": rows})
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


def cmd_sim_inject_xid(args: argparse.Namespace) -> int:
    from fleetval.fleet.spec import load_fleet_spec
    from fleetval.store.repository import Store
    from fleetval.xid.simulated_source import inject

    at = dt.datetime.now(dt.UTC)
    engine = _migrated_engine(args.db)
    if Path(args.fleet).is_file():
        spec = _read_spec(args.fleet)
    else:
        saved = Store(engine).fleet_spec(args.fleet)
        if saved is None:
            raise FleetvalError(
                f"no simulated fleet {args.fleet!r} in this store: give its spec file, "
                "or `fleetval sim serve` / `sim load` it first"
            )
        spec = load_fleet_spec(saved)
    nodes = args.node or []
    delivered = inject(
        engine,
        spec,
        [(n, args.code, args.gpu, args.count) for n in nodes],
        at=at,
        tag=args.tag or f"{at:%Y%m%dT%H%M%S.%f}",
    )
    _emit({"fleet": spec.name, "nodes": len(nodes), "lines": delivered})
    return 0


def cmd_criteria(args: argparse.Namespace) -> int:
    from fleetval.criteria import CATALOG_VERSION, CRITERIA, IMPLEMENTED_BY, criteria_markdown

    if args.format == "markdown":
        print(criteria_markdown(), end="")
        return 0

    _emit(
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


def _verdict_json(row: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "criterion",
        "subject",
        "node",
        "result",
        "action",
        "rule_id",
        "reason",
        "evidence",
        "judged_against",
        "probe_id",
        "run_id",
    )
    return {k: row[k] for k in keys}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


# Argument types: a bad value is a usage error naming the option, before anything runs.
def _db_url(text: str) -> str:
    from fleetval.store.engine import StoreUrlError, store_url

    try:
        store_url(text)
    except StoreUrlError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


# Airflow's default allowed_run_id_pattern; 200 leaves room for the waves' suffixes in 250.
_RUN_ID = re.compile(r"[A-Za-z0-9_.~:+-]{1,200}")


def _run_key(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    if not _RUN_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            "a run key is 1-200 of A-Z a-z 0-9 _ . ~ : + - (it names the Airflow run)"
        )
    return text


def _int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text[:40]!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {low}..{high}, got {value}")
        return value

    return parse


def _number_in(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text[:40]!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text[:40]!r}")
        if value > high or value < low or (low_open and value == low):
            bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"
            raise argparse.ArgumentTypeError(f"must be in {bounds}, got {value:g}")
        return value

    return parse


def _text(max_chars: int) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError("must not be empty")
        if len(text) > max_chars:
            raise argparse.ArgumentTypeError(f"at most {max_chars} characters, got {len(text)}")
        if not text.isprintable():
            raise argparse.ArgumentTypeError(f"must be printable, got {text[:40]!r}")
        return text

    return parse


def cmd_scenario_list(args: argparse.Namespace) -> int:
    from fleetval.kueue.suite import shipped

    _emit([{"id": s.id, "title": s.title, "criteria": list(s.criteria)} for s in shipped()])
    return 0


def cmd_scenario_check(args: argparse.Namespace) -> int:
    """Validate scenario files (manifests against the Kueue CRDs) without touching a cluster."""
    from fleetval.kueue.suite import check_text

    _emit([check_text(_read(path), path) for path in args.files])
    return 0


def cmd_scenario_run(args: argparse.Namespace) -> int:
    """Run Kueue scenarios against the kubeconfig's cluster, or a simulated one started here.
    A scenario that fails is a verdict (exit 0); only a run that cannot start is an error."""
    from fleetval.kueue.suite import resolve, run_scenarios, shipped

    scenarios = [resolve(ref) for ref in args.scenarios] if args.scenarios else shipped()
    run_key = args.run_key or f"kueue/{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}"
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
        outcomes = _scenarios_on_sim(args, scenarios, run_key, store, options)
    _emit(
        {
            "run_key": run_key,
            "scenarios": [o.to_json() for o in outcomes],
            "verdicts": [v.to_json() for o in outcomes for v in o.verdicts],
        }
    )
    return 0


def _scenarios_on_sim(
    args: argparse.Namespace, scenarios: list[Any], run_key: str, store: Any, options: dict[str, Any]
) -> list[Any]:
    import tempfile

    import yaml
    from kubernetes import config

    from fleetval.fleet.spec import load_fleet_spec
    from fleetval.kueue.suite import run_scenarios
    from fleetval.sim.kube.cluster import SimKubeCluster
    from fleetval.sim.kube.server import KubeApiServer

    spec = _read_spec(args.fleet) if args.fleet else _demo_spec()
    if args.fault:
        raw = dict(spec.raw)
        raw["faults"] = [*(raw.get("faults") or []), *({"kind": kind} for kind in args.fault)]
        spec = load_fleet_spec(yaml.safe_dump(raw))
    server = KubeApiServer(SimKubeCluster(spec, None, time_scale=0.0))
    server.start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            kubeconfig = server.write_kubeconfig(Path(folder) / "kubeconfig")
            api = config.new_client_from_config(config_file=str(kubeconfig))
            return run_scenarios(api, scenarios, run_key, store=store, fleet=spec.name, **options)
    finally:
        server.stop()


def _demo_spec() -> FleetSpec:
    import importlib.resources

    from fleetval.fleet.spec import load_fleet_spec

    return load_fleet_spec(importlib.resources.files("fleetval.sim").joinpath("fleets/demo.yaml").read_text())


def build_parser() -> argparse.ArgumentParser:
    from fleetval.fleet.spec import MAX_GPUS, MAX_XID_COUNT, XID_CODES

    fraction = _number_in(0.0, 1.0, low_open=True)
    time_scale = _number_in(0.0, 100.0)
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
    p_judge.add_argument("--node", default="node", type=_text(253), help="subject node name for the verdicts")
    p_judge.add_argument(
        "--baseline", type=_number_in(0.0, 100_000.0, low_open=True), help="nccl: baseline busbw in GB/s"
    )
    p_judge.add_argument(
        "--ranks", type=_int_in(1, 10_000_000), help="nccl: number of ranks (overrides the output)"
    )
    p_judge.add_argument("--fabric", choices=["ib", "roce"], help="nccl: the fabric the profile declares")
    p_judge.add_argument(
        "--gpus",
        type=_int_in(1, MAX_GPUS),
        help="dcgm: the node's GPU count; a report that does not cover every GPU cannot pass",
    )
    p_judge.add_argument("--markers", type=_text(4096), help="operator: `ls /run/nvidia/validations` output")
    p_judge.add_argument("--operator-log", type=_text(4096), help="operator: the gpu-operator pod's log")
    p_judge.add_argument(
        "--validator-log",
        action="append",
        default=[],
        type=_text(4096),
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
        type=_db_url,
        help="SQLAlchemy URL, e.g. postgresql+psycopg2://… or sqlite:///f.db",
    )
    p_up.set_defaults(func=cmd_db_upgrade)

    p_sim = sub.add_parser("sim", help="the fleet simulator")
    sim_sub = p_sim.add_subparsers(dest="sim_command", required=True)
    p_run = sim_sub.add_parser(
        "run",
        help="run a suite on a simulated fleet (weekly, xid: its DAGs on a local Airflow)",
    )
    p_run.add_argument("fleet", help="fleet spec YAML")
    p_run.add_argument("--db", required=True, type=_db_url)
    p_run.add_argument(
        "--suite",
        choices=["weekly", "xid", "nccl"],
        default="weekly",
        help="weekly: DCGM r2 sweep; xid: deliver the spec's xid faults and remediate; "
        "nccl: post-upgrade NCCL sweep",
    )
    p_run.add_argument(
        "--reference",
        action="append",
        default=[],
        type=_text(253),
        help="nccl: a reference node measured and promoted as the baseline first (repeatable)",
    )
    p_run.add_argument(
        "--run-key",
        type=_run_key,
        help="names the DAG run: the same key resumes the same stored run, without duplicates",
    )
    p_run.add_argument("--dry-run", action="store_true", help="record node actions without applying them")
    p_run.add_argument("--reset", action="store_true", help="reset the simulated cluster state from the spec")
    p_run.add_argument(
        "--time-scale", type=time_scale, default=0.0, help="simulated tool run time × this (0: instant)"
    )
    # Budgets default to the DAGs' own defaults for the suite (weekly: the diagnosis and action
    # budgets; xid: the Xid breaker), so the CLI and the scheduled runs act alike.
    p_run.add_argument(
        "--max-fleet-fraction", type=fraction, help="weekly: most of the fleet under diagnosis at once"
    )
    p_run.add_argument(
        "--max-rack-fraction", type=fraction, help="most of one rack under diagnosis or acted on"
    )
    p_run.add_argument("--max-action-fraction", type=fraction, help="most of the fleet cordoned by one run")
    p_run.set_defaults(func=cmd_sim_run)

    p_serve = sim_sub.add_parser("serve", help="serve the simulated fleet as a Kubernetes API on 127.0.0.1")
    p_serve.add_argument("fleet", help="fleet spec YAML")
    p_serve.add_argument(
        "--port", type=_int_in(0, 65535), default=0, help="port (default: a free one, printed)"
    )
    p_serve.add_argument(
        "--db", type=_db_url, help="store for the cluster's state (default: sqlite in --state-dir)"
    )
    p_serve.add_argument(
        "--state-dir",
        type=_text(4096),
        default=".fleetval-sim",
        help="where the kubeconfig and default store go",
    )
    p_serve.add_argument(
        "--kubeconfig",
        type=_text(4096),
        help="write the kubeconfig here (default: STATE_DIR/FLEET.kubeconfig)",
    )
    p_serve.add_argument(
        "--token",
        type=_text(4096),
        help="bearer token the server accepts (default: random, in the kubeconfig)",
    )
    p_serve.add_argument(
        "--time-scale",
        type=time_scale,
        default=0.01,
        help="simulated tool run time × this (0: instant probes; 1: as long as on real hardware)",
    )
    p_serve.add_argument("--reset", action="store_true", help="start from the spec, dropping saved state")
    p_serve.set_defaults(func=cmd_sim_serve)

    p_load = sim_sub.add_parser("load", help="load a fleet spec into the simulated cluster")
    p_load.add_argument("fleet")
    p_load.add_argument("--db", required=True, type=_db_url)
    p_load.add_argument(
        "--reset", action="store_true", help="reset cluster state (cordons, labels) from the spec"
    )
    p_load.set_defaults(func=cmd_sim_load)

    p_inj = sim_sub.add_parser("inject-xid", help="deliver Xid kernel lines for nodes to the Xid inbox")
    p_inj.add_argument("fleet", help="a fleet spec YAML, or the name of a fleet served from this store")
    p_inj.add_argument("--db", required=True, type=_db_url)
    p_inj.add_argument(
        "--node", action="append", required=True, type=_text(253), help="node name (repeatable)"
    )
    p_inj.add_argument(
        "--code", type=_int_in(XID_CODES.start, XID_CODES.stop - 1), required=True, help="Xid number"
    )
    p_inj.add_argument("--gpu", type=_int_in(0, MAX_GPUS - 1), default=0)
    p_inj.add_argument("--count", type=_int_in(1, MAX_XID_COUNT), default=1)
    p_inj.add_argument("--tag", type=_text(100), help="delivery id (same tag again delivers nothing new)")
    p_inj.set_defaults(func=cmd_sim_inject_xid)

    p_mig = sub.add_parser("mig", help="the MIG profile catalog and layout checks")
    mig_sub = p_mig.add_subparsers(dest="mig_command", required=True, parser_class=_Parser)
    p_mig_cat = mig_sub.add_parser("catalog", help="MIG profiles per GPU (all, or --gpu)")
    p_mig_cat.add_argument("--gpu", type=_text(253), help="a GPU name or GFD product label")
    p_mig_cat.set_defaults(func=cmd_mig_catalog)
    p_mig_check = mig_sub.add_parser("check", help="is this MIG layout allowed on this GPU, and why not")
    p_mig_check.add_argument("--gpu", required=True, type=_text(253), help="a GPU name or GFD product label")
    p_mig_check.add_argument(
        "profiles", nargs="+", type=_text(64), help="profiles, e.g. 3g.40gb 1g.10gb 1g.10gb"
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
    p_scn_run.add_argument("--kubeconfig", type=_text(4096), help="the cluster (default: a simulated one)")
    p_scn_run.add_argument("--context", type=_text(253), help="kubeconfig context")
    p_scn_run.add_argument("--fleet", type=_text(4096), help="simulated cluster: fleet spec (default: demo)")
    p_scn_run.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=["kueue.no_reclaim", "kueue.no_borrowing", "kueue.partial_gang", "kueue.wrong_reason"],
        help="simulated cluster: a Kueue fault to inject (repeatable)",
    )
    p_scn_run.add_argument("--db", type=_db_url, help="store the run records and verdicts here")
    p_scn_run.add_argument("--run-key", type=_text(250))
    p_scn_run.add_argument(
        "--image", type=_text(512), help="the jobs' image (default: Kubernetes' e2e busybox; a mirror)"
    )
    p_scn_run.add_argument(
        "--kueue-namespace", type=_text(63), default="kueue-system", help="where Kueue's manager runs"
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
        "--steps", type=_int_in(6, 100_000), help="steps per run (default 150; saves every third of it)"
    )
    p_drill_run.add_argument(
        "--grace", type=_number_in(0.5, 3600.0), default=30.0, help="SIGTERM grace period, s (default 30)"
    )
    p_drill_run.add_argument(
        "--command", type=_text(4096), help="drill this command instead (it must follow the drill contract)"
    )
    p_drill_run.add_argument(
        "--dir", type=_text(4096), help="checkpoint directories here (default: a temporary one)"
    )
    p_drill_run.set_defaults(func=cmd_drill_run)

    p_ver = sub.add_parser("verdicts", help="show the verdicts of a run (default: the latest)")
    p_ver.add_argument("--db", required=True, type=_db_url)
    p_ver.add_argument("--run-key", type=_text(250))
    p_ver.add_argument("--format", choices=["table", "json"], default="table")
    p_ver.add_argument("--all", action="store_true", help="table: include passing per-GPU records")
    p_ver.set_defaults(func=cmd_verdicts)

    p_nodes = sub.add_parser(
        "nodes", help="each node's current state per layer: the fleet page's rule, on the console"
    )
    p_nodes.add_argument("--db", required=True, type=_db_url)
    p_nodes.add_argument("--format", choices=["table", "json"], default="table")
    p_nodes.add_argument("--attention", action="store_true", help="only nodes not passing (or not probed)")
    p_nodes.set_defaults(func=cmd_nodes)

    from fleetval.sim.controlplane.cli import add_parser as add_cluster_parser

    add_cluster_parser(sub, time_scale=time_scale, text=_text)

    from fleetval.metrics.cli import add_parser as add_metrics_parser

    add_metrics_parser(sub, db_url=_db_url, int_in=_int_in, open_store=_migrated_engine)

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
