"""Judging a checkpoint drill: seven verdicts (D-JOB-CKPT-01..07) from the runs' logs and the
storage as the drill found it. Pure: evidence in, verdicts out.

The drill (`fleetval.ckpt.drill`) runs an uninterrupted reference run and three interrupted runs,
each resumed to the same last step: killed inside a save, preempted with SIGTERM, and left with a
corrupted newest checkpoint. What a resumed run must do is fixed by what was on the storage when
it started (the listing), so every verdict names the checkpoint it expected and the one used.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval import criteria
from fleetval.ckpt.contract import COMPONENTS, checkpoint_name
from fleetval.ckpt.parse import Listing, RunLog
from fleetval.records import Result, Verdict

RULE_ID: Final = "ckpt-drill-v1"
KILL, SIGTERM, CORRUPT = "kill_in_save", "sigterm", "corrupt"
SCENARIOS: Final = (KILL, SIGTERM, CORRUPT)


@dataclass(frozen=True, slots=True)
class Policy:
    """Thresholds, from the criteria catalog (D-JOB-CKPT-03 and -05)."""

    max_save_s: float = float(criteria.get("D-JOB-CKPT-05").parameters["max_save_s"])
    max_save_share: float = float(criteria.get("D-JOB-CKPT-05").parameters["max_save_share"])
    gpu_loss_rtol: float = float(criteria.get("D-JOB-CKPT-03").parameters["gpu_loss_rtol"])

    def to_json(self) -> dict[str, Any]:
        return {
            "rule_id": RULE_ID,
            "criteria_catalog": criteria.CATALOG_VERSION,
            "max_save_s": self.max_save_s,
            "max_save_share": self.max_save_share,
            "gpu_loss_rtol": self.gpu_loss_rtol,
        }


@dataclass(frozen=True, slots=True)
class RunRecord:
    log: RunLog
    exit_code: int | None
    error: str | None = None  # the harness could not run or read it


@dataclass(frozen=True, slots=True)
class Interruption:
    """What the drill did to the run: which signal, at which step, and how the run ended."""

    landed: bool  # the kill came inside a save / the signal at a step the run was still in
    at_step: int | None = None
    grace_s: float | None = None
    seconds_to_exit: float | None = None
    killed_after_grace: bool = False
    corrupted: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ScenarioEvidence:
    interrupted: RunRecord
    interruption: Interruption
    listing: Listing | None  # the storage when the resume started
    resumed: RunRecord
    listing_error: str | None = None


@dataclass(frozen=True, slots=True)
class DrillEvidence:
    subject: str
    steps: int
    reference: RunRecord
    scenarios: Mapping[str, ScenarioEvidence] = field(default_factory=dict)


class _Verdicts:
    def __init__(self, evidence: DrillEvidence, policy: Policy) -> None:
        self.evidence, self.policy = evidence, policy

    def make(self, criterion: str, result: Result, reason: str, **facts: Any) -> Verdict:
        return Verdict(
            criterion=criterion,
            subject=self.evidence.subject,
            result=result,
            action="none" if result is Result.PASS else "review the training job's checkpointing",
            rule_id=RULE_ID,
            reason=reason,
            evidence=facts,
            judged_against=self.policy.to_json(),
        )


def _harness(scenario: ScenarioEvidence) -> str | None:
    for role, run in (("interrupted run", scenario.interrupted), ("resumed run", scenario.resumed)):
        if run.error:
            return f"{role}: {run.error}"
    if scenario.listing is None:
        return f"the checkpoint directory could not be read: {scenario.listing_error or 'no listing'}"
    return None


def _reference_problem(evidence: DrillEvidence) -> str | None:
    ref = evidence.reference
    if ref.error:
        return f"the reference run: {ref.error}"
    steps = [s.step for s in ref.log.steps]
    if steps != list(range(1, evidence.steps + 1)):
        return (
            f"the reference run logged {len(steps)} steps (exit code {ref.exit_code}), not steps 1.."
            f"{evidence.steps}: nothing to compare resumed runs with"
        )
    return None


def judge_drill(evidence: DrillEvidence, policy: Policy | None = None) -> list[Verdict]:
    policy = policy or Policy()
    v = _Verdicts(evidence, policy)
    ids = [f"D-JOB-CKPT-0{i}" for i in range(1, 8)]
    if (problem := _reference_problem(evidence)) is not None:
        result = Result.ERROR if evidence.reference.error else Result.INCONCLUSIVE
        return [v.make(c, result, problem, reference_exit_code=evidence.reference.exit_code) for c in ids]
    return [
        _continuity(v),
        _completeness(v),
        _losses(v),
        _atomic(v),
        _save_time(v),
        _corruption(v),
        _preemption(v),
    ]


def _scenarios(v: _Verdicts, names: tuple[str, ...]) -> tuple[dict[str, ScenarioEvidence], dict[str, str]]:
    usable, broken = {}, {}
    for name in names:
        scenario = v.evidence.scenarios.get(name)
        if scenario is None:
            broken[name] = "not run"
        elif (why := _harness(scenario)) is not None:
            broken[name] = why
        else:
            usable[name] = scenario
    return usable, broken


def _not_judged(v: _Verdicts, criterion: str, broken: Mapping[str, str]) -> Verdict:
    return v.make(
        criterion,
        Result.ERROR,
        "; ".join(f"{name}: {why}" for name, why in broken.items()),
        harness=dict(broken),
    )


def _combine(
    v: _Verdicts,
    criterion: str,
    per: Mapping[str, tuple[Result, str, dict[str, Any]]],
    broken: Mapping[str, str],
) -> Verdict:
    if not per:
        return _not_judged(v, criterion, broken)
    worst = max((r for r, _, _ in per.values()), key=lambda r: r.severity)
    if broken and worst.severity < Result.ERROR.severity:
        worst = Result.ERROR if worst is Result.PASS else worst
    reasons = [f"{name}: {reason}" for name, (result, reason, _) in per.items() if result is worst]
    reasons += [f"{name}: {why}" for name, why in broken.items()]
    facts = {name: {"result": r.value, "reason": reason, **f} for name, (r, reason, f) in per.items()}
    if broken:
        facts["harness"] = dict(broken)
    return v.make(criterion, worst, "; ".join(reasons), scenarios=facts)


# --- D-JOB-CKPT-01 -----------------------------------------------------------------------------
def _continuity(v: _Verdicts) -> Verdict:
    usable, broken = _scenarios(v, SCENARIOS)
    per = {}
    for name, s in usable.items():
        assert s.listing is not None
        expected = s.listing.last_complete()
        log = s.resumed.log
        from_step = log.from_step
        steps = [r.step for r in log.steps]
        facts: dict[str, Any] = {"last_complete_checkpoint": expected, "from_step": from_step}
        if from_step is None:
            per[name] = (
                Result.FAIL,
                f"the resumed run never started training (exit code {s.resumed.exit_code})",
                facts,
            )
            continue
        facts["first_step"] = steps[0] if steps else None
        facts["last_step"] = steps[-1] if steps else None
        wanted = list(range(from_step + 1, v.evidence.steps + 1))
        if from_step != expected:
            per[name] = (
                Result.FAIL,
                f"resumed from step {from_step}, but the last complete checkpoint is step {expected}",
                facts,
            )
        elif steps != wanted:
            skipped = sorted(set(wanted) - set(steps))
            repeated = sorted({x for x in steps if steps.count(x) > 1} | {x for x in steps if x <= from_step})
            facts.update(skipped=skipped[:20], repeated=repeated[:20], skipped_count=len(skipped))
            what = f"steps {skipped[:5]} skipped" if skipped else f"steps {repeated[:5]} repeated"
            per[name] = (
                Result.FAIL,
                f"after checkpoint {from_step} the run did not continue at step {from_step + 1}: {what}",
                facts,
            )
        else:
            per[name] = (
                Result.PASS,
                f"resumed at step {from_step + 1} after checkpoint {from_step}, ran to {steps[-1]}",
                facts,
            )
    return _combine(v, "D-JOB-CKPT-01", per, broken)


# --- D-JOB-CKPT-02 -----------------------------------------------------------------------------
def _completeness(v: _Verdicts) -> Verdict:
    usable, broken = _scenarios(v, SCENARIOS)
    reference = {r.step: r.state for r in v.evidence.reference.log.steps}
    per = {}
    for name, s in usable.items():
        assert s.listing is not None
        start, from_step = s.resumed.log.start, s.resumed.log.from_step
        facts: dict[str, Any] = {"from_step": from_step}
        if start is None or from_step is None:
            per[name] = (Result.FAIL, "the resumed run never reported what it restored", facts)
            continue
        if from_step == 0:
            result = Result.FAIL if s.listing.last_complete() else Result.INCONCLUSIVE
            per[name] = (result, "the resumed run restored nothing (a fresh start)", facts)
            continue
        stored = s.listing.checkpoints.get(checkpoint_name(from_step))
        saved = stored.components() if stored else []
        missing_saved = [c for c in COMPONENTS if c not in saved]
        state = start.get("state")
        restored: Mapping[str, Any] = state if isinstance(state, dict) else {}
        expected = reference.get(from_step, {})
        differing = [c for c in COMPONENTS if c in restored and c in expected and restored[c] != expected[c]]
        unreported = [c for c in COMPONENTS if c not in restored or c not in expected]
        facts.update(
            saved_components=saved,
            missing_from_checkpoint=missing_saved,
            differs_from_reference=differing,
            not_reported=unreported,
        )
        if missing_saved or differing:
            parts = []
            if missing_saved:
                parts.append(f"checkpoint {checkpoint_name(from_step)} does not hold {missing_saved}")
            if differing:
                parts.append(
                    f"restored {differing} differ from the reference run's state after step {from_step}"
                )
            per[name] = (Result.FAIL, "; ".join(parts), facts)
        elif unreported:
            per[name] = (
                Result.INCONCLUSIVE,
                f"the job did not report digests of {unreported} after restoring",
                facts,
            )
        else:
            per[name] = (
                Result.PASS,
                f"all {len(COMPONENTS)} components restored equal to the reference after step {from_step}",
                facts,
            )
    return _combine(v, "D-JOB-CKPT-02", per, broken)


# --- D-JOB-CKPT-03 -----------------------------------------------------------------------------
def _mismatches(
    log: RunLog, reference: Mapping[int, float], rtol: float
) -> list[tuple[int, float, float | None]]:
    """Steps whose loss differs from the reference's (exactly when rtol is 0), or that it lacks."""
    out = []
    for r in log.steps:
        ref = reference.get(r.step)
        differs = ref is None or not math.isfinite(r.loss)
        if ref is not None and not differs:
            differs = (r.loss != ref) if rtol == 0 else abs(r.loss - ref) > rtol * max(abs(ref), 1e-12)
        if differs:
            out.append((r.step, r.loss, ref))
    return out


