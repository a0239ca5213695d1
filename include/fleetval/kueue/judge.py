"""Judging a Kueue scenario: what one observation says about an expectation, and the verdicts a
whole run gives per criterion. Pure: observations in, verdicts out.

An observation is what the runner read at one instant, per scenario job: its Workload object (as
the API returned it), its pods, and the events Kueue wrote about the Workload. The history is what
the runner remembers across observations: when each job was first seen admitted, whether it was
ever evicted and why it was preempted, and every moment a gang had only part of its pods released.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.kueue.api import ADMISSION_GATE
from fleetval.kueue.reasons import detect_mode, reason_matches, waiting_reason
from fleetval.kueue.scenario import Expectation, Scenario, message_pattern, renamed_text
from fleetval.records import Result, Verdict

RULE_ID: Final = "kueue-scenario-v1"


@dataclass(frozen=True, slots=True)
class PodView:
    name: str
    phase: str
    gated: bool
    deleting: bool = False
    unschedulable: str = ""  # kube-scheduler's PodScheduled=False message, when it could not place it

    @property
    def ended(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodView:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        gates = spec.get("schedulingGates") or spec.get("scheduling_gates") or []
        scheduled: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or [] if (c or {}).get("type") == "PodScheduled"), {}
        )
        unschedulable = ""
        if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
            unschedulable = str(scheduled.get("message") or "Unschedulable")
        return cls(
            name=str(meta.get("name")),
            phase=str(status.get("phase") or "Unknown"),
            gated=any((g or {}).get("name") == ADMISSION_GATE for g in gates),
            deleting=bool(meta.get("deletionTimestamp") or meta.get("deletion_timestamp")),
            unschedulable=unschedulable,
        )


@dataclass(frozen=True, slots=True)
class JobView:
    workload: Mapping[str, Any] | None
    pods: tuple[PodView, ...] = ()
    events: tuple[Mapping[str, Any], ...] = ()  # Kueue's events on the Workload, oldest first

    def condition(self, kind: str) -> Mapping[str, Any] | None:
        for c in ((self.workload or {}).get("status") or {}).get("conditions") or []:
            if c.get("type") == kind:
                return c  # type: ignore[no-any-return]
        return None

    def true(self, kind: str) -> bool:
        c = self.condition(kind)
        return c is not None and c.get("status") == "True"

    @property
    def admitted(self) -> bool:
        return self.true("Admitted") and not self.true("Finished")

    @property
    def evictions(self) -> int:
        stats = ((self.workload or {}).get("status") or {}).get("schedulingStats") or {}
        return sum(int(e.get("count") or 0) for e in stats.get("evictions") or [])


@dataclass(frozen=True, slots=True)
class Observation:
    t: float  # seconds since the scenario started
    now: dt.datetime
    jobs: Mapping[str, JobView]


@dataclass
class History:
    admitted_seq: dict[str, int] = field(default_factory=dict)  # job -> order first seen admitted
    evicted: set[str] = field(default_factory=set)
    preempted_reasons: dict[str, set[str]] = field(default_factory=dict)
    partial_gangs: dict[str, list[float]] = field(default_factory=dict)  # job -> times seen partial
    workloads: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # the latest of each job
    # job -> pod -> [first, last] time seen deleted but still running (its SIGTERM save)
    terminating: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    present: dict[str, set[str]] = field(default_factory=dict)  # job -> its pods in the latest look

    def record(self, obs: Observation, sizes: Mapping[str, int]) -> None:
        for job, view in obs.jobs.items():
            if view.workload is not None:
                self.workloads[job] = view.workload
            if view.admitted and job not in self.admitted_seq:
                self.admitted_seq[job] = len(self.admitted_seq)
            if view.evictions or view.true("Evicted"):
                self.evicted.add(job)
            preempted = view.condition("Preempted")
            if preempted is not None and preempted.get("status") == "True":
                self.preempted_reasons.setdefault(job, set()).add(str(preempted.get("reason")))
            self.present[job] = {p.name for p in view.pods if not p.ended}
            for pod in view.pods:
                if pod.deleting and pod.phase == "Running":
                    seen = self.terminating.setdefault(job, {}).setdefault(pod.name, [obs.t, obs.t])
                    seen[1] = obs.t
            released = [p for p in view.pods if not p.gated and not p.deleting and not p.ended]
            if released and len(released) < sizes.get(job, 1):
                self.partial_gangs.setdefault(job, []).append(obs.t)


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    detail: str


def check(
    expect: Expectation,
    obs: Observation,
    history: History,
    names: Mapping[str, str],
    mode: str | None,
) -> Check:
    """Whether `expect` holds in `obs`; `detail` says what was seen when it does not."""
    for job in expect.jobs:
        view = obs.jobs.get(job) or JobView(None)
        problem = _job_problem(expect.checks, job, view, obs, history, names, mode)
        if problem:
            return Check(False, f"{job}: {problem}")
    order = expect.checks.get("admitted_order")
    if order:
        seq = [history.admitted_seq.get(j) for j in order]
        if any(s is None for s in seq):
            missing = [j for j, s in zip(order, seq, strict=True) if s is None]
            return Check(False, f"admitted_order: never admitted: {', '.join(missing)}")
        if any(a >= b for a, b in itertools.pairwise(seq)):  # type: ignore[operator]
            seen = sorted(order, key=lambda j: history.admitted_seq[j])
            return Check(False, f"admitted_order: admitted as {', '.join(seen)}")
    return Check(True, "as expected")


def _state(view: JobView) -> str:
    if view.workload is None:
        return "gone" if not view.pods else "queued"
    if view.true("Finished"):
        return "finished"
    if view.admitted:
        return "admitted"
    if view.true("QuotaReserved"):
        return "reserved"
    return "pending"


def _job_problem(
    checks: Mapping[str, Any],
    job: str,
    view: JobView,
    obs: Observation,
    history: History,
    names: Mapping[str, str],
    mode: str | None,
) -> str:
    state = _state(view)
    if "state" in checks and state != checks["state"]:
        return f"state {state}, expected {checks['state']}"
    reserved = view.condition("QuotaReserved") or {}
    if "reason" in checks:
        reason = str(reserved.get("reason") or "")
        if reserved.get("status") != "False" or not reason_matches(checks["reason"], reason, mode):
            wanted = f"{checks['reason']} ({mode or 'either mode'})"
            return f"QuotaReserved reason {reason or '(none)'}, expected the class {wanted}"
    message = str(reserved.get("message") or "")
    if "message" in checks:
        pattern = message_pattern(renamed_text(checks["message"], names))
        if not pattern.match(message):
            return f"QuotaReserved message {message!r}"
    if "message_contains" in checks and renamed_text(checks["message_contains"], names) not in message:
        return f"QuotaReserved message {message!r} lacks {checks['message_contains']!r}"
    live = [p for p in view.pods if not p.deleting]
    if "pods" in checks and len(live) != checks["pods"]:
        return f"{len(live)} pods, expected {checks['pods']}"
    running = sum(p.phase == "Running" for p in live)
    if "pods_running" in checks and running != checks["pods_running"]:
        unplaced = next((p.unschedulable for p in live if p.unschedulable), "")
        if view.admitted and unplaced:  # Kueue did its part: the nodes could not take the pods
            return (
                f"{running} pods running, expected {checks['pods_running']}: admitted by Kueue, but "
                f"kube-scheduler could not place it: {unplaced}"
            )
        return f"{running} pods running, expected {checks['pods_running']}"
    if "evicted" in checks and (job in history.evicted) != checks["evicted"]:
        return "was evicted" if job in history.evicted else "was never evicted"
    if "preempted_reason" in checks and checks["preempted_reason"] not in history.preempted_reasons.get(
        job, set()
    ):
        seen = sorted(history.preempted_reasons.get(job, set())) or ["never preempted"]
        return f"preempted {', '.join(seen)}, expected {checks['preempted_reason']}"
    if "flavor" in checks:
        wanted = names.get(checks["flavor"], checks["flavor"])
        assigned = _flavors(view.workload)
        if assigned != {wanted}:
            return f"admitted on flavor {', '.join(sorted(assigned)) or '(none)'}, expected {wanted}"
    if checks.get("gang") is True and history.partial_gangs.get(job):
        times = history.partial_gangs[job]
        return f"only part of the gang was released at t={times[0]:.1f}s ({len(times)} observations)"
    if "stopped_gracefully_s" in checks:
        return _graceful_problem(float(checks["stopped_gracefully_s"]), job, history)
    if checks.get("displayed_reason") is True:
        return _displayed_problem(view, obs.now)
    return ""


GRACE_SLACK_S: Final = (
    2.5  # looks are seconds apart on a busy machine: first and last sightings are late/early
)


def _graceful_problem(save_s: float, job: str, history: History) -> str:
    """Its deleted pods kept running `save_s` (their SIGTERM save) and then ended: the kubelet
    gave them their grace period, not a SIGKILL at once."""
    seen = history.terminating.get(job) or {}
    if not seen:
        return "no pod of it was seen stopping (deleted and still running)"
    still = sorted(set(seen) & history.present.get(job, set()))
    if still:
        return f"{still[0]} is still stopping"
    shortest = min(last - first for first, last in seen.values())
    if shortest < save_s - GRACE_SLACK_S:
        return f"a pod ran {shortest:.1f} s after its deletion, expected its {save_s:g} s save"
    return ""


def _flavors(workload: Mapping[str, Any] | None) -> set[str]:
    """The flavors a Workload's accelerators (or, without any, its resources) were admitted on."""
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    assigned = [ps.get("flavors") or {} for ps in admission.get("podSetAssignments") or []]
    accelerators = {f for flavors in assigned for r, f in flavors.items() if r.startswith("nvidia.com/")}
    return accelerators or {f for flavors in assigned for f in flavors.values()}


