"""What the report adds to a run's record before it is summed up: an `error` verdict for each check
a step never got to, and an `inconclusive` one when the run could check no node at all. Both only
read and write the record (no `MigRun`), so the report needs no cluster client."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Final

from fleetval.mig.suite_plan import MigPlan
from fleetval.mig.suite_run import ACTIONS
from fleetval.records import Result, Verdict
from fleetval.store.repository import Store

# What every taken node must get a verdict on (D-GPU-MIG-05 only once a MIG layout was advertised).
EXPECTED_CRITERIA: Final = ("D-GPU-MIG-01", "D-GPU-MIG-02", "D-GPU-MIG-03", "D-GPU-MIG-04", "D-GPU-MIG-06")


def missing_verdicts(store: Store, run_id: int, taken: Sequence[str]) -> list[Verdict]:
    """An `error` verdict for each criterion a taken node has none of (its step broke)."""
    have = {(v["criterion"], v["subject"]) for v in store.verdicts(run_id)}
    missing = [
        Verdict(
            c,
            node,
            Result.ERROR,
            ACTIONS[Result.ERROR],
            "mig-validation-step-v1",
            f"{c}: its step did not complete",
        )
        for node in taken
        for c in EXPECTED_CRITERIA
        if (c, node) not in have
    ]
    for verdict in missing:
        store.add_verdicts(run_id, [verdict], node=verdict.subject)
    return missing


def nothing_taken(store: Store, run_id: int, mig_plan: MigPlan, taken: Sequence[str]) -> Verdict | None:
    """An `inconclusive` verdict on the pool when it has MIG nodes and this run could check none of
    them (every one busy, cordoned, unsettled…): a week without MIG validation is said, not passed."""
    if taken or not mig_plan.fleet_size:
        return None
    why = Counter(mig_plan.skipped.values()).most_common(3)
    listed = ", ".join(f"{n} {reason}" for reason, n in why) or "none eligible"
    verdict = Verdict(
        "D-GPU-MIG-01",
        "mig-pool",
        Result.INCONCLUSIVE,
        ACTIONS[Result.INCONCLUSIVE],
        "mig-validation-node-not-taken-v1",
        f"none of the {mig_plan.fleet_size} MIG-capable nodes could be checked this run ({listed})",
        {"skipped": mig_plan.skipped, "deferred": list(mig_plan.deferred)},
    )
    store.add_verdicts(run_id, [verdict])
    return verdict