def _losses(v: _Verdicts) -> Verdict:
    usable, broken = _scenarios(v, SCENARIOS)
    reference = {r.step: r.loss for r in v.evidence.reference.log.steps}
    per = {}
    for name, s in usable.items():
        start = s.resumed.log.start or {}
        exact = bool(start.get("deterministic", start.get("device", "cpu") == "cpu"))
        tolerance = 0.0 if exact else v.policy.gpu_loss_rtol
        facts: dict[str, Any] = {"comparison": "bitwise" if exact else f"rtol {tolerance}"}

        before = _mismatches(s.interrupted.log, reference, tolerance)
        after = _mismatches(s.resumed.log, reference, tolerance)
        facts.update(
            steps_compared=len(s.resumed.log.steps),
            mismatched=len(after),
            bad_step_lines=s.resumed.log.bad_lines,
        )
        if after:
            step, loss, ref = after[0]
            facts.update(first_mismatch={"step": step, "loss": loss, "reference": ref})
        if not s.resumed.log.steps:
            per[name] = (Result.FAIL, "the resumed run logged no steps to compare", facts)
        elif before:
            step, loss, ref = before[0]
            facts["interrupted_run_mismatch"] = {"step": step, "loss": loss, "reference": ref}
            per[name] = (
                Result.INCONCLUSIVE,
                f"the job is not reproducible: even before the interruption step {step} gave {loss!r}, "
                f"the reference {ref!r}",
                facts,
            )
        elif after:
            step, loss, ref = after[0]
            per[name] = (
                Result.FAIL,
                f"{len(after)} of {len(s.resumed.log.steps)} resumed steps differ from the reference; "
                f"first at step {step}: {loss!r} vs {ref!r}",
                facts,
            )
        elif s.resumed.log.bad_lines:
            per[name] = (
                Result.INCONCLUSIVE,
                f"{s.resumed.log.bad_lines} step lines could not be read",
                facts,
            )
        else:
            per[name] = (
                Result.PASS,
                f"{len(s.resumed.log.steps)} resumed losses equal the reference ({facts['comparison']})",
                facts,
            )
    return _combine(v, "D-JOB-CKPT-03", per, broken)


