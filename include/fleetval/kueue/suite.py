"""The scheduling layer's suite: the shipped scenarios, and a run of scenarios whose raw evidence
(the run record) is stored before its verdicts. Used by `fleetval scenario run` and the
`kueue_contention` DAG alike.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kubernetes.client import ApiClient

from fleetval.kueue.judge import scenario_verdicts
from fleetval.kueue.runner import KUEUE_NAMESPACE, RunRecord, ScenarioRunner
from fleetval.kueue.scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from fleetval.records import Verdict
from fleetval.store.repository import ProbeIn, Store

TOOL: Final = "kueue-scenario"
SUITE: Final = "kueue_contention"


def shipped_files() -> dict[str, Path]:
    """Shipped scenario id → file, in order."""
    folder = importlib.resources.files("fleetval.kueue").joinpath("scenarios")
    files = sorted((Path(str(e)) for e in folder.iterdir() if e.name.endswith(".yaml")), key=lambda p: p.name)
    return {p.stem: p for p in files}


def shipped() -> list[Scenario]:
    return [load_scenario(p) for p in shipped_files().values()]


def resolve(ref: str) -> Scenario:
    """A shipped scenario's id, or a scenario file's path."""
    files = shipped_files()
    if ref in files:
        return load_scenario(files[ref])
    path = Path(ref)
    if path.exists():
        return load_scenario(path)
    known = ", ".join(files)
    raise ScenarioError(f"{ref}: neither a scenario file nor a shipped scenario ({known})")


@dataclass(frozen=True, slots=True)
class ScenarioOutcome:
    scenario: Scenario
    record: RunRecord
    verdicts: tuple[Verdict, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.id,
            "title": self.scenario.title,
            "kueue_version": self.record.kueue_version,
            "reason_mode": self.record.mode,
            "harness_error": self.record.harness_error,
            "cleaned": self.record.cleaned,
            "verdicts": [v.to_json() for v in self.verdicts],
        }


def run_scenario(
    api: ApiClient,
    scenario: Scenario,
    run_key: str,
    *,
    store: Store | None = None,
    run_id: int | None = None,
    image: str | None = None,
    kueue_namespace: str = KUEUE_NAMESPACE,
    runner: Callable[..., ScenarioRunner] = ScenarioRunner,
) -> ScenarioOutcome:
    """Run one scenario; with a store, keep its run record (raw) and then its verdicts."""
    options: dict[str, Any] = {"kueue_namespace": kueue_namespace}
    if image:
        options["image"] = image
    record = runner(api, scenario, run_key, **options).run()
    if store is not None and run_id is not None:
        store.ingest(run_id, [_probe(scenario, record)])  # the raw record first, then the verdicts
    verdicts = tuple(
        scenario_verdicts(
            scenario,
            record.results,
            kueue_version=record.kueue_version,
            mode=record.mode,
            harness_error=record.harness_error,
            inconclusive=record.inconclusive,
            cluster=record.cluster,
        )
    )
    if store is not None and run_id is not None:
        store.add_verdicts(run_id, verdicts)
    return ScenarioOutcome(scenario, record, verdicts)


def _probe(scenario: Scenario, record: RunRecord) -> ProbeIn:
    return ProbeIn(
        probe_key=f"kueue/{scenario.id}",
        tool=TOOL,
        raw=json.dumps(record.to_json(), default=str),
        nodes=(),
        tool_version=record.kueue_version,
        spec={
            "scenario": scenario.id,
            "scenario_sha256": scenario.digest,
            "prefix": record.prefix,
            "harness_error": record.harness_error,
        },
        exit_code=0 if not record.harness_error else 1,
    )


def run_scenarios(
    api: ApiClient,
    scenarios: Sequence[Scenario],
    run_key: str,
    *,
    store: Store | None = None,
    fleet: str | None = None,
    **options: Any,
) -> list[ScenarioOutcome]:
    """Run scenarios one after another (each owns its queues; none hides another's verdicts)."""
    run_id = None
    if store is not None:
        run_id = store.ensure_run(run_key, suite=SUITE, backend="k8s", fleet=fleet)
    outcomes = [run_scenario(api, s, run_key, store=store, run_id=run_id, **options) for s in scenarios]
    if store is not None and run_id is not None:
        store.finish_run(run_id)
    return outcomes


def check_text(text: str, where: str) -> dict[str, Any]:
    """What `fleetval scenario check` prints for a valid file."""
    scenario = parse_scenario(text, where=where)
    return {
        "id": scenario.id,
        "title": scenario.title,
        "criteria": list(scenario.criteria),
        "sha256": scenario.digest,
        "objects": [f"{o['kind']}/{o['metadata']['name']}" for o in scenario.objects],
        "jobs": sorted(scenario.jobs),
        "steps": len(scenario.steps),
    }
