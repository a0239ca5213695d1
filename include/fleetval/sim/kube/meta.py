"""Object plumbing the simulated controllers share: owner references, timestamps, conditions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Final

TERMINAL: Final = frozenset({"Succeeded", "Failed"})
EVENT_MESSAGE_LIMIT: Final = 1024  # record.EventRecorder truncates notes at this length


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: Any) -> float | None:
    try:
        return dt.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


def uid_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def controller_ref(owner: Mapping[str, Any]) -> dict[str, Any]:
    """metav1.NewControllerRef: the owner as controller, blocking its foreground deletion."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller (the owner reference with `controller: true`)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return str(ref.get("uid") or "")
    return None


def controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """metav1.IsControlledBy."""
    return controller_uid(obj) == uid_of(owner)


def owned(objects: Iterable[dict[str, Any]], owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    uid = uid_of(owner)
    return [o for o in objects if controller_uid(o) == uid]


def phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def condition(status: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return None


def condition_true(status: Mapping[str, Any], kind: str) -> bool:
    found = condition(status, kind)
    return found is not None and found.get("status") == "True"


def truncate_event(message: str) -> str:
    return message if len(message) <= EVENT_MESSAGE_LIMIT else message[: EVENT_MESSAGE_LIMIT - 3] + "..."
