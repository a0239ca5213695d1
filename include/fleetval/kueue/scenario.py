"""Kueue contention scenarios: the file format, its validation, and how a scenario's objects are
renamed so that every run owns what it creates.

A scenario is a YAML mapping:

    id: d-sched-01-held-at-quota        # lowercase letters, digits and '-', at most 40
    title: a 4-GPU job over the free quota is held with 0 pods
    criteria: [D-SCHED-01, D-SCHED-07]  # what it decides; every expectation names one of them
    namespaces: [team-a]                # created for the run
    objects: [...]                      # real Kueue manifests: ResourceFlavor, Cohort,
                                        # WorkloadPriorityClass, ClusterQueue, LocalQueue
    jobs:                               # what the timeline submits
      a-run-6: {namespace: team-a, queue: team-a-lq, gpus: 6}
      gang: {namespace: team-a, queue: team-a-lq, pods: 2, gpus: 4, priority: high}
    timeline:                           # in order; `at` (seconds from the start) waits until then
      - {at: 0, submit: a-run-6}
      - {expect: {criterion: D-SCHED-01, job: a-run-6, state: admitted, within: 10}}
      - {finish: a-run-6}

A job is `pods` pods (default 1) each asking for `gpus` of `resource` (default `nvidia.com/gpu`;
a MIG profile such as `nvidia.com/mig-1g.10gb` works the same) plus `cpu` / `memory` (defaults
100m / 64Mi), optionally with a WorkloadPriorityClass `priority`, a `node_selector`, a `grace`
period (seconds, default 5) and a `save` time (seconds its pods take after SIGTERM before they
exit, default 0). Its `kind` is `job` (default: a batch/v1 Job, parallelism = pods, that Kueue
unsuspends, suspends on eviction and requeues itself) or `pod-group` (plain pods labelled
`kueue.x-k8s.io/pod-group-name`; a preempted group is submitted again once none of its pods is
live, as its owner would: new pod names, the same group). `finish` tells the job's pods to end:
they exit 0 and Kueue marks the Workload Finished (see `fleetval.kueue.job`).

An expectation (`expect`) names its `criterion` and one `job` or several `jobs`, and any of:
`state` (pending | admitted | finished | gone), `reason` (a class of `reasons.REASON_CLASSES`),
`message` (the QuotaReserved message, exact; `<podset>` stands for a pod set's name),
`message_contains`, `pods` / `pods_running` (how many of its pods exist / run), `evicted`
(whether it has been evicted at least once), `preempted_reason` (the Preempted condition's
reason, e.g. InCohortReclamation), `flavor` (the ResourceFlavor its GPUs were admitted on),
`displayed_reason` (true: what Kueue's events show equals the waiting reason derived from the
conditions, D-SCHED-07), `gang` (true: never seen with only part of its pods released),
`admitted_order` (these jobs were admitted in this order), `stopped_gracefully_s` (its pods,
once deleted, kept running this long, their SIGTERM save (see `save`), and then ended);
`within` (seconds it may take to become true, default 10) and `hold` (seconds it must then stay
true).

Names in `objects`, `namespaces`, `jobs` and expected messages are the scenario's own: a run
prefixes every one with `fvk-<hash>-` and labels everything it creates, so runs never collide
and a later run can remove what a crashed one left.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from fleetval.errors import FleetvalError
from fleetval.k8s.validation import ApiError, check_custom, load_crds
from fleetval.kueue.api import GROUP, PLURALS
from fleetval.kueue.job import JOB_KIND, KINDS
from fleetval.kueue.reasons import REASON_CLASSES

SCENARIO_LABEL: Final = "fleetval.io/kueue-scenario"
RUN_LABEL: Final = "fleetval.io/kueue-run"
JOB_LABEL: Final = "fleetval.io/kueue-job"
OBJECT_KINDS: Final = tuple(PLURALS)
STATES: Final = frozenset({"pending", "admitted", "finished", "gone"})
MAX_JOBS: Final = 64
MAX_PODS: Final = 64
MAX_STEPS: Final = 200
MAX_SECONDS: Final = 3600.0
_ID: Final = re.compile(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?")
_NAME: Final = re.compile(r"[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?")
_CRITERION: Final = re.compile(r"D-SCHED-0[1-7]|D-GPU-MIG-05")
_EXPECT_KEYS: Final = frozenset(
    {
        "criterion",
        "job",
        "jobs",
        "state",
        "reason",
        "message",
        "message_contains",
        "pods",
        "pods_running",
        "evicted",
        "preempted_reason",
        "displayed_reason",
        "gang",
        "admitted_order",
        "flavor",
        "stopped_gracefully_s",
        "within",
        "hold",
    }
)
_JOB_KEYS: Final = frozenset(
    {
        "namespace",
        "queue",
        "kind",
        "pods",
        "gpus",
        "resource",
        "cpu",
        "memory",
        "priority",
        "node_selector",
        "grace",
        "save",
    }
)


class ScenarioError(FleetvalError):
    """A scenario file that cannot be run, naming the field."""


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    namespace: str
    queue: str
    pods: int = 1
    gpus: int = 1
    resource: str = "nvidia.com/gpu"
    cpu: str = "100m"
    memory: str = "64Mi"
    priority: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    grace: int = 5
    save: float = 0.0
    kind: str = JOB_KIND


@dataclass(frozen=True, slots=True)
class Expectation:
    criterion: str
    jobs: tuple[str, ...]
    checks: Mapping[str, Any]  # the expectation's keys other than criterion/job(s)/within/hold
    within: float = 10.0
    hold: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "criterion": self.criterion,
            "jobs": list(self.jobs),
            **dict(self.checks),
            "within": self.within,
            "hold": self.hold,
        }


@dataclass(frozen=True, slots=True)
class Step:
    index: int
    at: float | None
    action: str  # submit | finish | expect
    jobs: tuple[str, ...] = ()
    expect: Expectation | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    id: str
    title: str
    criteria: tuple[str, ...]
    namespaces: tuple[str, ...]
    objects: tuple[dict[str, Any], ...]
    jobs: Mapping[str, Job]
    steps: tuple[Step, ...]
    source: str  # the file's text, as read
    digest: str  # sha256 of the text: stored with every verdict

    def names(self) -> set[str]:
        """Every name the scenario owns (renamed in a run)."""
        owned = set(self.namespaces) | set(self.jobs)
        owned |= {str(o["metadata"]["name"]) for o in self.objects}
        return owned


def prefix_for(scenario_id: str, run_key: str) -> str:
    return f"fvk-{hashlib.sha256(f'{scenario_id}/{run_key}'.encode()).hexdigest()[:6]}-"


def rename_map(scenario: Scenario, prefix: str) -> dict[str, str]:
    return {name: prefix + name for name in scenario.names()}


def renamed(value: Any, names: Mapping[str, str]) -> Any:
    """`value` with every string equal to an owned name replaced (manifests: names, references,
    namespace-selector values)."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, list):
        return [renamed(v, names) for v in value]
    if isinstance(value, dict):
        return {k: renamed(v, names) for k, v in value.items()}
    return value


