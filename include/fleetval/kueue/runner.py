"""Running a Kueue scenario against a cluster through the Kubernetes API: one implementation for
a customer's Kueue and the simulated cluster's.

A run: remove what earlier runs of the scenario left (crashed ones too: everything carries the
scenario label); create the namespaces and Kueue objects, renamed with the run's prefix; walk the
timeline (submit a job = create its pod group; finish = delete its pods; expect = observe until
it holds or its bound runs out, then hold it); resubmit a job whose pods Kueue evicted, as its
owner would; then remove everything, whatever happened. Observations go into the `RunRecord`
(raw evidence, stored before judging) and the judge turns them into verdicts.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from fleetval.errors import ParseError
from fleetval.kueue.api import (
    GROUP,
    PLURALS,
    POD_GROUP_COUNT,
    POD_GROUP_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    VERSION,
)
from fleetval.kueue.judge import History, JobView, Observation, PodView, StepResult, check, reason_mode
from fleetval.kueue.parse import normalized
from fleetval.kueue.scenario import (
    JOB_LABEL,
    RUN_LABEL,
    SCENARIO_LABEL,
    Job,
    Scenario,
    Step,
    prefix_for,
    rename_map,
    renamed,
)

DEFAULT_IMAGE: Final = "busybox:1.36"
KUEUE_NAMESPACE: Final = "kueue-system"
KUEUE_DEPLOYMENT: Final = "kueue-controller-manager"
POLL_S: Final = 0.2
_CLUSTER_SCOPED: Final = ("clusterqueues", "cohorts", "resourceflavors", "workloadpriorityclasses")


@dataclass
class RunRecord:
    """What a run did and saw: the raw evidence of the scenario."""

    scenario: str
    run_key: str
    prefix: str
    kueue_version: str = "unknown"
    started_at: str = ""
    actions: list[dict[str, Any]] = field(default_factory=list)
    results: list[StepResult] = field(default_factory=list)
    observations: list[dict[str, Any]] = field(default_factory=list)  # at each expectation's end
    harness_error: str = ""
    cleaned: dict[str, int] = field(default_factory=dict)
    mode: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "run_key": self.run_key,
            "prefix": self.prefix,
            "kueue_version": self.kueue_version,
            "started_at": self.started_at,
            "actions": self.actions,
            "results": [r.to_json() for r in self.results],
            "observations": self.observations,
            "harness_error": self.harness_error,
            "cleaned": self.cleaned,
            "reason_mode": self.mode,
        }


def kueue_version(api: ApiClient, namespace: str = KUEUE_NAMESPACE) -> str:
    """The image tag of Kueue's controller manager, or "unknown" when it cannot be read."""
    try:
        deployment = AppsV1Api(api).read_namespaced_deployment(KUEUE_DEPLOYMENT, namespace)
    except ApiException:
        return "unknown"
    for container in deployment.spec.template.spec.containers or []:
        image = str(container.image or "")
        if "kueue" in image and ":" in image.rsplit("/", 1)[-1]:
            return image.rsplit(":", 1)[1]
    return "unknown"


