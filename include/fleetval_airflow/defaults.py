"""Shared DAG defaults: owner, retries, pools and tags (a closed set, asserted in tests)."""

from __future__ import annotations

import datetime as dt
import enum

import pendulum

START_DATE = pendulum.datetime(2026, 1, 1, tz="UTC")

# Retries are for the harness (API blips, a worker lost); a failing GPU is a verdict, not a retry.
DEFAULT_ARGS = {
    "owner": "fleet-validation",
    "retries": 2,
    "retry_delay": dt.timedelta(minutes=1),
    "execution_timeout": dt.timedelta(hours=4),
}


# Priority weights (weight_rule "absolute"): a run's decision tasks (claim, judge, plan) go ahead
# of every queued remediation task (the r3 probes of earlier bursts), which go last.
DECISION_PRIORITY = 100
REMEDIATION_PRIORITY = 1


class Pool(enum.StrEnum):
    # Probe waves in flight at once across all DAGs (pools.json declares the slots).
    NODE_DIAGNOSIS = "fleetval_node_diagnosis"


class Tag(enum.StrEnum):
    LAYER_DEVICE = "layer:device"
    LAYER_NETWORK = "layer:network"
    LAYER_SCHEDULING = "layer:scheduling"
    LAYER_SHARING = "layer:sharing"
    LAYER_JOB = "layer:job"
    SCHEDULE_WEEKLY = "schedule:weekly"
    SCHEDULE_EVENT = "schedule:event"
    LAYER_OPERATOR = "layer:operator"
    SCHEDULE_MANUAL = "schedule:manual"
    OWNER = "owner:fleet-validation"