# --- D-JOB-CKPT-04 -----------------------------------------------------------------------------
def _atomic(v: _Verdicts) -> Verdict:
    usable, broken = _scenarios(v, (KILL,))
    per = {}
    for name, s in usable.items():
        assert s.listing is not None
        listing, last = s.listing, s.interrupted.log.last_event
        facts: dict[str, Any] = {
            "killed_at_step": s.interruption.at_step,
            "last_event_before_kill": dict(last) if last else None,
            "latest": listing.latest,
            "saves_left_in_progress": list(listing.temporary),
        }
        if not s.interruption.landed:
            per[name] = (Result.INCONCLUSIVE, "the kill did not land inside a save", facts)
            continue
        if listing.latest is None:
            result = Result.PASS if not listing.latest_present and not listing.checkpoints else Result.FAIL
            reason = (
                "no checkpoint before the kill and none claimed"
                if result is Result.PASS
                else "the latest pointer is missing or unreadable after the kill"
            )
            per[name] = (result, reason, facts)
            continue
        stored = listing.checkpoints.get(listing.latest)
        problems = stored.integrity_problems() if stored else [f"{listing.latest} does not exist"]
        facts["latest_problems"] = problems
        if problems:
            per[name] = (
                Result.FAIL,
                f"after a kill inside a save, latest names {listing.latest}, which is partial: {problems[0]}",
                facts,
            )
        else:
            per[name] = (
                Result.PASS,
                f"after a kill inside the save of step {s.interruption.at_step}, "
                f"latest still names the intact {listing.latest}",
                facts,
            )
    return _combine(v, "D-JOB-CKPT-04", per, broken)


