"""The MIG layer's checks as `mig_validation` (and, for a node set, `rack_onboarding`) runs them, on
any cluster through the kubernetes client (no Airflow here): the one entry the Airflow tasks use.

Reconfiguring MIG takes a node's GPUs away, so the suite works on few nodes at a time and gives
each back as it found it:

1. `plan` (suite_plan): the idle, settled MIG nodes a run takes within the blast-radius budget, and
   what it does on each. `dry_run` stops here.
2. `take` (suite_layouts): each planned node is read again (still idle, not cordoned) and cordoned,
   with the label `fleetval.io/mig-validation=running` saying why.
3. `apply_layouts` (D-GPU-MIG-01, -05), the isolation probes (suite_isolation, D-GPU-MIG-03, -04:
   baseline, `start_fill`, during, `stop_fill`, `judge_isolation`), `busy_reconfig` (D-GPU-MIG-06,
   while the node still holds the layout it was given), `refused_layout` (D-GPU-MIG-02).
4. `restore` (whatever happened before): the node's original `nvidia.com/mig.config`, waited for
   until `success` with the original resources advertised, then uncordoned. A node that does not
   come back stays cordoned, with an `error` verdict saying so.
5. The report's additions (suite_report): `missing_verdicts`, `nothing_taken`.

The steps from `take` on share one `MigRun` (suite_run): the store and run, the cluster, the plan,
the nodes taken and the watch settings. Every layout change is stored as raw evidence (the Node
snapshots the judges read) before it is judged; the advertise time of D-GPU-MIG-01 is stored as a
measurement.
"""

from __future__ import annotations

from fleetval.mig.suite_isolation import (
    isolation_probes,
    judge_isolation,
    probe_ready,
    start_fill,
    stop_fill,
)
from fleetval.mig.suite_layouts import (
    VALIDATION_LABEL,
    apply_layouts,
    busy_reconfig,
    change_layouts,
    refused_layout,
    restore,
    take,
)
from fleetval.mig.suite_plan import (
    DEFAULT_LAYOUTS,
    MigPlan,
    MigSuiteError,
    NodePlan,
    gpu_nodes,
    plan,
    read_config,
)
from fleetval.mig.suite_report import EXPECTED_CRITERIA, missing_verdicts, nothing_taken
from fleetval.mig.suite_run import SUITE, MigRun

__all__ = [
    "DEFAULT_LAYOUTS",
    "EXPECTED_CRITERIA",
    "SUITE",
    "VALIDATION_LABEL",
    "MigPlan",
    "MigRun",
    "MigSuiteError",
    "NodePlan",
    "apply_layouts",
    "busy_reconfig",
    "change_layouts",
    "gpu_nodes",
    "isolation_probes",
    "judge_isolation",
    "missing_verdicts",
    "nothing_taken",
    "plan",
    "probe_ready",
    "read_config",
    "refused_layout",
    "restore",
    "start_fill",
    "stop_fill",
    "take",
]
