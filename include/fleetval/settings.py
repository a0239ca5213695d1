"""Deployment settings read from the environment, at run time (never at DAG parse time).

- `FLEETVAL_NAMESPACE` (default `fleetval`): namespace of probe pods and MPIJobs.
- `FLEETVAL_RACK_LABEL` (default `fleetval.io/rack`): the node label naming a node's rack;
  blast-radius budgets are per rack.
- `FLEETVAL_DCGM_IMAGE` (default: the pinned DCGM image): a mirror or a digest.
- `FLEETVAL_NCCL_IMAGE` (default: the pinned nccl-tests image): a site build with the fabric's plugins.
- `FLEETVAL_KUEUE_QUEUE` (default `fleetval-validation`): Kueue LocalQueue for multi-node probes.
- `FLEETVAL_RDMA_RESOURCE` (default: found in node allocatable; none found → configuration
  error): the RDMA device each MPIJob worker requests, as `name=count[,name=count]` (e.g.
  `rdma/ib=1`, `nvidia.com/hostdev=8`, `vpc.amazonaws.com/efa=32`: whatever the site's RDMA device
  plugin advertises). Left empty, each probe reads it from the allocatable of its nodes among the
  known RDMA device plugins' resources (`fleetval.nccl.preflight`: `rdma/*` 1, `nvidia.com/hostdev`
  and `vpc.amazonaws.com/efa` all of them); none found on a probe that declares a fabric, or one
  missing on some of its nodes, stops it with a configuration error (a harness `error`, the task not
  retried) rather than letting NCCL fall back to sockets and fail every pair.
- `FLEETVAL_PROBE_DEFERRABLE` (default `true`): probe tasks defer while their pod runs, holding
  no worker slot; `false` keeps them on the worker (for probes that end within seconds).
- `FLEETVAL_XID_SOURCE` (default `inbox`): where Xid lines come from, `inbox` (the inbox table,
  filled by the simulator or a log shipper), `npd` (node-problem-detector Events), or `manual`
  (lines still reach the inbox, but nothing starts a run: someone triggers `xid_remediation`, and
  that run claims every pending line; for a site that wants a human to start remediation).

Connections (`fleetval_db`, `kubernetes_default`) and Variables (`fleetval_xid_breaker`) are
Airflow's; see docs/settings.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fleetval.dcgm.probe import DCGM_IMAGE
from fleetval.nccl.probe import NCCL_TESTS_IMAGE
from fleetval.probes.pod import NAMESPACE

DEFAULT_RACK_LABEL: Final = "fleetval.io/rack"
DEFAULT_KUEUE_QUEUE: Final = "fleetval-validation"
XID_SOURCES: Final = ("inbox", "npd", "manual")
# Every environment variable `Settings.from_env` reads (Compose and the Helm values pass each one).
ENV_VARS: Final = (
    "FLEETVAL_NAMESPACE",
    "FLEETVAL_RACK_LABEL",
    "FLEETVAL_DCGM_IMAGE",
    "FLEETVAL_NCCL_IMAGE",
    "FLEETVAL_KUEUE_QUEUE",
    "FLEETVAL_PROBE_DEFERRABLE",
    "FLEETVAL_XID_SOURCE",
    "FLEETVAL_RDMA_RESOURCE",
)
# An extended resource name (`domain/name`, as the API server accepts for resource requests).
_RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def parse_resource_counts(text: str, *, setting: str) -> tuple[tuple[str, str], ...]:
    """`rdma/ib=1,nvidia.com/hostdev=8` → ((name, count), …); a malformed entry is a ValueError."""
    counts: list[tuple[str, str]] = []
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        name, sep, count = entry.partition("=")
        if (
            not sep
            or not _RESOURCE_NAME.match(name.strip())
            or not count.strip().isascii()
            or not count.strip().isdigit()
            or int(count) < 1
        ):
            raise ValueError(f"{setting}: {entry!r} is not name=count (e.g. rdma/ib=1)")
        counts.append((name.strip(), str(int(count))))
    return tuple(counts)


@dataclass(frozen=True, slots=True)
class Settings:
    namespace: str = NAMESPACE
    rack_label: str = DEFAULT_RACK_LABEL
    dcgm_image: str = DCGM_IMAGE
    nccl_image: str = NCCL_TESTS_IMAGE
    kueue_queue: str = DEFAULT_KUEUE_QUEUE
    xid_source: str = "inbox"
    probe_deferrable: bool = True
    rdma_resources: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        settings = cls(
            namespace=env.get("FLEETVAL_NAMESPACE") or NAMESPACE,
            rack_label=env.get("FLEETVAL_RACK_LABEL") or DEFAULT_RACK_LABEL,
            dcgm_image=env.get("FLEETVAL_DCGM_IMAGE") or DCGM_IMAGE,
            nccl_image=env.get("FLEETVAL_NCCL_IMAGE") or NCCL_TESTS_IMAGE,
            kueue_queue=env.get("FLEETVAL_KUEUE_QUEUE") or DEFAULT_KUEUE_QUEUE,
            xid_source=env.get("FLEETVAL_XID_SOURCE") or "inbox",
            probe_deferrable=(env.get("FLEETVAL_PROBE_DEFERRABLE") or "true").lower()
            not in ("false", "0", "no"),
            rdma_resources=parse_resource_counts(
                env.get("FLEETVAL_RDMA_RESOURCE") or "", setting="FLEETVAL_RDMA_RESOURCE"
            ),
        )
        if settings.xid_source not in XID_SOURCES:
            raise ValueError(f"FLEETVAL_XID_SOURCE must be one of {XID_SOURCES}, got {settings.xid_source!r}")
        return settings
