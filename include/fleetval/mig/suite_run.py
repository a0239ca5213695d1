"""One run of the MIG suite as its steps see it (`MigRun`), and what every step's verdicts share.

Each Airflow task is a fresh process that runs one step, so it builds the run once from what the run
recorded (its plan, the nodes it took, the mig-parted config) and the DAG's settings, and hands it to
the step instead of a dozen arguments."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from fleetval.mig.suite_plan import MigPlan
from fleetval.nodes import NodeActions
from fleetval.records import Result
from fleetval.store.repository import Store

SUITE: Final = "mig_validation"
ACTIONS: Final = {
    Result.ERROR: "look at the node: it may still be cordoned",
    Result.INCONCLUSIVE: "rerun mig_validation on this node",
}

Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True, slots=True)
class MigRun:
    """What every step of one run shares: where its evidence and verdicts go, the cluster it
    changes, its plan and the nodes it took, and how it watches a change. Arguments that only one
    step needs (a time limit, the nodes not probed) stay that step's own."""

    store: Store
    run_id: int
    run_key: str  # the prefix of the run's probe, pod and node-event keys: a retry finds its own
    plan: MigPlan
    taken: tuple[str, ...]  # the nodes `take` cordoned (none before it)
    mig_config: Mapping[str, object]  # the mig-parted config the plan was made from
    core: Any  # the CoreV1Api
    actions: NodeActions
    pod_namespace: str  # where the suite's own pods run (the filler, the busy test's work)
    image: str | None  # their image (None: the probes' default)
    watch_s: float  # how long a layout change, or a pod's start, is waited for
    poll_s: float
    clock: Clock = time.time
    sleep: Sleep = time.sleep

    def with_taken(self, taken: Iterable[str]) -> MigRun:
        """The same run once `take` has cordoned `taken`."""
        return replace(self, taken=tuple(taken))
