"""The simulator's Xid event source: kernel lines for `xid` faults (or ad-hoc injections), in the
real `iso` syslog shape (absolute timestamps, so time-to-cordon can be measured), delivered to
the `xid_inbox` as a log shipper would. GPU UUIDs and PCI addresses are the ones the simulated
cluster reports for the same node."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import Engine

from fleetval.errors import SpecError
from fleetval.fleet.gpus import gpu_pci, gpu_uuid
from fleetval.fleet.spec import FleetSpec
from fleetval.store.xid_inbox import receive_lines
from fleetval.xid.parser import normalize_pci
from fleetval.xid.simulated import render_xid_lines


def xid_lines(fleet: FleetSpec, node: str, *, code: int, gpu: int, count: int, at: dt.datetime) -> list[str]:
    domain, bus, device = gpu_pci(gpu).rsplit(".", 1)[0].split(":")  # 00000000:3A:00.0
    pci = normalize_pci(f"{domain[-4:]}:{bus}:{device}")
    text = render_xid_lines(
        code=code,
        gpu_pci=pci,
        gpu_uuid=gpu_uuid(fleet.seed, node, gpu),
        count=count,
        start_epoch_s=at.timestamp(),
        style="iso",
        host=node,
        interval_s=0.2,
    )
    return text.splitlines()


def inject(
    engine: Engine,
    fleet: FleetSpec,
    injections: Sequence[tuple[str, int, int, int]],
    *,
    at: dt.datetime,
    tag: str,
) -> int:
    """Deliver (node, code, gpu, count) Xid lines to the inbox; `tag` keeps deliveries apart."""
    rows = []
    for node, code, gpu, count in injections:
        gpus = fleet.profile_of(node).gpus  # unknown node: SpecError
        if not 0 <= gpu < gpus:
            raise SpecError(f"node {node!r} has GPUs 0..{gpus - 1}, not {gpu}")
        for i, line in enumerate(xid_lines(fleet, node, code=code, gpu=gpu, count=count, at=at)):
            rows.append((f"sim/{tag}/{node}/{code}/{gpu}/{i}", node, line, "sim"))
    return receive_lines(engine, rows, at=at)


def inject_spec_faults(engine: Engine, fleet: FleetSpec, *, at: dt.datetime, tag: str) -> int:
    """Deliver the fleet spec's `xid` faults."""
    faults = [f for f in fleet.faults if f.kind == "xid" and f.node is not None]
    return inject(
        engine,
        fleet,
        [
            (str(f.node), int(f.params["code"]), int(f.params["gpu"]), int(f.params.get("count", 1)))
            for f in faults
        ],
        at=at,
        tag=tag,
    )
