"""The controllers of the simulated cluster besides the scheduler and the kubelets, run on every
reconcile (the lock held) in the order a change flows through them: Kueue admits a queued pod,
pod group or job (`kueue`), the mpi-operator turns an MPIJob into worker pods and a launcher Job
(`mpi_operator`), the Job controller turns a Job into its pod (`jobs`), the GPU Operator walks
nodes through driver upgrades (`gpu_operator`) and its MIG manager through MIG layouts
(`mig_manager`), and its operand DaemonSets follow the nodes' `nvidia.com/gpu.deploy.*` labels
(`operand_daemonsets`; after the MIG manager, so a pause it writes takes the pods in the same
pass). Garbage collection of owned objects is the store's (`SimKubeCluster`).

Each controller changes objects only through the store, as a real controller does through the
API server: created objects are validated like a client's, and every write is a watch event. A
controller bug is printed and that controller skips the pass; it never fails the API request
that ran the reconcile.
"""

from __future__ import annotations

import math
import traceback
from typing import TYPE_CHECKING

from fleetval.sim.kube.gpu_operator import reconcile_driver_upgrades
from fleetval.sim.kube.jobs import reconcile_jobs
from fleetval.sim.kube.kueue import reconcile_kueue
from fleetval.sim.kube.mig_manager import reconcile_mig
from fleetval.sim.kube.mpi_operator import reconcile_mpijobs
from fleetval.sim.kube.operand_daemonsets import reconcile_operand_daemonsets

if TYPE_CHECKING:
    from fleetval.sim.kube.cluster import SimKubeCluster


def run_controllers(cluster: SimKubeCluster, now: float) -> float:
    """One pass of every controller; returns the earliest time one needs another pass without a
    change to wake it (a deadline, a wait), or inf."""
    due = math.inf
    steps = (
        lambda: reconcile_kueue(cluster, now),
        lambda: reconcile_mpijobs(cluster),
        lambda: reconcile_jobs(cluster, now),
        lambda: reconcile_driver_upgrades(cluster, now),
        lambda: reconcile_mig(cluster, now),
        lambda: reconcile_operand_daemonsets(cluster, now),
    )
    for step in steps:
        try:
            result = step()
        except Exception:  # a simulator bug: report it, keep the API answering
            traceback.print_exc()
            continue
        if isinstance(result, float):
            due = min(due, result)
    return due
