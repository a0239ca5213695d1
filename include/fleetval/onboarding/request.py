"""What an operator asks `rack_onboarding` for, and the checks on it.

The same constants shape the DAG's trigger form (JSON-schema patterns, enums, bounds: the form
refuses bad input before a run exists) and `validate_request`, which checks the run's params again
in its first task: a run started through the REST API or the CLI with a conf the form never saw
gets one clear error naming every bad field, not a failure deep in a later task.

Selection: `rack` is always given (the rack being onboarded). Without `nodes` and
`label_selector` the rack is every GPU node labelled with it; `nodes` and/or `label_selector`
pick nodes instead (both: the listed nodes that match), and a picked node without a rack label
is given this one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from fleetval.errors import FleetvalError
from fleetval.k8s.selectors import SelectorError, parse_label_selector
from fleetval.policy.blast_radius import ActionBudget

# A label value (the rack and the profile are label values: fleetval.io/rack, nvidia.com/gpu.product).
LABEL_VALUE_PATTERN: Final = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
# A node name: a DNS-1123 subdomain.
NODE_PATTERN: Final = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
# A namespace: a DNS-1123 label.
NAMESPACE_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# The characters a label selector is written with; its grammar is checked by the API server's
# parser (fleetval.k8s.selectors) in the first task.
SELECTOR_PATTERN: Final = r"^[A-Za-z0-9!][A-Za-z0-9_./=!,() -]*$"
SELECTOR_MAX: Final = 1024
MAX_LISTED_NODES: Final = 1024
DCGM_LEVELS: Final = (2, 3)  # the onboarding gate needs r2 at least (D-DEV-01)
DEFAULT_DCGM_LEVEL: Final = 2
DEFAULT_TIMEOUT_MINUTES: Final = 24 * 60
MAX_TIMEOUT_MINUTES: Final = 7 * 24 * 60
DEFAULT_OPERATOR_NAMESPACE: Final = "gpu-operator"
# Taking nodes that serve out of service (re-onboarding them) is within the action budget.
DEFAULT_BUDGET: Final = ActionBudget()


class RequestError(FleetvalError):
    """The run's parameters are not a request rack_onboarding can carry out (the message names each field)."""


@dataclass(frozen=True, slots=True)
class OnboardingRequest:
    rack: str
    nodes: tuple[str, ...] = ()
    label_selector: str | None = None
    hardware_profile: str | None = None
    dcgm_level: int = DEFAULT_DCGM_LEVEL
    run_pairs: bool = True
    establish_baseline: bool = True
    include_in_service: bool = False
    approval_timeout_minutes: float = DEFAULT_TIMEOUT_MINUTES
    operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE
    max_action_fraction: float = DEFAULT_BUDGET.max_fleet_fraction
    max_rack_fraction: float = DEFAULT_BUDGET.max_rack_fraction
    dry_run: bool = False

    @property
    def budget(self) -> ActionBudget:
        return ActionBudget(self.max_action_fraction, self.max_rack_fraction)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "nodes": list(self.nodes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OnboardingRequest:
        return validate_request(data)


def _text(
    errors: list[str], params: Mapping[str, Any], key: str, pattern: str, *, optional: bool
) -> str | None:
    value = params.get(key)
    if value is None or (optional and value == ""):
        if not optional:
            errors.append(f"{key}: required")
        return None
    if not isinstance(value, str):
        errors.append(f"{key}: must be a string, got {type(value).__name__}")
        return None
    if not re.fullmatch(pattern.strip("^$"), value):
        errors.append(f"{key}: {value[:80]!r} does not match {pattern}")
        return None
    return value


def _flag(errors: list[str], params: Mapping[str, Any], key: str, default: bool) -> bool:
    value = params.get(key, default)
    if not isinstance(value, bool):
        errors.append(f"{key}: must be true or false, got {value!r:.40}")
        return default
    return value


def _number(
    errors: list[str], params: Mapping[str, Any], key: str, default: float, low: float, high: float
) -> float:
    """A number in (low, high]."""
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        errors.append(f"{key}: must be a number, got {value!r:.40}")
        return default
    if not low < value <= high:
        errors.append(f"{key}: must be in ({low}, {high}], got {value}")
        return default
    return float(value)


def validate_request(params: Mapping[str, Any]) -> OnboardingRequest:
    """The request the params stand for; RequestError naming every bad field otherwise."""
    errors: list[str] = []
    rack = _text(errors, params, "rack", LABEL_VALUE_PATTERN, optional=False)
    raw_nodes = params.get("nodes") or []
    nodes: list[str] = []
    if not isinstance(raw_nodes, list | tuple):
        errors.append(f"nodes: must be a list of node names, got {type(raw_nodes).__name__}")
    elif len(raw_nodes) > MAX_LISTED_NODES:
        errors.append(f"nodes: at most {MAX_LISTED_NODES} names, got {len(raw_nodes)}")
    else:
        for i, name in enumerate(raw_nodes):
            if not isinstance(name, str) or not re.fullmatch(NODE_PATTERN.strip("^$"), name):
                errors.append(f"nodes[{i}]: {name!r:.80} is not a node name")
            elif name in nodes:
                errors.append(f"nodes[{i}]: {name!r} is listed twice")
            else:
                nodes.append(name)
    selector = _text(errors, params, "label_selector", SELECTOR_PATTERN, optional=True)
    if selector is not None:
        if len(selector) > SELECTOR_MAX:
            errors.append(f"label_selector: at most {SELECTOR_MAX} characters")
        else:
            try:
                parse_label_selector(selector)
            except SelectorError as exc:
                errors.append(f"label_selector: {exc}")
    profile = _text(errors, params, "hardware_profile", LABEL_VALUE_PATTERN, optional=True)
    level = params.get("dcgm_level", DEFAULT_DCGM_LEVEL)
    if isinstance(level, bool) or level not in DCGM_LEVELS:
        errors.append(f"dcgm_level: must be one of {list(DCGM_LEVELS)}, got {level!r:.40}")
        level = DEFAULT_DCGM_LEVEL
    namespace = _text(errors, params, "operator_namespace", NAMESPACE_PATTERN, optional=True)
    request = OnboardingRequest(
        rack=rack or "",
        nodes=tuple(nodes),
        label_selector=selector,
        hardware_profile=profile,
        dcgm_level=int(level),
        run_pairs=_flag(errors, params, "run_pairs", True),
        establish_baseline=_flag(errors, params, "establish_baseline", True),
        include_in_service=_flag(errors, params, "include_in_service", False),
        approval_timeout_minutes=_number(
            errors, params, "approval_timeout_minutes", DEFAULT_TIMEOUT_MINUTES, 0, MAX_TIMEOUT_MINUTES
        ),
        operator_namespace=namespace or DEFAULT_OPERATOR_NAMESPACE,
        max_action_fraction=_number(
            errors, params, "max_action_fraction", DEFAULT_BUDGET.max_fleet_fraction, 0, 1
        ),
        max_rack_fraction=_number(
            errors, params, "max_rack_fraction", DEFAULT_BUDGET.max_rack_fraction, 0, 1
        ),
        dry_run=_flag(errors, params, "dry_run", False),
    )
    if errors:
        raise RequestError("rack_onboarding params: " + "; ".join(errors))
    return request
