"""Operator evidence under attack: a damaged no-GPU probe output (D-OP-03) or node facts (D-OP-02)
never crash the judge, and nothing that lost the probe's sections passes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetval.fleet.spec import load_fleet_spec
from fleetval.gpu_operator.advertised import judge_advertised
from fleetval.gpu_operator.isolation import PROBE_IMAGE, SCRIPT, judge_isolation
from fleetval.records import Result
from fleetval.sim.images import ContainerContext, run_container
from tests.fleetval.gpu_operator.test_operator_checks import FLEET
from tests.fuzz import BAD_NUMBERS, Mutant, fuzz_settings, mutants, record, timed

FAMILY = "gpu-operator"
SPEC = load_fleet_spec(FLEET)


def _probe(gpus: tuple[int, ...]) -> str:
    """The simulator's output of the D-OP-03 probe, with no GPU and with two leaked GPUs."""
    ctx = ContainerContext(node="r01-n01", gpu_indices=gpus, env={}, salt="fuzz")
    return run_container(PROBE_IMAGE, ["/bin/bash", "-c"], [SCRIPT], ctx, SPEC).output


SEEDS = (("healthy", _probe(())), ("leak", _probe((0, 1))))
MARKERS = ("NVIDIA_VISIBLE_DEVICES=", "--- ls -1 /dev", "--- nvidia-smi -L", "--- exit ", "\nnull\n")


def test_a_superscript_count_is_no_count() -> None:
    facts = {"labels": {"nvidia.com/gpu.count": "²"}, "capacity": {"nvidia.com/gpu": "²"}}
    assert judge_advertised("n", facts).result is Result.INCONCLUSIVE  # found by the fuzz below


def test_the_seeds_are_what_the_judge_expects() -> None:
    assert judge_isolation("n", SEEDS[0][1], exit_code=0, error=None).result is Result.PASS
    assert judge_isolation("n", SEEDS[1][1], exit_code=0, error=None).result is Result.FAIL


def check(mutant: Mutant) -> None:
    with timed(FAMILY):
        verdict = judge_isolation("n", mutant.text, exit_code=0, error=None)
    record(FAMILY, verdict.result.value)
    if verdict.result is Result.PASS:
        lines = "\n".join(mutant.text.splitlines()) + "\n"  # any line ending the parser accepts
        assert all(m in lines for m in MARKERS), mutant


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(SEEDS, words=("nvidia0", "GPU 0:", "all", "none", "void", "127", "0")))
def test_a_damaged_probe_output_is_judged_never_crashes_and_passes_only_whole(mutant: Mutant) -> None:
    check(mutant)


VALUES = st.one_of(st.sampled_from(list(BAD_NUMBERS)), st.text(max_size=12), st.integers(-5, 10**12))


@pytest.mark.fuzz
@fuzz_settings()
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "nvidia.com/gpu.count",
                "nvidia.com/gpu.replicas",
                "nvidia.com/gpu.sharing-strategy",
                "nvidia.com/mig.strategy",
                "nvidia.com/mig.config",
                "nvidia.com/mig-1g.10gb.count",
            ]
        ),
        VALUES,
    ),
    st.dictionaries(
        st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb"]), VALUES
    ),
)
def test_damaged_node_facts_never_crash_the_advertised_count(
    labels: dict[str, object], capacity: dict[str, object]
) -> None:
    facts = json.loads(json.dumps({"labels": labels, "capacity": capacity, "allocatable": capacity}))
    with timed(FAMILY):
        verdict = judge_advertised("n", facts)
    if verdict.result is Result.PASS and labels.get("nvidia.com/mig.strategy") != "mixed":
        assert str(labels.get("nvidia.com/gpu.count", "")).isdigit(), facts