def renamed_text(text: str, names: Mapping[str, str]) -> str:
    """An expected message with owned names replaced where they stand as words."""
    for name in sorted(names, key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", names[name], text)
    return text


def message_pattern(expected: str) -> re.Pattern[str]:
    """An exact expected message, with `<podset>` matching any pod set name."""
    parts = [re.escape(p) for p in expected.split("<podset>")]
    return re.compile("[a-z0-9][a-z0-9.-]*".join(parts) + r"\Z")


# --- loading ---------------------------------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read the scenario: {exc}") from None
    return parse_scenario(text, where=str(path))


def parse_scenario(text: str, *, where: str = "scenario") -> Scenario:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{where}: not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: a scenario is a mapping with id, criteria, objects, jobs, timeline")
    unknown = sorted(set(data) - {"id", "title", "criteria", "namespaces", "objects", "jobs", "timeline"})
    if unknown:
        raise ScenarioError(f"{where}: {unknown[0]}: unknown field")
    sid = data.get("id")
    if not isinstance(sid, str) or not _ID.fullmatch(sid):
        raise ScenarioError(
            f"{where}: id: must be lowercase letters, digits and '-', at most 40, got {sid!r}"
        )
    criteria = _criteria(where, data.get("criteria"))
    namespaces = _names(where, "namespaces", data.get("namespaces") or [])
    objects = _objects(where, data.get("objects"), set(namespaces))
    jobs = _jobs(where, data.get("jobs"), set(namespaces), objects)
    steps = _timeline(where, data.get("timeline"), jobs, set(criteria))
    return Scenario(
        id=sid,
        title=str(data.get("title") or sid),
        criteria=criteria,
        namespaces=tuple(namespaces),
        objects=tuple(objects),
        jobs=jobs,
        steps=steps,
        source=text,
        digest=hashlib.sha256(text.encode()).hexdigest(),
    )


def _criteria(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ScenarioError(f"{where}: criteria: a non-empty list of criterion ids (D-SCHED-01 ...)")
    for i, cid in enumerate(value):
        if not isinstance(cid, str) or not _CRITERION.fullmatch(cid):
            raise ScenarioError(f"{where}: criteria[{i}]: not a scheduling criterion id: {cid!r}")
    return tuple(value)


def _names(where: str, field_name: str, value: Any) -> list[str]:
    if not isinstance(value, list):
        raise ScenarioError(f"{where}: {field_name}: must be a list of names")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ScenarioError(f"{where}: {field_name}[{i}]: not a DNS label of at most 42: {name!r}")
    return list(value)


def _objects(where: str, value: Any, namespaces: set[str]) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise ScenarioError(f"{where}: objects: a non-empty list of Kueue manifests")
    crds = {crd.kind: crd for crd in load_crds().values() if crd.group == GROUP}
    seen: set[tuple[str, str]] = set()
    out = []
    for i, obj in enumerate(value):
        at = f"{where}: objects[{i}]"
        if not isinstance(obj, dict):
            raise ScenarioError(f"{at}: must be a manifest (a mapping)")
        kind = obj.get("kind")
        if kind not in OBJECT_KINDS:
            raise ScenarioError(f"{at}.kind: must be one of {', '.join(OBJECT_KINDS)}, got {kind!r}")
        api_version = str(obj.get("apiVersion") or "")
        group, _, version = api_version.partition("/")
        crd = crds[kind]
        if group != GROUP or version not in crd.served_versions:
            served = ", ".join(f"{GROUP}/{v}" for v in crd.served_versions)
            raise ScenarioError(f"{at}.apiVersion: {kind} is served as {served}, got {api_version!r}")
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ScenarioError(f"{at}.metadata.name: a DNS label of at most 42 is required, got {name!r}")
        if crd.namespaced:
            ns = meta.get("namespace") if isinstance(meta, dict) else None
            if ns not in namespaces:
                raise ScenarioError(
                    f"{at}.metadata.namespace: must be one of the scenario's namespaces, got {ns!r}"
                )
        if (kind, name) in seen:
            raise ScenarioError(f"{at}.metadata.name: a second {kind} {name!r}")
        seen.add((kind, name))
        try:
            check_custom(copy.deepcopy(obj), crd, version, field_validation="Strict")
        except ApiError as exc:
            raise ScenarioError(
                f"{at} ({kind} {name}): refused by the {crd.plural}.{GROUP} schema: {exc}"
            ) from None
        out.append(obj)
    return out


def _positive_int(at: str, value: Any, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= maximum:
        raise ScenarioError(f"{at}: a whole number from 1 to {maximum}, got {value!r}")
    return value


def _jobs(where: str, value: Any, namespaces: set[str], objects: list[dict[str, Any]]) -> dict[str, Job]:
    if not isinstance(value, dict) or not value:
        raise ScenarioError(f"{where}: jobs: a mapping of job name to job")
    if len(value) > MAX_JOBS:
        raise ScenarioError(f"{where}: jobs: at most {MAX_JOBS}")
    classes = {o["metadata"]["name"] for o in objects if o["kind"] == "WorkloadPriorityClass"}
    jobs = {}
    for name, spec in value.items():
        at = f"{where}: jobs.{name}"
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ScenarioError(f"{at}: a job name is a DNS label of at most 42")
        if not isinstance(spec, dict):
            raise ScenarioError(f"{at}: must be a mapping (namespace, queue, gpus, ...)")
        unknown = sorted(set(spec) - _JOB_KEYS)
        if unknown:
            raise ScenarioError(f"{at}.{unknown[0]}: unknown field (known: {', '.join(sorted(_JOB_KEYS))})")
        ns, queue = spec.get("namespace"), spec.get("queue")
        if ns not in namespaces:
            raise ScenarioError(f"{at}.namespace: must be one of the scenario's namespaces, got {ns!r}")
        if not isinstance(queue, str):
            raise ScenarioError(f"{at}.queue: the LocalQueue's name is required")
        # A queue the scenario does not define is allowed: it is how "LocalQueue ... doesn't exist" is tested.
        priority = spec.get("priority")
        if priority is not None and priority not in classes:
            raise ScenarioError(f"{at}.priority: no WorkloadPriorityClass {priority!r} in objects")
        selector = spec.get("node_selector") or {}
        if not isinstance(selector, dict) or not all(isinstance(v, str) for v in selector.values()):
            raise ScenarioError(f"{at}.node_selector: a mapping of label to value")
        gpus = spec.get("gpus", 1)
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 64:
            raise ScenarioError(f"{at}.gpus: a whole number from 0 to 64, got {gpus!r}")
        kind = spec.get("kind", JOB_KIND)
        if kind not in KINDS:
            raise ScenarioError(f"{at}.kind: one of {', '.join(KINDS)}, got {kind!r}")
        jobs[name] = Job(
            name=name,
            kind=kind,
            namespace=ns,
            queue=queue,
            pods=_positive_int(f"{at}.pods", spec.get("pods", 1), MAX_PODS),
            gpus=gpus,
            resource=_text(f"{at}.resource", spec.get("resource", "nvidia.com/gpu")),
            cpu=_text(f"{at}.cpu", spec.get("cpu", "100m")),
            memory=_text(f"{at}.memory", spec.get("memory", "64Mi")),
            priority=priority,
            node_selector=dict(selector),
            grace=_positive_int(f"{at}.grace", spec.get("grace", 5), 3600),
            save=_seconds(f"{at}.save", spec.get("save", 0)),
        )
    return jobs


def _text(at: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 253:
        raise ScenarioError(f"{at}: a non-empty string, got {value!r}")
    return value


def _seconds(at: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_SECONDS:
        raise ScenarioError(f"{at}: seconds from 0 to {MAX_SECONDS:g}, got {value!r}")
    return float(value)


def _timeline(where: str, value: Any, jobs: Mapping[str, Job], criteria: set[str]) -> tuple[Step, ...]:
    if not isinstance(value, list) or not value:
        raise ScenarioError(f"{where}: timeline: a non-empty list of steps")
    if len(value) > MAX_STEPS:
        raise ScenarioError(f"{where}: timeline: at most {MAX_STEPS} steps")
    steps = []
    last_at = 0.0
    for i, raw in enumerate(value):
        at_where = f"{where}: timeline[{i}]"
        if not isinstance(raw, dict):
            raise ScenarioError(f"{at_where}: a step is a mapping with one of submit, finish, expect")
        actions = [k for k in ("submit", "finish", "expect") if k in raw]
        unknown = sorted(set(raw) - {"submit", "finish", "expect", "at"})
        if unknown:
            raise ScenarioError(f"{at_where}.{unknown[0]}: unknown field")
        if len(actions) != 1:
            raise ScenarioError(f"{at_where}: exactly one of submit, finish, expect")
        at = None
        if "at" in raw:
            at = _seconds(f"{at_where}.at", raw["at"])
            if at < last_at:
                raise ScenarioError(f"{at_where}.at: steps are in time order ({at:g} after {last_at:g})")
            last_at = at
        action = actions[0]
        if action == "expect":
            steps.append(
                Step(i, at, action, expect=_expectation(f"{at_where}.expect", raw["expect"], jobs, criteria))
            )
        else:
            steps.append(Step(i, at, action, jobs=_job_refs(f"{at_where}.{action}", raw[action], jobs)))
    return tuple(steps)


def _job_refs(at: str, value: Any, jobs: Mapping[str, Job]) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        raise ScenarioError(f"{at}: a job name or a list of them")
    for name in names:
        if name not in jobs:
            raise ScenarioError(f"{at}: no job {name!r} in jobs")
    return tuple(names)


def _expectation(at: str, value: Any, jobs: Mapping[str, Job], criteria: set[str]) -> Expectation:
    if not isinstance(value, dict):
        raise ScenarioError(f"{at}: a mapping with criterion, job and what to check")
    unknown = sorted(set(value) - _EXPECT_KEYS)
    if unknown:
        raise ScenarioError(f"{at}.{unknown[0]}: unknown field (known: {', '.join(sorted(_EXPECT_KEYS))})")
    criterion = value.get("criterion")
    if criterion not in criteria:
        raise ScenarioError(f"{at}.criterion: must be one of the scenario's criteria, got {criterion!r}")
    names: tuple[str, ...] = ()
    if "job" in value:
        names = _job_refs(f"{at}.job", value["job"], jobs)
    if "jobs" in value:
        names += _job_refs(f"{at}.jobs", value["jobs"], jobs)
    if "admitted_order" in value:
        names += _job_refs(f"{at}.admitted_order", value["admitted_order"], jobs)
    if not names:
        raise ScenarioError(f"{at}: name the job (job, jobs or admitted_order)")
    checks = {k: v for k, v in value.items() if k not in ("criterion", "job", "jobs", "within", "hold")}
    if not checks:
        raise ScenarioError(f"{at}: nothing to check")
    if "state" in checks and checks["state"] not in STATES:
        raise ScenarioError(f"{at}.state: one of {', '.join(sorted(STATES))}, got {checks['state']!r}")
    if "reason" in checks and checks["reason"] not in REASON_CLASSES:
        raise ScenarioError(
            f"{at}.reason: one of {', '.join(sorted(REASON_CLASSES))}, got {checks['reason']!r}"
        )
    for key in ("message", "message_contains", "preempted_reason", "flavor"):
        if key in checks:
            _text(f"{at}.{key}", checks[key])
    for key in ("pods", "pods_running"):
        if key in checks and (
            isinstance(checks[key], bool) or not isinstance(checks[key], int) or checks[key] < 0
        ):
            raise ScenarioError(f"{at}.{key}: a whole number of pods, got {checks[key]!r}")
    if "stopped_gracefully_s" in checks:
        _seconds(f"{at}.stopped_gracefully_s", checks["stopped_gracefully_s"])
    for key in ("evicted", "displayed_reason", "gang"):
        if key in checks and not isinstance(checks[key], bool):
            raise ScenarioError(f"{at}.{key}: true or false, got {checks[key]!r}")
    return Expectation(
        criterion=str(criterion),
        jobs=tuple(dict.fromkeys(names)),
        checks=json.loads(json.dumps(checks)),
        within=_seconds(f"{at}.within", value.get("within", 10)),
        hold=_seconds(f"{at}.hold", value.get("hold", 0)),
    )
