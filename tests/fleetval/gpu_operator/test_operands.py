"""D-OP-01 on the GPU Operator's real outputs: pods, controller logs, validator logs and markers
(tests/fixtures/gpu-operator, each with its source)."""

from __future__ import annotations

import pytest

from fleetval.errors import ParseError
from fleetval.gpu_operator.judge import judge_operands
from fleetval.gpu_operator.parse import (
    parse_markers,
    parse_operand_pods,
    parse_operator_log,
    parse_validator_log,
)
from fleetval.records import Result
from tests.paths import FIXTURES

DIR = FIXTURES / "gpu-operator"


def read(name: str) -> str:
    return (DIR / name).read_text()


HEALTHY = parse_operand_pods(read("operands-healthy-validators-completed-success-logs-ocp-nvidia-docs.txt"))
MIG = parse_operand_pods(read("kubectl-get-pods-gpu-operator-operands-mig-nvidia-docs.txt"))
CRASHLOOP = parse_operand_pods(read("operands-driver-crashloop-init-blocked-ocp-nvidia-docs.txt"))


def test_the_pod_tables_are_read_with_each_operand_named() -> None:
    operands = {p.operand: (p.status, p.ready, p.containers, p.restarts) for p in CRASHLOOP}
    assert operands["driver"] == ("CrashLoopBackOff", 0, 1, 13)
    assert operands["validator"] == ("Init:0/4", 0, 1, 0)
    assert operands["node-status-exporter"] == ("Init:0/1", 1, 1, 0)  # "Init: 0/1" as the doc prints it
    assert {p.operand for p in MIG} >= {
        "driver",
        "container-toolkit",
        "device-plugin",
        "mig-manager",
        "dcgm-exporter",
    }
    assert [p.name for p in HEALTHY if p.operand is None] == [
        "bb0dd90f1b757a8c7b338785a4a65140732d30447093bc2c4f6ae8e75844gfv"  # a bundle pod, not an operand
    ]


def test_healthy_operands_pass_and_the_documented_validator_logs_say_success() -> None:
    validator = {
        "cuda-validation": parse_validator_log("cuda workload validation is successful\n"),
        "plugin-validation": parse_validator_log("device-plugin workload validation is successful\n"),
    }
    verdict = judge_operands("r01-n01", HEALTHY, validator_logs=validator)
    assert verdict.result is Result.PASS, verdict.reason
    assert judge_operands("r01-n01", MIG).result is Result.PASS


def test_a_crashlooping_driver_is_named_as_the_cause_and_the_rest_as_blocked_behind_it() -> None:
    verdict = judge_operands("r01-n01", CRASHLOOP)
    assert verdict.result is Result.FAIL
    assert verdict.evidence["root_cause"] == "driver"
    assert verdict.reason.startswith("driver: CrashLoopBackOff (0/1 ready, 13 restarts); blocked behind it: ")
    assert {"container-toolkit", "device-plugin", "validator"} <= set(verdict.evidence["blocked"])


def test_the_controller_logs_are_read_in_both_formats() -> None:
    not_ready = parse_operator_log(
        read("operator-logs-clusterpolicy-not-ready-states-issue1310-excerpt.jsonl")
    )
    assert not_ready.ready is False
    assert not_ready.not_ready == (
        "state-operator-validation",
        "state-device-plugin",
        "state-dcgm-exporter",
        "gpu-feature-discovery",
        "state-mig-manager",
    )
    ready = parse_operator_log(read("operator-logs-clusterpolicy-ready-zap-format-ocp-nvidia-docs.log"))
    assert ready.ready is True and ready.steps == {"state-mig-manager": "ready"}
    old = parse_operator_log(read("operator-logs-clusterpolicy-step-notready-v1.11-issue377-excerpt.log"))
    assert old.steps == {"state-operator-validation": "notReady"}
    wasnt = parse_operator_log(
        read("operator-logs-step-wasnt-ready-validator-4-unavailable-ocp-issue331-excerpt.log")
    )
    assert wasnt.unavailable == {"nvidia-operator-validator": 4}


def test_the_controllers_not_ready_states_name_operands_even_when_pods_look_fine() -> None:
    log = parse_operator_log(read("operator-logs-clusterpolicy-not-ready-states-issue1310-excerpt.jsonl"))
    verdict = judge_operands("cluster", MIG, operator_log=log)
    assert verdict.result is Result.FAIL
    assert verdict.evidence["root_cause"] == "device-plugin"
    assert "validator: not ready (the operator's controller)" in verdict.reason


@pytest.mark.parametrize(
    ("name", "outcome", "retries"),
    [
        ("validator-driver-validation-fail-chroot-nvidia-smi-issue378.log", "failing", 3),
        ("validator-driver-validation-fail-timestamped-issue1063-excerpt.log", "failing", 4),
        ("validator-driver-validation-newer-logrus-format-talos-issue1687.log", "failing", 2),
        ("validator-toolkit-validation-waiting-issue378.log", "waiting", 0),
    ],
)
def test_validator_logs_in_every_format(name: str, outcome: str, retries: int) -> None:
    log = parse_validator_log(read(name))
    assert (log.outcome, log.retries) == (outcome, retries)


def test_a_failing_driver_validation_and_missing_markers_name_their_operands() -> None:
    markers = parse_markers(read("validator-marker-files-run-nvidia-validations-issue377.txt"))
    assert markers == {"cuda-ready", "host-driver-ready", "toolkit-ready"}
    verdict = judge_operands("r01-n01", MIG, markers=markers)
    assert verdict.result is Result.FAIL
    assert verdict.reason == "device-plugin: not confirmed by the validator (no status file)"
    failing = {
        "driver-validation": parse_validator_log(
            read("validator-driver-validation-fail-timestamped-issue1063-excerpt.log")
        )
    }
    verdict = judge_operands("r01-n01", MIG, validator_logs=failing)
    assert verdict.evidence["root_cause"] == "driver"
    assert "driver-validation: command failed, retrying after 5 seconds" in verdict.reason


@pytest.mark.parametrize(
    "text", ["", "garbage\n", "NAME READY STATUS RESTARTS AGE\nnvidia-driver 1 Running\n", "{]"]
)
def test_unreadable_pod_lists_are_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_operand_pods(text)


def test_no_operand_pods_is_inconclusive_not_a_pass() -> None:
    assert judge_operands("n", []).result is Result.INCONCLUSIVE


def test_the_cli_judges_and_parses_operator_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from fleetval.cli import main

    pods = str(DIR / "kubectl-get-pods-gpu-operator-operands-mig-nvidia-docs.txt")
    markers = str(DIR / "validator-marker-files-run-nvidia-validations-issue377.txt")
    assert main(["judge", "operator", pods, "--node", "r01-n01", "--markers", markers]) == 0
    verdict = json.loads(capsys.readouterr().out)["verdicts"][0]
    assert (verdict["criterion"], verdict["subject"], verdict["result"]) == ("D-OP-01", "r01-n01", "fail")
    assert verdict["evidence"]["root_cause"] == "device-plugin"
    log = str(DIR / "operator-logs-clusterpolicy-ready-zap-format-ocp-nvidia-docs.log")
    assert main(["parse", "gpu-operator", log]) == 0
    assert json.loads(capsys.readouterr().out)["ready"] is True
    assert main(["parse", "gpu-operator", markers.replace("validator-marker-files", "x")]) == 1
    assert main(["judge", "operator", log]) == 0  # not a pod list: inconclusive, not an error
    assert json.loads(capsys.readouterr().out)["verdicts"][0]["result"] == "inconclusive"