class ScenarioRunner:
    """One scenario, one run. `clock`/`sleep` are injectable for the tests of the loop."""

    def __init__(
        self,
        api: ApiClient,
        scenario: Scenario,
        run_key: str,
        *,
        image: str = DEFAULT_IMAGE,
        kueue_namespace: str = KUEUE_NAMESPACE,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        max_within: float | None = None,
    ) -> None:
        self.core = CoreV1Api(api)
        self.custom = CustomObjectsApi(api)
        self.api = api
        self.scenario = scenario
        self.run_key = run_key
        self.image = image
        self.kueue_namespace = kueue_namespace
        self.clock = clock
        self.sleep = sleep
        self.max_within = (
            max_within  # caps every expectation's bound (a faster verdict on a known-bad cluster)
        )
        self.prefix = prefix_for(scenario.id, run_key)
        self.names = rename_map(scenario, self.prefix)
        self.labels = {SCENARIO_LABEL: scenario.id, RUN_LABEL: self.prefix.rstrip("-")}
        self.history = History()
        self.record = RunRecord(scenario.id, run_key, self.prefix)
        self._start = 0.0
        self._attempts: dict[str, int] = {}
        self._submitted: set[str] = set()
        self._finished: set[str] = set()
        self._mode: str | None = None  # the reason mode, once the cluster's reasons showed it

    # --- the run ---------------------------------------------------------------------------------
    def run(self) -> RunRecord:
        self.record.started_at = dt.datetime.now(dt.UTC).isoformat()
        try:
            self.record.kueue_version = kueue_version(self.api, self.kueue_namespace)
            self.record.cleaned = cleanup(self.core, self.custom, self.scenario.id)
            self._create_objects()
            self._start = self.clock()
            for step in self.scenario.steps:
                self._wait_until(step)
                if step.action == "submit":
                    for job in step.jobs:
                        self._submit(self.scenario.jobs[job])
                elif step.action == "finish":
                    for job in step.jobs:
                        self._finish(self.scenario.jobs[job])
                else:
                    self._expect(step)
        except ApiException as exc:
            self.record.harness_error = (
                f"the Kubernetes API refused: {exc.status} {exc.reason}: {_api_message(exc)}"
            )
        except (OSError, ValueError, HTTPError) as exc:  # the API unreachable, an answer not understood
            self.record.harness_error = f"{type(exc).__name__}: {exc}"
        finally:
            self.record.mode = self._mode
            try:
                gone = cleanup(self.core, self.custom, self.scenario.id, run=self.labels[RUN_LABEL])
                self.record.cleaned = {k: self.record.cleaned.get(k, 0) + v for k, v in gone.items()}
            except (ApiException, OSError, HTTPError) as exc:
                self.record.harness_error = self.record.harness_error or f"cleanup failed: {exc}"
        return self.record

    def _elapsed(self) -> float:
        return self.clock() - self._start

    def _wait_until(self, step: Step) -> None:
        if step.at is None:
            return
        while (left := step.at - self._elapsed()) > 0:
            self.sleep(min(left, POLL_S))
            self._observe()  # keeps resubmitting evicted jobs while waiting

    def _create_objects(self) -> None:
        for ns in self.scenario.namespaces:
            body = {"metadata": {"name": self.names[ns], "labels": dict(self.labels)}}
            self.core.create_namespace(body)
        for obj in sorted(self.scenario.objects, key=lambda o: list(PLURALS).index(o["kind"])):
            body = renamed(obj, self.names)
            meta = body.setdefault("metadata", {})
            meta["labels"] = {**(meta.get("labels") or {}), **self.labels}
            plural = PLURALS[obj["kind"]]
            version = str(obj["apiVersion"]).split("/", 1)[1]
            if plural == "localqueues":
                self.custom.create_namespaced_custom_object(GROUP, version, meta["namespace"], plural, body)
            else:
                self.custom.create_cluster_custom_object(GROUP, version, plural, body)
        self._action("created", [o["metadata"]["name"] for o in self.scenario.objects])

    def _action(self, what: str, subjects: list[str]) -> None:
        self.record.actions.append(
            {"t": round(self._elapsed(), 3) if self._start else 0.0, "action": what, "subjects": subjects}
        )

    # --- jobs ------------------------------------------------------------------------------------
    def pod_body(self, job: Job, index: int, attempt: int) -> dict[str, Any]:
        """The pod a job's member `index` is: a queued pod-group member that holds its GPUs until deleted."""
        group = self.names[job.name]
        name = f"{group}-{index}" + (f"-r{attempt}" if attempt else "")
        labels = {
            **self.labels,
            QUEUE_LABEL: self.names.get(job.queue, job.queue),
            POD_GROUP_LABEL: group,
            JOB_LABEL: job.name,
        }
        if job.priority:
            labels[PRIORITY_CLASS_LABEL] = self.names[job.priority]
        limits: dict[str, str] = {"cpu": job.cpu, "memory": job.memory}
        if job.gpus:
            limits[job.resource] = str(job.gpus)
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": job.grace,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "main",
                    "image": self.image,
                    "command": ["sleep", "infinity"],
                    "resources": {"requests": {"cpu": job.cpu, "memory": job.memory}, "limits": limits},
                }
            ],
        }
        if job.node_selector:
            spec["nodeSelector"] = dict(job.node_selector)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {POD_GROUP_COUNT: str(job.pods)},
            },
            "spec": spec,
        }

    def _submit(self, job: Job) -> None:
        attempt = self._attempts.get(job.name, 0)
        ns = self.names[job.namespace]
        for index in range(job.pods):
            self.core.create_namespaced_pod(ns, self.pod_body(job, index, attempt))
        self._submitted.add(job.name)
        self._action("submitted" if not attempt else f"resubmitted (attempt {attempt})", [job.name])

    def _finish(self, job: Job) -> None:
        self._finished.add(job.name)
        ns = self.names[job.namespace]
        for pod in self.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={job.name}").items:
            _delete(self.core.delete_namespaced_pod, pod.metadata.name, ns)
        self._action("finished", [job.name])

    # --- observing -------------------------------------------------------------------------------
    def _observe(self) -> Observation:
        jobs: dict[str, JobView] = {}
        by_ns: dict[str, list[Job]] = {}
        for job in self.scenario.jobs.values():
            by_ns.setdefault(self.names[job.namespace], []).append(job)
        for ns, ns_jobs in by_ns.items():
            listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]
            workloads = {w["metadata"]["name"]: _readable(w) for w in listed}
            pods: dict[str, list[PodView]] = {}
            for pod in self.core.list_namespaced_pod(ns, label_selector=JOB_LABEL).items:
                raw = self.api.sanitize_for_serialization(pod)
                pods.setdefault(raw["metadata"]["labels"][JOB_LABEL], []).append(PodView.of(raw))
            events: dict[str, list[dict[str, Any]]] = {}
            for event in self.core.list_namespaced_event(ns).items:
                involved = event.involved_object
                if involved is None or involved.kind != "Workload":
                    continue
                events.setdefault(str(involved.name), []).append(
                    {
                        "type": event.type,
                        "reason": event.reason,
                        "message": event.message,
                        "time": _event_time(event),
                    }
                )
            for job in ns_jobs:
                group = self.names[job.name]
                # A platform that ignores pod groups makes one Workload per pod (pod-<pod>-<hash>).
                workload = workloads.get(group) or next(
                    (w for n, w in sorted(workloads.items()) if n.startswith(f"pod-{group}-")), None
                )
                shown = sorted(events.get(self.names[job.name], []), key=lambda e: e["time"])
                jobs[job.name] = JobView(workload, tuple(pods.get(job.name, [])), tuple(shown))
        obs = Observation(self._elapsed(), dt.datetime.now(dt.UTC), jobs)
        self.history.record(obs, {j.name: j.pods for j in self.scenario.jobs.values()})
        self._mode = self._mode or reason_mode(self.history)
        self._resubmit_evicted(obs)
        return obs

    def _resubmit_evicted(self, obs: Observation) -> None:
        """A submitted, unfinished job with no pod left was evicted: its owner sends it again."""
        for name in sorted(self._submitted - self._finished):
            view = obs.jobs.get(name)
            if view is None or view.pods or name not in self.history.evicted:
                continue
            self._attempts[name] = self._attempts.get(name, 0) + 1
            self._submit(self.scenario.jobs[name])

    def _expect(self, step: Step) -> None:
        expect = step.expect
        assert expect is not None
        began = self._elapsed()
        while True:
            obs = self._observe()
            result = check(expect, obs, self.history, self.names, self._mode)
            within = min(expect.within, self.max_within) if self.max_within is not None else expect.within
            if result.ok or obs.t - began >= within:
                break
            self.sleep(POLL_S)
        waited = obs.t - began
        if result.ok and expect.hold:
            until = obs.t + expect.hold
            while result.ok and obs.t < until:
                self.sleep(POLL_S)
                obs = self._observe()
                result = check(expect, obs, self.history, self.names, self._mode)
            if not result.ok:
                result = type(result)(
                    False, f"held for {obs.t - began - waited:.1f} s only, then {result.detail}"
                )
        self.record.results.append(
            StepResult(step.index, expect.criterion, result.ok, result.detail, waited, expect.to_json())
        )
        self.record.observations.append(
            {
                "step": step.index,
                "t": round(obs.t, 3),
                "jobs": {
                    job: {
                        "workload": dict(obs.jobs[job].workload or {}),
                        "pods": [_pod_json(p) for p in obs.jobs[job].pods],
                        "events": list(obs.jobs[job].events[-3:]),
                    }
                    for job in expect.jobs
                    if job in obs.jobs
                },
            }
        )


