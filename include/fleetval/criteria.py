"""The criteria catalog: every criterion fleetval judges against, as data.

Judges cite these ids in every verdict; the CLI (`fleetval criteria`) and `docs/criteria.md`
list them with what checks each one today. Parameters (90 %, 5 %, N minutes) live here, next to
the statement they belong to, not in the judges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class Criterion:
    id: str
    layer: str
    statement: str
    parameters: dict[str, Any] = field(default_factory=dict)


def _c(cid: str, layer: str, statement: str, **parameters: Any) -> Criterion:
    return Criterion(cid, layer, statement, parameters)


CATALOG_VERSION: Final = "2026-12-05.1"

CRITERIA: Final[tuple[Criterion, ...]] = (
    _c(
        "D-OP-01",
        "operator",
        "each operand is healthy on each GPU node (validator markers, daemonset pods ready)",
    ),
    _c(
        "D-OP-02",
        "operator",
        "the device plugin advertises the expected nvidia.com/gpu count (or MIG resources)",
    ),
    _c("D-OP-03", "operator", "a pod that does not request a GPU sees no GPU"),
    _c(
        "D-OP-04",
        "operator",
        "during a rolling driver/toolkit upgrade, running jobs are treated as the upgrade policy says",
    ),
    _c(
        "D-DEV-01",
        "device",
        "before entering service r2 must Pass; Warn holds the node for operator approval",
        level=2,
    ),
    _c(
        "D-DEV-02",
        "device",
        "an Xid after a job ends cordons the node, runs r3; Pass returns it, Fail quarantines it",
        level=3,
    ),
    _c("D-DEV-03", "device", "idle nodes get r2 at least weekly", level=2, max_age_days=7),
    _c("D-DEV-04", "device", "every judgement is recorded: node, GPU UUID, level, result, action"),
    _c(
        "D-DEV-05",
        "device",
        "the policy runs automatically; time from an injected Xid to cordon is measured",
        target_p90_s=15,
    ),
    _c("D-DEV-06", "device", "Xid actions follow a decision table keyed by Xid number and repeats"),
    _c(
        "D-DEV-TREND-01",
        "device",
        "a GPU whose counters drift toward a hard failure (rising correctable-ECC rate, row remaps or "
        "retired pages accumulating, rising temperature or thermal throttling) is warned before the "
        "hard threshold; warn never cordons; short or unreadable history is inconclusive",
        min_samples=4,
    ),
    _c(
        "D-GPU-MIG-01",
        "sharing",
        "after a MIG profile is requested the node advertises its resources within N minutes",
        max_minutes=10,
    ),
    _c(
        "D-GPU-MIG-02",
        "sharing",
        "a disallowed MIG combination is rejected, with the reason on node labels/events",
    ),
    _c("D-GPU-MIG-03", "sharing", "filling instance A's memory does not affect instance B's workload"),
    _c("D-GPU-MIG-04", "sharing", "instance A's processes and memory use are invisible from instance B"),
    _c(
        "D-GPU-MIG-05",
        "sharing",
        "console, billing and quota count a MIG instance as its profile, not one GPU",
    ),
    _c("D-GPU-MIG-06", "sharing", "MIG is reconfigured only on a GPU with no running work"),
    _c("D-GPU-TS-01", "sharing", "time-slicing is disclosed as unisolated on the product surface"),
    _c(
        "D-NET-NCCL-01",
        "network",
        "one node, 8 GPUs: busbw at sizes >= 1 GB is >= 90 % of the baseline",
        min_ratio=0.90,
        min_size_bytes=1 << 30,
    ),
    _c(
        "D-NET-NCCL-02",
        "network",
        "two nodes, 16 GPUs: busbw at sizes >= 1 GB is >= 90 % of the inter-node baseline",
        min_ratio=0.90,
        min_size_bytes=1 << 30,
    ),
    _c("D-NET-NCCL-03", "network", "zero NCCL errors and timeouts during the test"),
    _c(
        "D-NET-NCCL-04",
        "network",
        "three repeats: busbw coefficient of variation <= 5 %",
        min_repeats=3,
        max_cv=0.05,
    ),
    _c(
        "D-NET-NCCL-TRANSPORT",
        "network",
        "the active transport is the fabric the profile declares (no socket fallback)",
    ),
    _c(
        "D-NET-NCCL-TREND-01",
        "network",
        "busbw declining monotonically across sweeps toward D-NET-NCCL-01/-02's min_ratio is warned "
        "while still above it; warn never cordons; short or unreadable history is inconclusive",
        min_samples=8,
    ),
    _c("D-SCHED-01", "scheduling", "a job over the free quota is held with 0 pods"),
    _c(
        "D-SCHED-02",
        "scheduling",
        "when quota frees up the waiting job is admitted within N s",
        max_seconds=60,
    ),
    _c("D-SCHED-03", "scheduling", "in a cohort with an idle team, a team borrows up to its borrowing limit"),
    _c("D-SCHED-04", "scheduling", "lent quota is reclaimed per policy when the lender submits"),
    _c(
        "D-SCHED-05",
        "scheduling",
        "a preempted job gets its grace period to checkpoint and resumes after re-admission",
    ),
    _c(
        "D-SCHED-06", "scheduling", "a multi-node job is admitted only when all its GPUs are available (gang)"
    ),
    _c("D-SCHED-07", "scheduling", "the waiting reason shown to users equals the Workload condition"),
    _c(
        "F-SAFE-01",
        "safety",
        "disruptive node actions stay within the blast-radius budget; past it fleetval "
        "alerts instead of acting",
    ),
    _c("D-JOB-CKPT-01", "job", "training resumes at the step after the last complete checkpoint"),
    _c("D-JOB-CKPT-02", "job", "model, optimizer, LR scheduler, RNG and data-loader position are restored"),
    _c(
        "D-JOB-CKPT-03",
        "job",
        "losses after resume equal those of an uninterrupted reference run: bitwise on CPU; on a GPU "
        "(deterministic algorithms, cuBLAS workspace :4096:8) within gpu_loss_rtol of it",
        gpu_loss_rtol=1e-5,
    ),
    _c(
        "D-JOB-CKPT-04",
        "job",
        "killing the job during a save never leaves a partial checkpoint read as latest",
    ),
    _c(
        "D-JOB-CKPT-05",
        "job",
        "save time stays within budget (absolute and as a share of step time)",
        max_save_s=60,
        max_save_share=0.10,  # median save ÷ the training time between two saves
    ),
    _c("D-JOB-CKPT-06", "job", "a corrupt checkpoint is detected on load and the previous good one is used"),
    _c("D-JOB-CKPT-07", "job", "on preemption (SIGTERM + grace) the job saves and later resumes from it"),
)

# What judges each criterion today (DAG, and the judge that emits the verdict); a criterion not
# listed is specified here but not yet checked. tests/fleetval/test_criteria.py holds this to the
# code: an id a judge or scenario emits is listed, a listed id is emitted somewhere.
IMPLEMENTED_BY: Final[dict[str, str]] = {
    "D-OP-01": "gpu_operator_validation: operand pods per GPU node (gpu_operator.judge)",
    "D-OP-02": "gpu_operator_validation: advertised GPUs or MIG devices vs GFD (gpu_operator.advertised)",
    "D-OP-03": "gpu_operator_validation: a no-GPU probe pod per node class (gpu_operator.isolation)",
    "D-OP-04": "gpu_operator_validation: a rollout sampled vs upgradePolicy (gpu_operator.upgrade_policy)",
    "D-DEV-01": (
        "rack_onboarding: DCGM r2 per node at the onboarding gate (dcgm.judge); a warned node waits for "
        "an operator's answer (HITL), stored in its verdict (onboarding.gate, onboarding.actions)"
    ),
    "D-DEV-02": "xid_remediation: DCGM r3 after an Xid (dcgm.judge, post-xid gate)",
    "D-DEV-03": "weekly_health_sweep: DCGM r2 on every idle GPU node, coverage verdict",
    "D-DEV-04": "weekly_health_sweep and xid_remediation: one record per GPU (dcgm.judge)",
    "D-DEV-05": "xid_remediation: time from the Xid to the cordon (xid.judge)",
    "D-DEV-06": "xid_remediation: the Xid decision table (include/fleetval/xid/xid_table.csv, xid.judge)",
    "D-DEV-TREND-01": (
        "weekly_health_sweep: judge_device_trends, every GPU node's dcgm-exporter counters per weekly "
        "sweep read from the fleet's Prometheus (trends.prometheus, trends.judge; skipped without "
        "FLEETVAL_PROMETHEUS_URL); bench/early_warning.py replays the rules"
    ),
    "D-NET-NCCL-TREND-01": (
        "post_upgrade_nccl_sweep: judge_link_trends, each node's and pair's stored busbw per sweep vs the "
        "baseline it was judged against (trends.links, trends.judge); bench/early_warning.py replays it"
    ),
    "D-NET-NCCL-01": "post_upgrade_nccl_sweep: intra-node busbw vs the promoted baseline (nccl.judge)",
    "D-NET-NCCL-02": "post_upgrade_nccl_sweep: inter-node pairs vs the promoted baseline (nccl.judge)",
    "D-NET-NCCL-03": "post_upgrade_nccl_sweep: NCCL errors and #wrong (nccl.judge)",
    "D-NET-NCCL-04": "post_upgrade_nccl_sweep: CV over three repeats (nccl.judge)",
    "D-NET-NCCL-TRANSPORT": (
        "post_upgrade_nccl_sweep and rack_onboarding: the transport NCCL logged vs the profile's fabric "
        "(nccl.judge)"
    ),
    "F-SAFE-01": "every DAG that acts on nodes: the blast-radius action budget (remediation)",
    "D-SCHED-01": "kueue_contention: d-sched-01-02-quota, x-02-strict-fifo, x-07-two-flavors (kueue.judge)",
    "D-SCHED-02": "kueue_contention: d-sched-01-02-quota (admission latency), x-01-priority-order",
    "D-SCHED-03": "kueue_contention: d-sched-03-04-borrow-reclaim, x-03-lending-limit, x-09-cohort-tree",
    "D-SCHED-04": (
        "kueue_contention: d-sched-03-04-borrow-reclaim (reclaim on), d-sched-04-no-reclaim, "
        "x-10-borrow-within-cohort"
    ),
    "D-SCHED-05": "kueue_contention: d-sched-05-preempt-resume (preemption, the victim's SIGTERM save)",
    "D-SCHED-06": "kueue_contention: d-sched-06-gang (quota gang of a pod group)",
    "D-SCHED-07": "kueue_contention: Kueue's newest event vs kueue.reasons.waiting_reason",
    "D-GPU-MIG-01": "mig_validation: apply_layouts, resources advertised within N min (mig.reconfig)",
    "D-GPU-MIG-02": "mig_validation: refused_layout, a refused config ends failed (mig.reconfig)",
    "D-GPU-MIG-03": "mig_validation: a workload before and beside full neighbours (mig.isolation)",
    "D-GPU-MIG-04": "mig_validation: what the workload's container sees of them (mig.isolation)",
    "D-GPU-MIG-05": "kueue_contention: x-06-mig-profiles (quota); mig_validation: sold as profiles",
    "D-GPU-MIG-06": "mig_validation: busy_reconfig, a layout change under running work (mig.reconfig)",
    "D-GPU-TS-01": "gpu_operator_validation: each GPU node's advertised units vs GFD (mig.sharing)",
    **{
        f"D-JOB-CKPT-0{i}": "checkpoint_resume_drill and fleetval drill run (ckpt.judge)" for i in range(1, 8)
    },
}

BY_ID: Final[dict[str, Criterion]] = {c.id: c for c in CRITERIA}


def criteria_markdown() -> str:
    """The catalog as the Markdown table in docs/criteria.md (a test keeps the file in step)."""
    lines = [
        "# Criteria",
        "",
        f"Catalog version `{CATALOG_VERSION}`; `fleetval criteria` prints the same as JSON. Every verdict",
        "names one of these ids. *Implemented by* says which DAG and judge check it today; an empty",
        "cell means the criterion is specified but not yet checked.",
        "",
        "| id | layer | criterion | parameters | implemented by |",
        "|---|---|---|---|---|",
    ]
    for c in CRITERIA:
        params = ", ".join(f"{k}={v}" for k, v in c.parameters.items())
        lines.append(f"| {c.id} | {c.layer} | {c.statement} | {params} | {IMPLEMENTED_BY.get(c.id, '')} |")
    return "\n".join(lines) + "\n"


def get(criterion_id: str) -> Criterion:
    """The criterion with this id; an unknown id is a programming error, not a verdict."""
    try:
        return BY_ID[criterion_id]
    except KeyError:
        raise KeyError(f"unknown criterion id {criterion_id!r}") from None
