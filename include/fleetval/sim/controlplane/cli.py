"""`fleetval cluster up | down | kubelet`: the real control plane on loopback (see `cluster`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fleetval.errors import FleetvalError


def cmd_up(args: argparse.Namespace) -> int:
    from fleetval.sim.controlplane.cluster import up

    info = up(
        Path(args.state_dir),
        Path(args.fleet) if args.fleet else None,
        bin_dir=Path(args.bin_dir) if args.bin_dir else None,
        deploy=Path(args.deploy) if args.deploy else None,
        time_scale=args.time_scale,
        log=sys.stderr,
    )
    print(json.dumps(info, separators=(",", ":")))  # one line, as `sim serve` prints
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from fleetval.sim.controlplane.cluster import down

    stopped = down(Path(args.state_dir))
    print(json.dumps({"stopped": stopped}))
    return 0


def cmd_restart(args: argparse.Namespace) -> int:
    from fleetval.sim.controlplane.launcher import ControlPlane

    ControlPlane.attach(Path(args.state_dir)).restart(args.component)
    print(json.dumps({"restarted": args.component}))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    import datetime as dt

    from kubernetes import config

    from fleetval.fleet.spec import load_fleet_spec
    from fleetval.kueue.suite import resolve, shipped
    from fleetval.sim.controlplane.compare import compare, markdown, rows
    from fleetval.sim.controlplane.launcher import StateDir

    state = StateDir(Path(args.state_dir).resolve())
    if not state.info.is_file():
        raise FleetvalError(f"{args.state_dir} holds no running cluster (`fleetval cluster up` first)")
    info = json.loads(state.info.read_text())
    spec = load_fleet_spec((state.root / "fleet.yaml").read_text())
    scenarios = [resolve(ref) for ref in args.scenarios] if args.scenarios else shipped()
    api = config.new_client_from_config(config_file=info["kubeconfig"])
    run_key = f"compare/{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}"
    sim, real, leftovers = compare(api, scenarios, run_key, sim_fleet=spec)
    table = rows(sim, real)
    if args.markdown:
        versions = info.get("versions") or {}
        header = (
            "# Kueue scenarios: the simulator and real Kueue, expectation by expectation\n\n"
            "Written by `fleetval cluster compare --state-dir DIR --markdown FILE` on a cluster `fleetval "
            "cluster up` started; what the failures mean: "
            "[controlplane.md](controlplane.md#kueue-scenarios-on-real-kueue).\n\n"
            f"Fleet `{spec.name}`; real: Kubernetes {versions.get('kubernetes', '?')}, "
            f"Kueue {versions.get('kueue', '?')}; simulator: fleetval's Kueue model.\n"
        )
        Path(args.markdown).write_text(markdown(table, leftovers, header=header))
    print(
        json.dumps(
            {
                "run_key": run_key,
                "rows": [r.to_json() for r in table],
                "leftovers": [x.to_json() for x in leftovers if x.any],
            },
            indent=2,
        )
    )
    return 0


def cmd_kubelet(args: argparse.Namespace) -> int:
    from fleetval.fleet.spec import load_fleet_spec
    from fleetval.sim.kubelet.virtual import serve

    serve(
        load_fleet_spec(Path(args.fleet).read_text()),
        Path(args.kubeconfig),
        port=args.port,
        cert=Path(args.tls_cert),
        key=Path(args.tls_key),
        client_ca=Path(args.client_ca),
        time_scale=args.time_scale,
    )
    return 0


def add_parser(sub: Any, *, time_scale: Any, text: Any) -> None:
    p_cluster = sub.add_parser(
        "cluster", help="a real control plane (etcd, kube-apiserver, scheduler, Kueue) on loopback"
    )
    cluster_sub = p_cluster.add_subparsers(dest="cluster_command", required=True)
    p_up = cluster_sub.add_parser(
        "up", help="start it with a fleet's GPU nodes joined; prints one JSON line (kubeconfig, ...)"
    )
    p_up.add_argument("--state-dir", required=True, type=text(4096), help="where its files and logs go")
    p_up.add_argument("--fleet", type=text(4096), help="fleet spec YAML (default: the mini fleet)")
    p_up.add_argument(
        "--bin-dir", type=text(4096), help="the built binaries (default: scripts/build-controlplane.sh's)"
    )
    p_up.add_argument(
        "--deploy", type=text(4096), help="fleetval's deploy/ folder (default: the source tree's)"
    )
    p_up.add_argument(
        "--time-scale", type=time_scale, default=0.0, help="simulated tool run time × this (0: instant)"
    )
    p_up.set_defaults(func=cmd_up)
    p_down = cluster_sub.add_parser("down", help="stop everything `cluster up` started in that state dir")
    p_down.add_argument("--state-dir", required=True, type=text(4096))
    p_down.set_defaults(func=cmd_down)
    p_restart = cluster_sub.add_parser(
        "restart", help="start a component that stopped again, as `up` started it"
    )
    p_restart.add_argument("--state-dir", required=True, type=text(4096))
    p_restart.add_argument(
        "component",
        choices=[
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kueue",
            "virtual-kubelet",
        ],
    )
    p_restart.set_defaults(func=cmd_restart)
    p_compare = cluster_sub.add_parser(
        "compare", help="the Kueue scenarios on the simulator and on this cluster's real Kueue, side by side"
    )
    p_compare.add_argument(
        "--state-dir", required=True, type=text(4096), help="a cluster `cluster up` started"
    )
    p_compare.add_argument("--markdown", type=text(4096), help="also write the table as Markdown here")
    p_compare.add_argument("scenarios", nargs="*", help="scenario files or shipped ids (default: all)")
    p_compare.set_defaults(func=cmd_compare)
    p_kubelet = cluster_sub.add_parser(
        "kubelet", help="(started by `cluster up`) the fleet's virtual kubelet"
    )
    p_kubelet.add_argument("--fleet", required=True)
    p_kubelet.add_argument("--kubeconfig", required=True)
    p_kubelet.add_argument("--port", required=True, type=int)
    p_kubelet.add_argument("--tls-cert", required=True)
    p_kubelet.add_argument("--tls-key", required=True)
    p_kubelet.add_argument("--client-ca", required=True)
    p_kubelet.add_argument("--time-scale", type=time_scale, default=0.0)
    p_kubelet.set_defaults(func=cmd_kubelet)