def _readable(workload: dict[str, Any]) -> dict[str, Any]:
    """The Workload in the one shape the judge reads; one it cannot read is kept as it came, and
    the expectations on it then fail on what they see."""
    try:
        return normalized(workload)
    except ParseError:
        return workload


def _pod_json(pod: PodView) -> dict[str, Any]:
    return {"name": pod.name, "phase": pod.phase, "gated": pod.gated, "deleting": pod.deleting}


def _event_time(event: Any) -> str:
    for value in (
        event.event_time,
        event.last_timestamp,
        event.first_timestamp,
        event.metadata.creation_timestamp,
    ):
        if value is not None:
            return value.isoformat() if hasattr(value, "isoformat") else str(value)
    return ""


def _api_message(exc: ApiException) -> str:
    import json

    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.body)
    except ValueError:
        return str(exc.body)


def cleanup(
    core: CoreV1Api, custom: CustomObjectsApi, scenario_id: str, *, run: str | None = None
) -> dict[str, int]:
    """Delete what runs of the scenario created (one run's with `run`): pods first (their quota),
    then the namespaces (their LocalQueues), then the cluster-scoped Kueue objects. Returns how
    many objects of each kind it deleted."""
    selector = f"{SCENARIO_LABEL}={scenario_id}" + (f",{RUN_LABEL}={run}" if run else "")
    counts: dict[str, int] = {}
    namespaces = [ns.metadata.name for ns in core.list_namespace(label_selector=selector).items]
    for ns in namespaces:
        for pod in core.list_namespaced_pod(ns, label_selector=SCENARIO_LABEL).items:
            _delete(core.delete_namespaced_pod, pod.metadata.name, ns, grace_period_seconds=0)
            counts["pods"] = counts.get("pods", 0) + 1
        _delete(core.delete_namespace, ns)
        counts["namespaces"] = counts.get("namespaces", 0) + 1
    for plural in _CLUSTER_SCOPED:
        items = custom.list_cluster_custom_object(GROUP, VERSION, plural, label_selector=selector)["items"]
        for item in items:
            name = item["metadata"]["name"]
            _delete(
                lambda plural=plural, name=name: custom.delete_cluster_custom_object(
                    GROUP, VERSION, plural, name
                )
            )
        if items:
            counts[plural] = len(items)
    return counts


def _delete(call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        if exc.status != 404:  # gone already: what we wanted
            raise
