"""The request the form sends, checked again at run time: every bad field named in one error."""

from __future__ import annotations

import re

import pytest

from fleetval.onboarding.request import (
    LABEL_VALUE_PATTERN,
    NODE_PATTERN,
    SELECTOR_PATTERN,
    OnboardingRequest,
    RequestError,
    validate_request,
)


def test_defaults_are_the_forms() -> None:
    request = validate_request({"rack": "r07"})
    assert request == OnboardingRequest(rack="r07")
    assert request.dcgm_level == 2 and request.run_pairs and request.establish_baseline
    assert not request.include_in_service and not request.dry_run
    assert validate_request(request.to_json()) == request


def test_every_bad_field_is_named_once() -> None:
    with pytest.raises(RequestError) as caught:
        validate_request(
            {
                "rack": "r07; rm -rf",
                "nodes": ["ok-node", "Bad_Node", "ok-node"],
                "dcgm_level": 1,
                "run_pairs": "yes",
                "approval_timeout_minutes": 0,
                "max_rack_fraction": 1.5,
            }
        )
    message = str(caught.value)
    for field in (
        "rack:",
        "nodes[1]:",
        "nodes[2]:",
        "dcgm_level:",
        "run_pairs:",
        "approval_timeout_minutes:",
    ):
        assert field in message
    assert "max_rack_fraction" in message and "listed twice" in message


def test_the_rack_is_required() -> None:
    with pytest.raises(RequestError, match="rack: required"):
        validate_request({})


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"rack": "r07\n"}, "rack"),  # JSON schema's `$` lets a trailing newline through; this does not
        ({"rack": "r07", "label_selector": "a in (b"}, "label_selector"),  # the form's pattern allows it
        ({"rack": "r07", "label_selector": "x=" + "v" * 64}, "label_selector"),
        ({"rack": "r07", "hardware_profile": "H100 80GB"}, "hardware_profile"),
        ({"rack": "r07", "nodes": "r07-n01"}, "nodes"),
        ({"rack": "r07", "approval_timeout_minutes": True}, "approval_timeout_minutes"),
        ({"rack": "r07", "approval_timeout_minutes": float("nan")}, "approval_timeout_minutes"),
        ({"rack": "r07", "dcgm_level": True}, "dcgm_level"),
        ({"rack": "r07", "operator_namespace": "GPU_Operator"}, "operator_namespace"),
    ],
)
def test_refused(params: dict[str, object], field: str) -> None:
    with pytest.raises(RequestError, match=f"{field}"):
        validate_request(params)


def test_optional_fields_may_be_empty() -> None:
    request = validate_request({"rack": "r07", "label_selector": None, "hardware_profile": "", "nodes": []})
    assert request.label_selector is None and request.hardware_profile is None and request.nodes == ()
    picked = validate_request({"rack": "r07", "label_selector": "fleetval.io/batch in (a,b),!gone"})
    assert picked.label_selector == "fleetval.io/batch in (a,b),!gone"


def test_the_forms_patterns_are_the_checks() -> None:
    """The Params use these patterns: what the form lets through, the run accepts."""
    assert re.search(LABEL_VALUE_PATTERN, "NVIDIA-H100-80GB-HBM3")
    assert not re.search(LABEL_VALUE_PATTERN, "-r01")
    assert re.search(NODE_PATTERN, "r01-n01.example.com")
    assert not re.search(NODE_PATTERN, "R01")
    assert re.search(SELECTOR_PATTERN, "a=b,c!=d,e in (f, g)")
    assert not re.search(SELECTOR_PATTERN, "")
