"""`fleetval sim …`: the fleet simulator's commands, and the simulator's parts of the others.

`fleetval.cli` adds them only where the simulator is installed; this module never imports it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetval.cli_base import (
    EXIT_FAILED,
    db_url,
    emit,
    int_in,
    migrated_engine,
    number_in,
    read_input,
    run_key,
    text,
    verdict_json,
)
from fleetval.errors import FleetvalError

if TYPE_CHECKING:
    from fleetval.fleet.spec import FleetSpec


def _read_spec(path: str) -> FleetSpec:
    from fleetval.fleet.spec import MAX_SPEC_CHARS, load_fleet_spec

    return load_fleet_spec(read_input(path, limit=MAX_SPEC_CHARS))


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
    emit(
        {
            "run_key": run_key,
            "airflow_state": state,
            **extra,
            "verdicts": [verdict_json(v) for v in verdicts],
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
        emit({"fleet": spec.name, "server": server.url, "kubeconfig": str(kubeconfig), "db": db})
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
    emit({"fleet": spec.name, "nodes": len(spec.nodes()), "faults": len(spec.faults)})
    return 0


def cmd_sim_inject_xid(args: argparse.Namespace) -> int:
    from fleetval.fleet.spec import load_fleet_spec
    from fleetval.store.repository import Store
    from fleetval.xid.simulated_source import inject

    at = dt.datetime.now(dt.UTC)
    engine = migrated_engine(args.db)
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
    emit({"fleet": spec.name, "nodes": len(nodes), "lines": delivered})
    return 0


def scenarios_on_sim(
    args: argparse.Namespace, scenarios: list[Any], run_key: str, store: Any, options: dict[str, Any]
) -> list[Any]:
    """`scenario run` without --kubeconfig: on a simulated cluster served here for the run."""
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


def register(sub: Any) -> None:
    """Add the `sim` command group to `fleetval`'s subcommands."""
    from fleetval.fleet.spec import MAX_GPUS, MAX_XID_COUNT, XID_CODES

    fraction = number_in(0.0, 1.0, low_open=True)
    time_scale = number_in(0.0, 100.0)
    p_sim = sub.add_parser("sim", help="the fleet simulator")
    sim_sub = p_sim.add_subparsers(dest="sim_command", required=True)
    p_run = sim_sub.add_parser(
        "run",
        help="run a suite on a simulated fleet (weekly, xid: its DAGs on a local Airflow)",
    )
    p_run.add_argument("fleet", help="fleet spec YAML")
    p_run.add_argument("--db", required=True, type=db_url)
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
        type=text(253),
        help="nccl: a reference node measured and promoted as the baseline first (repeatable)",
    )
    p_run.add_argument(
        "--run-key",
        type=run_key,
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
        "--port", type=int_in(0, 65535), default=0, help="port (default: a free one, printed)"
    )
    p_serve.add_argument(
        "--db", type=db_url, help="store for the cluster's state (default: sqlite in --state-dir)"
    )
    p_serve.add_argument(
        "--state-dir",
        type=text(4096),
        default=".fleetval-sim",
        help="where the kubeconfig and default store go",
    )
    p_serve.add_argument(
        "--kubeconfig",
        type=text(4096),
        help="write the kubeconfig here (default: STATE_DIR/FLEET.kubeconfig)",
    )
    p_serve.add_argument(
        "--token",
        type=text(4096),
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
    p_load.add_argument("--db", required=True, type=db_url)
    p_load.add_argument(
        "--reset", action="store_true", help="reset cluster state (cordons, labels) from the spec"
    )
    p_load.set_defaults(func=cmd_sim_load)

    p_inj = sim_sub.add_parser("inject-xid", help="deliver Xid kernel lines for nodes to the Xid inbox")
    p_inj.add_argument("fleet", help="a fleet spec YAML, or the name of a fleet served from this store")
    p_inj.add_argument("--db", required=True, type=db_url)
    p_inj.add_argument(
        "--node", action="append", required=True, type=text(253), help="node name (repeatable)"
    )
    p_inj.add_argument(
        "--code", type=int_in(XID_CODES.start, XID_CODES.stop - 1), required=True, help="Xid number"
    )
    p_inj.add_argument("--gpu", type=int_in(0, MAX_GPUS - 1), default=0)
    p_inj.add_argument("--count", type=int_in(1, MAX_XID_COUNT), default=1)
    p_inj.add_argument("--tag", type=text(100), help="delivery id (same tag again delivers nothing new)")
    p_inj.set_defaults(func=cmd_sim_inject_xid)


def register_cluster(sub: Any) -> None:
    """Add the `cluster` command group: a real control plane on loopback, the simulator's nodes joined."""
    from fleetval.sim.controlplane.cli import add_parser

    add_parser(sub, time_scale=number_in(0.0, 100.0), text=text)