# --- D-JOB-CKPT-05 -----------------------------------------------------------------------------
def _save_time(v: _Verdicts) -> Verdict:
    log = v.evidence.reference.log
    saves = [
        float(e["seconds"]) for e in log.of("checkpoint_saved") if isinstance(e.get("seconds"), int | float)
    ]
    step_seconds = [r.seconds for r in log.steps if r.seconds is not None]
    start = log.start or {}
    save_every = start.get("save_every")
    facts: dict[str, Any] = {"saves": len(saves), "save_every": save_every}
    if not saves:
        return v.make("D-JOB-CKPT-05", Result.FAIL, "the reference run saved no checkpoint", **facts)
    if not step_seconds or not isinstance(save_every, int) or save_every < 1:
        return v.make(
            "D-JOB-CKPT-05",
            Result.INCONCLUSIVE,
            "the job did not report its step times or save interval",
            **facts,
        )
    median_save, median_step = statistics.median(saves), statistics.median(step_seconds)
    share = median_save / (save_every * median_step) if median_step > 0 else math.inf
    facts.update(
        max_save_s=round(max(saves), 4),
        median_save_s=round(median_save, 4),
        median_step_s=round(median_step, 5),
        save_share=round(share, 4),
    )
    over = []
    if max(saves) > v.policy.max_save_s:
        over.append(f"a save took {max(saves):.2f} s (budget {v.policy.max_save_s:g} s)")
    if share > v.policy.max_save_share:
        over.append(
            f"a save costs {share:.1%} of the {save_every} steps between saves "
            f"(budget {v.policy.max_save_share:.0%})"
        )
    if over:
        return v.make("D-JOB-CKPT-05", Result.FAIL, "; ".join(over), **facts)
    return v.make(
        "D-JOB-CKPT-05",
        Result.PASS,
        f"saves took at most {max(saves):.3f} s, {share:.1%} of the training between saves",
        **facts,
    )