def _displayed_problem(view: JobView, now: dt.datetime) -> str:
    """D-SCHED-07: the newest Kueue event (what `kubectl describe` and consoles show) against the
    waiting reason derived from the conditions."""
    if view.workload is None:
        return "no Workload to derive a waiting reason from"
    derived = waiting_reason(view.workload, now)
    if derived.state != "Pending":
        shown = [e for e in view.events if e.get("reason") == derived.reason]
        return (
            ""
            if derived.state != "Admitted" or shown
            else f"derived {derived.state}, no {derived.reason} event shown"
        )
    if not view.events:
        return f"derived Pending ({derived.message!r}) but no event shows a reason"
    newest = view.events[-1]
    if (newest.get("reason"), newest.get("message")) != (derived.reason, derived.message):
        return (
            f"shown {newest.get('reason')}: {newest.get('message')!r}, "
            f"derived {derived.reason}: {derived.message!r}"
        )
    return ""


@dataclass(frozen=True, slots=True)
class StepResult:
    step: int
    criterion: str
    ok: bool
    detail: str
    waited_s: float  # from the step's start until it held (or the bound ran out)
    expect: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "criterion": self.criterion,
            "ok": self.ok,
            "detail": self.detail,
            "waited_s": round(self.waited_s, 3),
            "expect": dict(self.expect),
        }


