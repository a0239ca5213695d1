"""The onboarding stages, in order: adding a layer's checks to onboarding is one line in `STAGES`.

`STAGES` is static data the DAG reads at parse time (light: nothing here imports a tool), so each
line names its implementation as `module:attribute`, imported when the stage runs. The DAG builds,
per stage, one probe task per node-disjoint round (`rounds` of them, one after another: a node's
repeats never overlap), then the stage's judge. A stage implementation (`StageImpl`) says which
nodes it applies to, what it probes each round, how it judges, and which stored verdicts are its
own; `fleetval.onboarding.stages` holds the shipped ones.

A node goes on to the next stage only while its verdicts so far are pass or warn (a node that
failed r2 is not NCCL-tested, and never blamed on a healthy pair partner).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from fleetval.onboarding.plan import OnboardingPlan, PlannedNode
    from fleetval.onboarding.request import OnboardingRequest
    from fleetval.probes.pod import ProbeSpec
    from fleetval.store.repository import Store

Runner = Literal["pod", "mpijob", "group"]
NODE_MAP_INDEX: Final = "{{ task.spec.node }}"
REPEAT_MAP_INDEX: Final = "{{ task.spec.node }} r{{ task.spec.params.repeat }}"


@dataclass(frozen=True, slots=True)
class StageSpec:
    """One stage as the DAG wires it: `rounds` mapped probe tasks (`runner`: a pod per probe, or an
    MPIJob per multi-node probe), then a judge; `impl` is the `StageImpl` (`module:attribute`).

    A layer whose checks are already a task group (`runner` "group", `rounds` 0) names its factory
    in `group` (`module:function`, on the Airflow side: `factory(fv_run, nodes, group_id=...)`
    builds the group; its tasks store their verdicts in the onboarding run `fv_run`); the DAG
    hands it the nodes still in that the stage applies to."""

    name: str
    title: str
    runner: Runner
    rounds: int
    impl: str
    map_index: str = NODE_MAP_INDEX
    group: str = ""


MIG_GROUP: Final = "fleetval_airflow.mig_tasks:mig_onboarding_stage"

STAGES: Final[tuple[StageSpec, ...]] = (
    StageSpec("operator", "GPU Operator and isolation", "pod", 1, "fleetval.onboarding.stages:OPERATOR"),
    StageSpec("dcgm", "DCGM diagnostic", "pod", 1, "fleetval.onboarding.stages:DCGM"),
    StageSpec(
        "nccl_intra", "NCCL on each node", "pod", 3, "fleetval.onboarding.stages:NCCL_INTRA", REPEAT_MAP_INDEX
    ),
    StageSpec(
        "nccl_pairs",
        "NCCL node pairs",
        "mpijob",
        6,
        "fleetval.onboarding.stages:NCCL_PAIRS",
        REPEAT_MAP_INDEX,
    ),
    StageSpec("mig", "MIG layouts", "group", 0, "fleetval.onboarding.stages:MIG", group=MIG_GROUP),
)


def stage_spec(name: str) -> StageSpec:
    for spec in STAGES:
        if spec.name == name:
            return spec
    raise KeyError(f"no onboarding stage {name!r}; stages: {', '.join(s.name for s in STAGES)}")


@dataclass(frozen=True, slots=True)
class StageContext:
    """What a stage works with: the store and run, the plan and request, the nodes it tests (those
    still in), the cluster's CoreV1Api, the probe images and Airflow's max_map_length."""

    store: Store
    run_id: int
    run_key: str
    plan: OnboardingPlan
    request: OnboardingRequest
    nodes: tuple[str, ...]
    core: Any = None
    images: Mapping[str, str] | None = None
    max_map_length: int = 1024

    def image(self, tool: str) -> str | None:
        return (self.images or {}).get(tool) or None


def _always(_: Any) -> bool:
    return True


def subject_nodes(row: Mapping[str, Any], plan: OnboardingPlan, tested: Collection[str]) -> list[str]:
    """The tested nodes a verdict is about: its subject, or each end of a `a+b` pair."""
    return [n for n in str(row["subject"]).split("+") if n in tested]


@dataclass(frozen=True, slots=True)
class StageImpl:
    """A stage's checks.

    - `prepare(ctx)` plans the stage for `ctx.nodes` and returns its state (JSON, kept in the run);
      `notes` in it maps nodes the stage could not test to why (they are held: inconclusive);
    - `round_probes(ctx, state, k)` the node-disjoint probes of round k (0-based; [] when none);
    - `judge(ctx, state)` judges what the rounds stored and stores the verdicts; returns counts;
    - `claims(row)` whether a stored verdict is this stage's; `nodes_of(row, plan, tested)` which
      tested nodes it is about;
    - `enabled(request)`, `applies(node)`: whether the stage runs, and for which nodes;
    - `uses_baselines`: judged against promoted baselines (judged again once one is promoted);
    - `needs_cluster`: its judge reads the Kubernetes API (`ctx.core`).
    """

    criteria: tuple[str, ...]
    prepare: Callable[[StageContext], dict[str, Any]]
    round_probes: Callable[[StageContext, Mapping[str, Any], int], list[ProbeSpec]]
    judge: Callable[[StageContext, Mapping[str, Any]], dict[str, Any]]
    claims: Callable[[Mapping[str, Any]], bool]
    nodes_of: Callable[[Mapping[str, Any], OnboardingPlan, Collection[str]], list[str]] = subject_nodes
    enabled: Callable[[OnboardingRequest], bool] = _always
    applies: Callable[[PlannedNode], bool] = _always
    uses_baselines: bool = False
    needs_cluster: bool = False


def load(spec: StageSpec) -> StageImpl:
    """The stage's implementation (imported now, not at DAG parse time)."""
    module, _, attribute = spec.impl.partition(":")
    impl = getattr(importlib.import_module(module), attribute)
    if not isinstance(impl, StageImpl):
        raise TypeError(f"stage {spec.name!r}: {spec.impl} is not a StageImpl")
    return impl
