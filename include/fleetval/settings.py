"""Deployment settings read from the environment, at run time (never at DAG parse time).

- `FLEETVAL_NAMESPACE` (default `fleetval`): namespace of probe pods and MPIJobs.
- `FLEETVAL_RACK_LABEL` (default `fleetval.io/rack`): the node label naming a node's rack;
  blast-radius budgets are per rack.
- `FLEETVAL_DCGM_IMAGE` (default: the pinned DCGM image): a mirror or a digest.
- `FLEETVAL_NCCL_IMAGE` (default: the pinned nccl-tests image): a site build with the fabric's plugins.
- `FLEETVAL_KUEUE_QUEUE` (default `fleetval-validation`): Kueue LocalQueue for multi-node probes.
- `FLEETVAL_PROBE_DEFERRABLE` (default `true`): probe tasks defer while their pod runs, holding
  no worker slot; `false` keeps them on the worker (for probes that end within seconds).
- `FLEETVAL_XID_SOURCE` (default `inbox`): where Xid lines come from, `inbox` (the inbox table,
  filled by the simulator or a log shipper), `npd` (node-problem-detector Events), or `manual`
  (lines still reach the inbox, but nothing starts a run: someone triggers `xid_remediation`, and
  that run claims every pending line; for a site that wants a human to start remediation).

Connections (`fleetval_db`, `kubernetes_default`) and Variables (`fleetval_xid_breaker`) are
Airflow's; see the README's settings table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fleetval.k8s.specs import DCGM_IMAGE, NAMESPACE, NCCL_TESTS_IMAGE

DEFAULT_RACK_LABEL: Final = "fleetval.io/rack"
DEFAULT_KUEUE_QUEUE: Final = "fleetval-validation"
XID_SOURCES: Final = ("inbox", "npd", "manual")


@dataclass(frozen=True, slots=True)
class Settings:
    namespace: str = NAMESPACE
    rack_label: str = DEFAULT_RACK_LABEL
    dcgm_image: str = DCGM_IMAGE
    nccl_image: str = NCCL_TESTS_IMAGE
    kueue_queue: str = DEFAULT_KUEUE_QUEUE
    xid_source: str = "inbox"
    probe_deferrable: bool = True

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
        )
        if settings.xid_source not in XID_SOURCES:
            raise ValueError(f"FLEETVAL_XID_SOURCE must be one of {XID_SOURCES}, got {settings.xid_source!r}")
        return settings