# --- D-JOB-CKPT-06 -----------------------------------------------------------------------------
def _corruption(v: _Verdicts) -> Verdict:
    usable, broken = _scenarios(v, (CORRUPT,))
    per = {}
    for name, s in usable.items():
        assert s.listing is not None
        corrupted = dict(s.interruption.corrupted or {})
        bad = str(corrupted.get("checkpoint") or "")
        previous = s.listing.last_complete()
        log = s.resumed.log
        rejected = [e for e in log.of("checkpoint_rejected") if e.get("path") == bad]
        facts: dict[str, Any] = {
            "corrupted": corrupted,
            "previous_good": previous,
            "from_step": log.from_step,
            "rejection": dict(rejected[0]) if rejected else None,
        }
        if not bad or not s.interruption.landed:
            per[name] = (Result.ERROR, "the drill could not corrupt a checkpoint", facts)
        elif previous == 0:
            per[name] = (
                Result.INCONCLUSIVE,
                "no intact checkpoint older than the corrupted one to fall back to",
                facts,
            )
        elif log.from_step is None:
            per[name] = (
                Result.FAIL,
                f"the job failed to start on the corrupted {bad} (exit code {s.resumed.exit_code}) "
                "instead of falling back",
                facts,
            )
        elif checkpoint_name(log.from_step) == bad:
            per[name] = (Result.FAIL, f"the job loaded the corrupted {bad} without noticing", facts)
        elif log.from_step != previous:
            per[name] = (
                Result.FAIL,
                f"the job fell back to step {log.from_step}, "
                f"not the previous good {checkpoint_name(previous)}",
                facts,
            )
        else:
            noticed = "rejected it" if rejected else "skipped it without saying why"
            per[name] = (
                Result.PASS,
                f"the job {noticed} and resumed from the previous good {checkpoint_name(previous)}",
                facts,
            )
    return _combine(v, "D-JOB-CKPT-06", per, broken)


# --- D-JOB-CKPT-07 -----------------------------------------------------------------------------
def _preemption(v: _Verdicts) -> Verdict:
    usable, broken = _scenarios(v, (SIGTERM,))
    per = {}
    for name, s in usable.items():
        assert s.listing is not None
        i, log = s.interruption, s.interrupted.log
        at = i.at_step or 0
        saved_after = [
            e for e in log.of("checkpoint_saved") if isinstance(e.get("step"), int) and e["step"] >= at
        ]
        saved_step = int(saved_after[-1]["step"]) if saved_after else None
        from_step = s.resumed.log.from_step
        facts: dict[str, Any] = {
            "signal_at_step": i.at_step,
            "grace_s": i.grace_s,
            "seconds_to_exit": i.seconds_to_exit,
            "killed_after_grace": i.killed_after_grace,
            "exit_code": s.interrupted.exit_code,
            "checkpoint_after_signal": saved_step,
            "latest_after_exit": s.listing.latest,
            "resumed_from": from_step,
        }
        if not i.landed:
            per[name] = (Result.INCONCLUSIVE, "the run ended before the SIGTERM could be sent", facts)
        elif saved_step is None:
            lost = at - (from_step or 0)
            facts["steps_lost"] = lost
            per[name] = (
                Result.FAIL,
                f"no checkpoint after SIGTERM at step {at} (exit code {s.interrupted.exit_code}); "
                f"the resume went back to step {from_step}, {lost} steps lost",
                facts,
            )
        elif i.killed_after_grace:
            per[name] = (
                Result.FAIL,
                f"the job was still running when the {i.grace_s:g} s grace period ended",
                facts,
            )
        elif from_step != saved_step:
            per[name] = (
                Result.FAIL,
                f"the SIGTERM checkpoint at step {saved_step} was not used: resumed from {from_step}",
                facts,
            )
        else:
            took = f" in {i.seconds_to_exit:.2f} s" if i.seconds_to_exit is not None else ""
            per[name] = (
                Result.PASS,
                f"saved step {saved_step} on SIGTERM and exited{took} (grace {i.grace_s:g} s); "
                "the resume used it",
                facts,
            )
    return _combine(v, "D-JOB-CKPT-07", per, broken)
