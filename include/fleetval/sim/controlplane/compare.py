"""`fleetval cluster compare`: the Kueue scenarios on both backends, expectation by expectation.

Each scenario runs on the simulated cluster (`fleetval sim`, its Kueue model) and on a real
control plane with real Kueue (`fleetval cluster up`'s kubeconfig); the report lists, per
expectation (the scenario's `expect` steps), whether it held and how long it took on each, with
the detail the judge gave where it did not. Where the two disagree, the real one is right: either
the simulator is wrong, or (where both are wrong alike) the harness is.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from fleetval.fleet.spec import FleetSpec
from fleetval.kueue.api import GROUP, VERSION
from fleetval.kueue.scenario import SCENARIO_LABEL, Scenario
from fleetval.kueue.suite import ScenarioOutcome, run_scenario, run_scenarios

KUEUE_FINALIZER: Final = "kueue.x-k8s.io/managed"
LEFTOVER_WAIT_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class Row:
    scenario: str
    step: int
    criterion: str
    expect: str
    sim_ok: bool | None
    sim_s: float | None
    sim_detail: str
    real_ok: bool | None
    real_s: float | None
    real_detail: str

    @property
    def agree(self) -> bool:
        return self.sim_ok == self.real_ok

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "step": self.step,
            "criterion": self.criterion,
            "expect": self.expect,
            "sim": {"ok": self.sim_ok, "waited_s": self.sim_s, "detail": self.sim_detail},
            "real": {"ok": self.real_ok, "waited_s": self.real_s, "detail": self.real_detail},
            "agree": self.agree,
        }


def describe(expect: dict[str, Any]) -> str:
    """One expectation in a few words: `a-wait-4 admitted ≤10s`."""
    jobs = ",".join(expect.get("jobs") or [])
    what = [f"{k}={v}" for k, v in expect.items() if k not in ("criterion", "jobs", "within", "hold") and v]
    bound = f" ≤{expect['within']:g}s" if expect.get("within") else ""
    return f"{jobs} {' '.join(what)}{bound}".strip()


@dataclass
class Leftovers:
    """What a scenario's own cleanup left on the real cluster (force-removed before the next one,
    so one scenario's leftovers do not decide the next one's outcome)."""

    scenario: str
    pods: list[str] = field(default_factory=list)  # still there, with why
    workloads: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)  # still Terminating

    @property
    def any(self) -> bool:
        return bool(self.pods or self.workloads or self.namespaces)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "pods": self.pods,
            "workloads": self.workloads,
            "namespaces": self.namespaces,
        }


def force_clean(api: ApiClient, scenario_id: str) -> Leftovers:
    """Record what the scenario left behind, then remove it as an administrator would: Kueue's pod
    finalizer stripped, Workloads deleted, until its namespaces are gone."""
    core, custom = CoreV1Api(api), CustomObjectsApi(api)
    left = Leftovers(scenario_id)
    for ns in core.list_namespace(label_selector=SCENARIO_LABEL).items:
        name = ns.metadata.name
        if ns.status.phase == "Terminating":
            left.namespaces.append(name)
        for pod in core.list_namespaced_pod(name).items:
            finalizers = list(pod.metadata.finalizers or [])
            left.pods.append(
                f"{name}/{pod.metadata.name} ({pod.status.phase}; {','.join(finalizers) or 'no finalizer'})"
            )
            if KUEUE_FINALIZER in finalizers:
                kept = [f for f in finalizers if f != KUEUE_FINALIZER]
                _quietly(
                    core.patch_namespaced_pod, pod.metadata.name, name, {"metadata": {"finalizers": kept}}
                )
            _quietly(core.delete_namespaced_pod, pod.metadata.name, name, grace_period_seconds=0)
        for wl in custom.list_namespaced_custom_object(GROUP, VERSION, name, "workloads")["items"]:
            conditions = {c["type"]: c["status"] for c in (wl.get("status") or {}).get("conditions") or []}
            wl_name = wl["metadata"]["name"]
            left.workloads.append(f"{name}/{wl_name} (Admitted={conditions.get('Admitted', '-')})")
            unfinalized: dict[str, Any] = {"metadata": {"finalizers": []}}
            _quietly(
                custom.patch_namespaced_custom_object, GROUP, VERSION, name, "workloads", wl_name, unfinalized
            )
            _quietly(custom.delete_namespaced_custom_object, GROUP, VERSION, name, "workloads", wl_name)
        _quietly(core.delete_namespace, name)
    deadline = time.monotonic() + LEFTOVER_WAIT_S
    while core.list_namespace(label_selector=SCENARIO_LABEL).items and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def _quietly(call: Any, *args: Any, **kwargs: Any) -> None:
    """A cleanup call; an object already gone (or going) is fine."""
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        if exc.status not in (404, 409, 422):
            raise


def rows(sim: Iterable[ScenarioOutcome], real: Iterable[ScenarioOutcome]) -> list[Row]:
    """Pair the two runs' step results by scenario and step."""
    by_key: dict[tuple[str, int], dict[str, Any]] = {}
    order: list[tuple[str, int]] = []
    for side, outcomes in (("sim", sim), ("real", real)):
        for outcome in outcomes:
            results = list(outcome.record.results)
            if outcome.record.harness_error and not results:
                key = (outcome.scenario.id, 0)
                entry = by_key.setdefault(key, {"criterion": "-", "expect": "the run"})
                entry[side] = (False, None, f"harness error: {outcome.record.harness_error}")
                if key not in order:
                    order.append(key)
            for result in results:
                key = (outcome.scenario.id, result.step)
                entry = by_key.setdefault(
                    key, {"criterion": result.criterion, "expect": describe(dict(result.expect))}
                )
                entry[side] = (result.ok, round(result.waited_s, 2), "" if result.ok else result.detail)
                if key not in order:
                    order.append(key)
    table = []
    for key in order:
        entry = by_key[key]
        sim_ok, sim_s, sim_detail = entry.get("sim", (None, None, "not reached"))
        real_ok, real_s, real_detail = entry.get("real", (None, None, "not reached"))
        table.append(
            Row(
                key[0],
                key[1],
                entry["criterion"],
                entry["expect"],
                sim_ok,
                sim_s,
                sim_detail,
                real_ok,
                real_s,
                real_detail,
            )
        )
    return table


