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
- `FLEETVAL_DCGM_EXPORTER_PAUSE` (default `true`): before a wave's DCGM diagnostics, pause the GPU
  Operator's dcgm-exporter on the wave's nodes (deploy label set to `paused-for-fleetval-diag`, as
  the MIG manager pauses it for a reconfiguration) and restore it after, so the exporter's profiling
  metrics do not compete with the diagnostic (`fleetval.dcgm.exporter_pause`); `false` leaves the
  exporter alone (a busy-profiling result is then `inconclusive` and re-run).
- `FLEETVAL_XID_SOURCE` (default `inbox`): where Xid lines come from, `inbox` (the inbox table,
  filled by the simulator or a log shipper), `npd` (node-problem-detector Events), or `manual`
  (lines still reach the inbox, but nothing starts a run: someone triggers `xid_remediation`, and
  that run claims every pending line; for a site that wants a human to start remediation).
- `FLEETVAL_PROMETHEUS_URL` (default empty): the Prometheus (or a store with its HTTP API) that
  scrapes the fleet's dcgm-exporter; the weekly sweep reads each GPU's counters per sweep from it
  for the early-warning trend judge (D-DEV-TREND-01, `fleetval.trends.prometheus`). Empty: that
  step is skipped with one log line and no verdict (not a fail).
- `FLEETVAL_PROMETHEUS_NODE_LABEL` (default `Hostname`): the series label naming the node, as
  dcgm-exporter sets it (`NODE_NAME`, the node's name under the GPU Operator and the exporter's
  chart); a site that relabels it at scrape time (e.g. `node`) names its label here.

On-call notifications (`NotifySettings`, read by `fleet_notifications`; docs/notifications.md):

- `FLEETVAL_NOTIFY_CHANNELS` (default `slack,pagerduty,webhook`): the channels to use; each also
  needs its Airflow connection (`fleetval_slack`, `fleetval_pagerduty`, `fleetval_webhook`).
- `FLEETVAL_NOTIFY_SHADOW` (default `false`): record what would be sent, send nothing.
- `FLEETVAL_NOTIFY_STORM_THRESHOLD` (default 5): subjects of one kind in one evaluation that are
  one summary instead of a notice each.
- `FLEETVAL_NOTIFY_RATE_LIMIT` (default 20) notices per channel per `FLEETVAL_NOTIFY_RATE_WINDOW_MIN`
  (default 60) minutes.
- `FLEETVAL_NOTIFY_FLAP_WINDOW_MIN` (default 360): a subject that opens again within it reopens
  the same incident.

Connections (`fleetval_db`, `kubernetes_default`) and Variables (`fleetval_xid_breaker`) are
Airflow's; see docs/settings.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

# Defaults are data (fleetval.pinned_images), so reading the settings loads no tool package.
from fleetval.pinned_images import DCGM_IMAGE, NCCL_TESTS_IMAGE

NAMESPACE: Final = "fleetval"  # probe pods' and MPIJobs' namespace unless FLEETVAL_NAMESPACE says

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
    "FLEETVAL_DCGM_EXPORTER_PAUSE",
    "FLEETVAL_PROMETHEUS_URL",
    "FLEETVAL_PROMETHEUS_NODE_LABEL",
)
DEFAULT_PROMETHEUS_NODE_LABEL: Final = "Hostname"
# A Prometheus label name (the data model's rule); anything else would break the PromQL built from it.
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
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
    pause_dcgm_exporter: bool = True
    prometheus_url: str = ""  # empty: no device trends (the step is skipped, no verdict)
    prometheus_node_label: str = DEFAULT_PROMETHEUS_NODE_LABEL

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
            pause_dcgm_exporter=(env.get("FLEETVAL_DCGM_EXPORTER_PAUSE") or "true").lower()
            not in ("false", "0", "no"),
            prometheus_url=(env.get("FLEETVAL_PROMETHEUS_URL") or "").strip().rstrip("/"),
            prometheus_node_label=(env.get("FLEETVAL_PROMETHEUS_NODE_LABEL") or "").strip()
            or DEFAULT_PROMETHEUS_NODE_LABEL,
        )
        if settings.xid_source not in XID_SOURCES:
            raise ValueError(f"FLEETVAL_XID_SOURCE must be one of {XID_SOURCES}, got {settings.xid_source!r}")
        if settings.prometheus_url and not settings.prometheus_url.startswith(("http://", "https://")):
            raise ValueError(
                f"FLEETVAL_PROMETHEUS_URL must be an http(s) URL, got {settings.prometheus_url!r}"
            )
        if not _LABEL_NAME.match(settings.prometheus_node_label):
            raise ValueError(
                "FLEETVAL_PROMETHEUS_NODE_LABEL must be a Prometheus label name, "
                f"got {settings.prometheus_node_label!r}"
            )
        return settings


NOTIFY_CHANNELS: Final = ("slack", "pagerduty", "webhook")
# Every environment variable `NotifySettings.from_env` reads (only the notifications DAG's workers).
NOTIFY_ENV_VARS: Final = (
    "FLEETVAL_NOTIFY_CHANNELS",
    "FLEETVAL_NOTIFY_SHADOW",
    "FLEETVAL_NOTIFY_STORM_THRESHOLD",
    "FLEETVAL_NOTIFY_RATE_LIMIT",
    "FLEETVAL_NOTIFY_RATE_WINDOW_MIN",
    "FLEETVAL_NOTIFY_FLAP_WINDOW_MIN",
)


def _count(env: Mapping[str, str], name: str, default: int, *, least: int) -> int:
    text = (env.get(name) or "").strip()
    if not text:
        return default
    if not text.isascii() or not text.isdigit() or int(text) < least:
        raise ValueError(f"{name} must be a whole number >= {least}, got {text!r}")
    return int(text)


@dataclass(frozen=True, slots=True)
class NotifySettings:
    channels: tuple[str, ...] = NOTIFY_CHANNELS
    shadow: bool = False
    storm_threshold: int = 5
    rate_limit: int = 20
    rate_window_min: int = 60
    flap_window_min: int = 360

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> NotifySettings:
        env = os.environ if env is None else env
        default = cls()
        listed = env.get("FLEETVAL_NOTIFY_CHANNELS")
        channels = (
            NOTIFY_CHANNELS if listed is None else tuple(c.strip() for c in listed.split(",") if c.strip())
        )
        unknown = sorted(set(channels) - set(NOTIFY_CHANNELS))
        if unknown:
            raise ValueError(f"FLEETVAL_NOTIFY_CHANNELS: {unknown} not among {NOTIFY_CHANNELS}")
        return cls(
            channels=channels,
            shadow=(env.get("FLEETVAL_NOTIFY_SHADOW") or "false").lower() in ("true", "1", "yes"),
            storm_threshold=_count(env, "FLEETVAL_NOTIFY_STORM_THRESHOLD", default.storm_threshold, least=2),
            rate_limit=_count(env, "FLEETVAL_NOTIFY_RATE_LIMIT", default.rate_limit, least=1),
            rate_window_min=_count(env, "FLEETVAL_NOTIFY_RATE_WINDOW_MIN", default.rate_window_min, least=1),
            flap_window_min=_count(env, "FLEETVAL_NOTIFY_FLAP_WINDOW_MIN", default.flap_window_min, least=0),
        )
