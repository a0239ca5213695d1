"""What a Workload's conditions mean to a user: the waiting reason (D-SCHED-07) and the
version-dependent condition reasons.

Kueue's reasons differ by version and feature gate: with `UnadmittedWorkloadsObservability` off
(v0.19 by default) a pending Workload reads `QuotaReserved=False/Pending` (`Inadmissible` for a
queue blocker); with it on (v0.20 by default) the reason is granular (`WaitingForQuota`,
`ExceedsMaxQuota`, `Misconfigured`, ...) and `Admitted=False/NoReservation` appears. Scenarios
name a reason *class*; `REASON_CLASSES` gives the reason each mode writes, and the mode is
detected from what the cluster wrote, never assumed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

LEGACY: Final = "legacy"  # UnadmittedWorkloadsObservability off
GRANULAR: Final = "granular"  # on

# class -> (reason with the gate off, reason with it on)
REASON_CLASSES: Final[Mapping[str, tuple[str, str]]] = {
    "waiting_for_quota": ("Pending", "WaitingForQuota"),
    "exceeds_quota": ("Pending", "ExceedsMaxQuota"),
    "no_matching_flavor": ("Pending", "NoMatchingFlavor"),
    "waiting_for_preemption": ("Pending", "WaitingForPreemptedWorkloads"),
    "waiting_for_pods_ready": ("Pending", "WaitingForPodsReady"),
    "pending_evaluation": ("Pending", "PendingEvaluation"),
    "misconfigured": ("Inadmissible", "Misconfigured"),
    "queue_inactive": ("Inadmissible", "Suspended"),
    "namespace_not_selected": ("Pending", "Misconfigured"),
}
_GRANULAR_ONLY: Final = frozenset(granular for _, granular in REASON_CLASSES.values()) - {"Pending"}


def detect_mode(workloads: Sequence[Mapping[str, Any]]) -> str | None:
    """GRANULAR or LEGACY from the reasons a cluster wrote, or None when no pending Workload
    says (then any reason of the class is accepted, and the evidence says so)."""
    for wl in workloads:
        for c in _conditions(wl).values():
            if c.get("type") == "Admitted" and c.get("reason") == "NoReservation":
                return GRANULAR
            if c.get("type") == "QuotaReserved" and c.get("status") == "False":
                if c.get("reason") in _GRANULAR_ONLY:
                    return GRANULAR
                if c.get("reason") in ("Pending", "Inadmissible"):
                    return LEGACY
    return None


def reason_matches(reason_class: str, reason: str, mode: str | None) -> bool:
    legacy, granular = REASON_CLASSES[reason_class]
    if mode == LEGACY:
        return reason == legacy
    if mode == GRANULAR:
        return reason == granular
    return reason in (legacy, granular)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _conditions(wl: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = _mapping(wl.get("status"))
    return {str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}


def _true(c: Mapping[str, Any] | None) -> bool:
    return c is not None and c.get("status") == "True"


@dataclass(frozen=True, slots=True)
class WaitingReason:
    """What a console should show for a Workload: a state, the condition reason, its message."""

    # Finished | Deactivated | Evicting | Admitted | WaitingForAdmissionChecks | Backoff | Pending | Queued
    state: str
    reason: str | None
    message: str | None

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "reason": self.reason, "message": self.message}


def _time(text: Any) -> dt.datetime | None:
    if isinstance(text, dt.datetime):  # YAML reads an unquoted timestamp as one
        return text if text.tzinfo else text.replace(tzinfo=dt.UTC)
    if not isinstance(text, str):
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def waiting_reason(wl: Mapping[str, Any], now: dt.datetime) -> WaitingReason:
    """The one derivation of the user-facing waiting reason from a Workload's conditions, in
    precedence order: finished, deactivated, being evicted, admitted, reserved but waiting for
    admission checks, in requeue backoff, pending (the QuotaReserved message verbatim), queued
    but never evaluated (no condition yet: not an error)."""
    c = _conditions(wl)
    spec, status = _mapping(wl.get("spec")), _mapping(wl.get("status"))

    def of(kind: str) -> tuple[str | None, str | None]:
        cond = c.get(kind) or {}
        return cond.get("reason"), cond.get("message")

    if _true(c.get("Finished")):
        return WaitingReason("Finished", *of("Finished"))
    if spec.get("active") is False:
        return WaitingReason("Deactivated", *of("Evicted"))
    if _true(c.get("Evicted")) and _true(c.get("QuotaReserved")):
        return WaitingReason("Evicting", *of("Evicted"))
    if _true(c.get("Admitted")):
        return WaitingReason("Admitted", "Admitted", of("Admitted")[1])
    if _true(c.get("QuotaReserved")):
        return WaitingReason("WaitingForAdmissionChecks", *of("Admitted"))
    requeue = status.get("requeueState")
    requeue_at = _time(requeue.get("requeueAt")) if isinstance(requeue, Mapping) else None
    if requeue_at is not None and requeue_at > now:
        return WaitingReason("Backoff", of("Requeued")[0], f"requeue at {requeue_at:%Y-%m-%dT%H:%M:%SZ}")
    if (c.get("QuotaReserved") or {}).get("status") == "False":
        return WaitingReason("Pending", *of("QuotaReserved"))
    return WaitingReason("Queued", None, None)
