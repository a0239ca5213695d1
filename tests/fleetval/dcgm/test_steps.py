"""judge_stored_dcgm judges each probe on its own: one probe's surprise is an `error` verdict for its
node, never an abort of the wave; every probe is judged against the node's GPU capacity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from fleetval.dcgm import steps
from fleetval.dcgm.probe import dcgm_diag_probe
from fleetval.dcgm.simulated import render_dcgm
from fleetval.records import Result

UUIDS = [f"GPU-{g:08d}-aaaa-bbbb-cccc-dddddddddddd" for g in range(8)]


class FakeStore:
    """The two calls judge_stored_dcgm makes, over probes given up front."""

    def __init__(self, probes: list[dict[str, Any]]) -> None:
        self._probes = probes
        self.attached: list[tuple[str, Sequence[Any], Sequence[Any], str | None]] = []

    def probes(self, run_id: int, probe_keys: Sequence[str]) -> list[dict[str, Any]]:
        return [p for p in self._probes if p["probe_key"] in probe_keys]

    def attach_results(self, run_id: int, results: Sequence[Any]) -> int:
        self.attached.extend(results)
        return len(results)


def probe(node: str, *, capacity: int = 8, reported: int = 8) -> dict[str, Any]:
    spec = dcgm_diag_probe(node, level=2, gpus=capacity, run_key="run").to_json()
    raw = render_dcgm(level=2, gpu_count=reported, gpu_uuids=UUIDS[:reported], driver_version="570.148.08")
    return {"probe_key": spec["probe_key"], "nodes": [node], "spec": spec, "raw": raw, "exit_code": 0}


def judge(store: FakeStore) -> dict[str, steps.NodeDecision]:
    keys = [p["probe_key"] for p in store._probes]
    fake: Any = store
    return {d.node: d for d in steps.judge_stored_dcgm(fake, 1, keys, gate="weekly", level=2)}


def test_an_unexpected_error_judging_one_probe_is_that_nodes_error_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = steps.judge_dcgm

    def judge_or_break(report: Any, **kwargs: Any) -> Any:
        if kwargs["node"] == "n2":
            raise RuntimeError("a judge bug")
        return real(report, **kwargs)

    monkeypatch.setattr(steps, "judge_dcgm", judge_or_break)
    store = FakeStore([probe("n1"), probe("n2"), probe("n3")])
    decisions = judge(store)
    assert {n: d.result for n, d in decisions.items()} == {
        "n1": Result.PASS,
        "n2": Result.ERROR,
        "n3": Result.PASS,
    }
    assert (decisions["n2"].rule_id, decisions["n2"].action) == ("harness.judge_failed", "rerun_diagnostic")
    assert "RuntimeError" in decisions["n2"].reason
    (n2,) = (verdicts for key, _, verdicts, node in store.attached if node == "n2")
    assert n2[0].evidence == {"exception": "RuntimeError", "message": "a judge bug"}
    assert len(store.attached) == 3


def test_every_probe_is_judged_against_the_nodes_gpu_capacity() -> None:
    # A report on 7 GPUs of an 8-GPU node (one withdrawn) is no evidence for the missing one.
    store = FakeStore([probe("whole"), probe("short", reported=7)])
    decisions = judge(store)
    assert decisions["whole"].result is Result.PASS
    assert (decisions["short"].result, decisions["short"].rule_id) == (Result.INCONCLUSIVE, "dev.weekly.none")
    (short,) = (verdicts for _, _, verdicts, node in store.attached if node == "short")
    assert short[0].evidence["gpus_expected"] == 8
    gpu7 = next(v for v in short if v.criterion == "D-DEV-04" and v.evidence["gpu_index"] == "7")
    assert gpu7.result is Result.INCONCLUSIVE


@pytest.mark.parametrize("gpus", [0, None, "8", True], ids=["zero", "missing", "string", "bool"])
def test_a_probe_spec_without_a_gpu_count_is_an_error_never_a_pass(gpus: Any) -> None:
    broken = probe("n1")
    if gpus is None:
        del broken["spec"]["gpus"]
    else:
        broken["spec"]["gpus"] = gpus
    decisions = judge(FakeStore([broken, probe("n2")]))
    assert (decisions["n1"].result, decisions["n1"].rule_id) == (Result.ERROR, "harness.no_gpu_count")
    assert decisions["n2"].result is Result.PASS