def reason_mode(history: History) -> str | None:
    return detect_mode(list(history.workloads.values()))


def scenario_verdicts(
    scenario: Scenario,
    results: Sequence[StepResult],
    *,
    kueue_version: str,
    mode: str | None,
    harness_error: str = "",
    inconclusive: str = "",
    cluster: Mapping[str, Any] | None = None,
) -> list[Verdict]:
    """One verdict per criterion the scenario decides: fail if any of its expectations failed,
    pass if all held, error when the run broke before deciding it, inconclusive when no step
    checked it or the cluster cannot run the scenario meaningfully (`inconclusive` says why)."""
    against: dict[str, Any] = {
        "scenario": scenario.id,
        "scenario_sha256": scenario.digest,
        "kueue_version": kueue_version,
        "reason_mode": mode or "undetermined",
        "rule": RULE_ID,
    }
    if cluster:
        against["cluster"] = dict(cluster)
    verdicts = []
    for criterion in scenario.criteria:
        mine = [r for r in results if r.criterion == criterion]
        failed = [r for r in mine if not r.ok]
        evidence = {"steps": [r.to_json() for r in mine], "title": scenario.title}
        if inconclusive and not harness_error:
            result, reason = Result.INCONCLUSIVE, f"not run: {inconclusive}"
        elif failed:
            result, reason = Result.FAIL, f"step {failed[0].step}: {failed[0].detail}"
        elif harness_error:
            result, reason = Result.ERROR, harness_error
        elif not mine:
            result, reason = Result.INCONCLUSIVE, "no step of the scenario checked it"
        else:
            waited = max(r.waited_s for r in mine)
            result, reason = Result.PASS, f"{len(mine)} expectations held (slowest after {waited:.1f} s)"
        verdicts.append(
            Verdict(
                criterion=criterion,
                subject=f"kueue/{scenario.id}",
                result=result,
                action="none",
                rule_id=RULE_ID,
                reason=reason,
                evidence=evidence,
                judged_against=against,
            )
        )
    return verdicts