def compare(
    real_api: ApiClient,
    scenarios: Sequence[Scenario],
    run_key: str,
    *,
    sim_fleet: FleetSpec,
    image: str | None = None,
) -> tuple[list[ScenarioOutcome], list[ScenarioOutcome], list[Leftovers]]:
    """Run `scenarios` on a fresh simulated cluster of `sim_fleet`, then on the real cluster."""
    import tempfile
    from pathlib import Path

    from kubernetes import config

    from fleetval.sim.kube.cluster import SimKubeCluster
    from fleetval.sim.kube.server import KubeApiServer

    options: dict[str, Any] = {"image": image} if image else {}
    server = KubeApiServer(SimKubeCluster(sim_fleet, None, time_scale=0.0))
    server.start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            kubeconfig = server.write_kubeconfig(Path(folder) / "kubeconfig")
            sim_api = config.new_client_from_config(config_file=str(kubeconfig))
            sim = run_scenarios(sim_api, scenarios, f"{run_key}/sim", fleet=sim_fleet.name, **options)
    finally:
        server.stop()
    real, leftovers = [], []
    for scenario in scenarios:
        real.append(run_scenario(real_api, scenario, f"{run_key}/real", **options))
        leftovers.append(force_clean(real_api, scenario.id))
    return sim, real, leftovers


def markdown(table: Sequence[Row], leftovers: Sequence[Leftovers] = (), *, header: str = "") -> str:
    def cell(ok: bool | None, seconds: float | None, detail: str) -> str:
        mark = {True: "held", False: "**failed**", None: "—"}[ok]
        took = f" {seconds:g} s" if seconds is not None else ""
        return f"{mark}{took}" + (f": {detail}" if detail else "")

    lines = [header] if header else []
    lines += [
        "| scenario | step | criterion | expectation | simulator | real Kueue |",
        "|---|---|---|---|---|---|",
    ]
    for row in table:
        sim = cell(row.sim_ok, row.sim_s, row.sim_detail)
        real = cell(row.real_ok, row.real_s, row.real_detail)
        lines.append(f"| {row.scenario} | {row.step} | {row.criterion} | {row.expect} | {sim} | {real} |")
    disagree = sum(1 for row in table if not row.agree)
    lines.append("")
    lines.append(f"{len(table)} expectations, {disagree} where the backends disagree.")
    left = [x for x in leftovers if x.any]
    if left:
        lines += [
            "",
            "Left on the real cluster after each scenario's own cleanup (then removed by force):",
            "",
        ]
        for x in left:
            what = [
                *x.pods,
                *(f"Workload {w}" for w in x.workloads),
                *(f"namespace {n} Terminating" for n in x.namespaces),
            ]
            lines.append(f"- {x.scenario}: " + "; ".join(what))
    return "\n".join(lines) + "\n"
