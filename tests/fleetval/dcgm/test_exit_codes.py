"""dcgmi's exit codes per supported DCGM version: a run DCGM refused because another client held
the GPUs (dcgm-exporter's profiling metrics, another diagnostic) is judged `inconclusive`, not
retried as a harness failure and never a node fault."""

from __future__ import annotations

import json

import pytest

from fleetval.dcgm import exit_codes
from fleetval.dcgm.judge import judge_dcgm
from fleetval.dcgm.parser import DcgmReport, parse_dcgm
from fleetval.dcgm.probe import dcgm_diag_probe
from fleetval.errors import ParseError

# dcgmlib/src/dcgm_errors.c errorString() at v4.6.0 (unchanged since 3.3.9), by dcgmReturn_t.
ERROR_STRINGS = {
    -34: "The requested operation could not be completed because the affected resource is in use",
    -38: "The requested profiling metrics cannot be collected in a single pass",
    -39: "A diag instance is already running, cannot run a new diag until the current one finishes",
}


def refused_run(status: int, *, body: str) -> str:
    """What `dcgmi diag -r 2 -j` prints when RunDiagOnce fails (dcgmi/Diag.cpp: errMsg, then
    HelperDisplayFailureMessage: `{NVVS_NAME: {version, runtime_error}}`, styled by jsoncpp).
    Built from the source's format strings: no capture of this case is published."""
    message = (
        f"Error: Unable to complete diagnostic for group 2. Return: ({status}) : {ERROR_STRINGS[status]}\n"
    )
    return json.dumps({body: {"runtime_error": message, "version": "4.6.0"}}, indent=3)


def test_the_codes_are_the_same_in_every_supported_version() -> None:
    assert set(exit_codes.EXIT_CODES) == {"3.3.9", "4.2.3", "4.6.0"}
    for table in exit_codes.EXIT_CODES.values():
        assert (table.isolate_error, table.test_error) == (205, 226)
        assert table.busy == (222, 218, 217)
    assert exit_codes.REPORTED_EXIT_CODES == (0, 205, 217, 218, 222, 226)


def test_a_probe_accepts_the_busy_codes_and_not_the_harness_ones() -> None:
    spec = dcgm_diag_probe("n1", level=2, gpus=8, run_key="k")
    assert {217, 218, 222} <= set(spec.reported_exit_codes)
    assert not {1, 2, 127, 137, 235} & set(spec.reported_exit_codes)


@pytest.mark.parametrize("body", ["DCGM Diagnostic", "DCGM GPU Diagnostic"])  # 4.x, 3.x NVVS_NAME
@pytest.mark.parametrize("status", sorted(ERROR_STRINGS))
def test_a_run_dcgm_refused_as_busy_is_inconclusive_and_rerun(status: int, body: str) -> None:
    report: DcgmReport | ParseError
    try:
        report = parse_dcgm(refused_run(status, body=body))
    except ParseError as exc:
        report = exc
    judgement = judge_dcgm(report, gate="weekly", node="n1", level=2, expected_gpus=8)
    assert judgement.result.value == "inconclusive"
    assert judgement.rule.outcome == "profiling_busy" and judgement.action == "rerun_diagnostic"


def test_any_other_runtime_error_is_no_evidence_not_busy() -> None:
    text = json.dumps(
        {"DCGM Diagnostic": {"runtime_error": "Error: Unable to complete diagnostic. Return: (-1)"}}
    )
    with pytest.raises(ParseError) as caught:
        parse_dcgm(text)
    judgement = judge_dcgm(caught.value, gate="weekly", node="n1", level=2, expected_gpus=8)
    assert judgement.result.value != "pass" and judgement.rule.outcome == "no_evidence"
