"""Running a Kueue scenario against a cluster through the Kubernetes API: one implementation for
a customer's Kueue and the simulated cluster's.

A run: remove what earlier runs of the scenario left (crashed ones too: everything carries the
scenario label); create the namespaces and Kueue objects, renamed with the run's prefix; walk the
timeline (submit a job = create its batch/v1 Job or its pod group; finish = annotate its pods so
that they exit 0; expect = observe until it holds or its bound runs out, then hold it); resubmit
a pod group whose pods Kueue evicted, once none of them is live, as its owner would (a Job is
requeued by Kueue itself); then remove everything, whatever happened. Observations go into the
`RunRecord` (raw evidence, stored before judging) and the judge turns them into verdicts.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes.client import ApiClient, ApisApi, AppsV1Api, BatchV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from fleetval.errors import ParseError
from fleetval.kueue.api import GROUP, PLURALS, POD_GROUP_LABEL, RETRIABLE_IN_GROUP, VERSION
from fleetval.kueue.cluster_facts import (
    KUEUE_CONFIG_MAP,
    OWN_NAMESPACE,
    ClusterFacts,
    gpu_products,
    read_settings,
    why_not_meaningful,
    with_fleet_product,
)
from fleetval.kueue.job import (
    FINISH_ANNOTATION,
    JOB_IMAGE,
    POD_GROUP_KIND,
    JobShape,
    group_pod_manifest,
    job_manifest,
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

DEFAULT_IMAGE: Final = JOB_IMAGE
KUEUE_NAMESPACE: Final = "kueue-system"
KUEUE_DEPLOYMENT: Final = "kueue-controller-manager"
POLL_S: Final = 0.2
NAMESPACE_GONE_WAIT_S: Final = 60.0
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
    cluster: dict[str, Any] = field(default_factory=dict)  # what was read of it first (ClusterFacts)
    inconclusive: str = ""  # why the scenario was not run on this cluster

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
            "cluster": self.cluster,
            "inconclusive": self.inconclusive,
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
        self.batch = BatchV1Api(api)
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
        self._product: str | None = None  # the fleet's GPU product (`<fleet-gpu-product>`)

    # --- the run ---------------------------------------------------------------------------------
    def run(self) -> RunRecord:
        self.record.started_at = dt.datetime.now(dt.UTC).isoformat()
        try:
            self.record.kueue_version = kueue_version(self.api, self.kueue_namespace)
            facts = self.read_cluster()
            self.record.cluster = facts.to_json()
            self.record.inconclusive = why_not_meaningful(self.scenario, facts)
            if self.record.inconclusive:
                return self.record  # nothing created; the cleanup below finds nothing of this run
            self._product = facts.fleet_gpu_product
            self.record.cleaned = cleanup(self.core, self.custom, self.scenario.id, batch=self.batch)
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
                gone = cleanup(
                    self.core, self.custom, self.scenario.id, run=self.labels[RUN_LABEL], batch=self.batch
                )
                self.record.cleaned = {k: self.record.cleaned.get(k, 0) + v for k, v in gone.items()}
            except (ApiException, OSError, HTTPError) as exc:
                self.record.harness_error = self.record.harness_error or f"cleanup failed: {exc}"
        return self.record

    def read_cluster(self) -> ClusterFacts:
        """Kueue's served API versions, its live Configuration and the fleet's GPU products."""
        groups = ApisApi(self.api).get_api_versions().groups or []
        group = next((g for g in groups if g.name == GROUP), None)
        served = tuple(str(v.version) for v in group.versions or []) if group is not None else None
        try:
            config_map = self.core.read_namespaced_config_map(KUEUE_CONFIG_MAP, self.kueue_namespace)
            settings = read_settings(self.api.sanitize_for_serialization(config_map))
        except ApiException as exc:
            where = f"{self.kueue_namespace}/{KUEUE_CONFIG_MAP}"
            why = f"no ConfigMap {where}" if exc.status == 404 else f"{where}: {exc.status} {exc.reason}"
            settings = read_settings(None, why)
        labels = [dict(n.metadata.labels or {}) for n in self.core.list_node().items]
        own: dict[str, str] | None = None  # fleetval's namespace: would Kueue gate the probes there?
        try:  # list, which the scenario role grants (deploy/rbac.yaml), not get
            listed = self.core.list_namespace(field_selector=f"metadata.name={OWN_NAMESPACE}").items
            own = dict(listed[0].metadata.labels or {}) if listed else None
        except ApiException:
            pass
        return ClusterFacts(self.record.kueue_version, served, settings, gpu_products(labels), own)

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
            if self._product is not None:
                body = with_fleet_product(body, self._product)
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
    def shape(self, job: Job) -> JobShape:
        """The job with the run's names."""
        return JobShape(
            name=self.names[job.name],
            namespace=self.names[job.namespace],
            queue=self.names.get(job.queue, job.queue),
            pods=job.pods,
            gpus=job.gpus,
            resource=job.resource,
            cpu=job.cpu,
            memory=job.memory,
            grace=job.grace,
            save=job.save,
            priority=self.names[job.priority] if job.priority else None,
            node_selector=job.node_selector,
            image=self.image,
        )

    def pod_labels(self, job: Job) -> dict[str, str]:
        return {**self.labels, JOB_LABEL: job.name}

    def _submit(self, job: Job) -> None:
        attempt = self._attempts.get(job.name, 0)
        shape = self.shape(job)
        if job.kind == POD_GROUP_KIND:
            for index in range(job.pods):
                body = group_pod_manifest(shape, index, attempt, self.pod_labels(job))
                self.core.create_namespaced_pod(shape.namespace, body)
        else:
            body = job_manifest(shape, self.labels, self.pod_labels(job))
            self.batch.create_namespaced_job(shape.namespace, body)
        self._submitted.add(job.name)
        self._action("submitted" if not attempt else f"resubmitted (attempt {attempt})", [job.name])

    def _finish(self, job: Job) -> None:
        """Tell the job's pods to end (they exit 0). A job none of whose pods runs (admitted by
        Kueue, never placed by kube-scheduler) cannot end by itself: its owner deletes it."""
        self._finished.add(job.name)
        ns = self.names[job.namespace]
        listed = self.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={job.name}").items
        pods = [self.api.sanitize_for_serialization(p) for p in listed]
        if any((p.get("status") or {}).get("phase") == "Running" for p in pods):
            for pod in pods:
                self._tell_to_finish(ns, pod)
            self._action("finished", [job.name])
            return
        if job.kind == POD_GROUP_KIND:
            for pod in pods:  # not retriable: Kueue finishes the group instead of waiting for replacements
                name = pod["metadata"]["name"]
                patch = {"metadata": {"annotations": {RETRIABLE_IN_GROUP: "false"}}}
                _delete(self.core.patch_namespaced_pod, name, ns, patch)
                _delete(self.core.delete_namespaced_pod, name, ns)
        else:
            _delete(
                self.batch.delete_namespaced_job, self.names[job.name], ns, propagation_policy="Background"
            )
        self._action("deleted (none of its pods ran)", [job.name])

    def _tell_to_finish(self, namespace: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if (meta.get("annotations") or {}).get(FINISH_ANNOTATION) or meta.get("deletionTimestamp"):
            return
        patch = {"metadata": {"annotations": {FINISH_ANNOTATION: "true"}}}
        try:
            self.core.patch_namespaced_pod(meta["name"], namespace, patch)
        except ApiException as exc:
            if exc.status != 404:  # gone meanwhile: nothing left to finish
                raise

    # --- observing -------------------------------------------------------------------------------
    def _observe(self) -> Observation:
        jobs: dict[str, JobView] = {}
        by_ns: dict[str, list[Job]] = {}
        for job in self.scenario.jobs.values():
            by_ns.setdefault(self.names[job.namespace], []).append(job)
        for ns, ns_jobs in by_ns.items():
            listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]
            workloads = {w["metadata"]["name"]: _readable(w) for w in listed}
            job_workloads = {  # a batch/v1 Job's Workload is job-<name>-<hash>, owned by the Job
                str(ref.get("name")): workloads[w["metadata"]["name"]]
                for w in listed
                for ref in w["metadata"].get("ownerReferences") or []
                if ref.get("kind") == "Job"
            }
            pods: dict[str, list[PodView]] = {}
            for pod in self.core.list_namespaced_pod(ns, label_selector=JOB_LABEL).items:
                raw = self.api.sanitize_for_serialization(pod)
                name = raw["metadata"]["labels"][JOB_LABEL]
                pods.setdefault(name, []).append(PodView.of(raw))
                if name in self._finished and (raw.get("status") or {}).get("phase") in (
                    "Pending",
                    "Running",
                ):
                    self._tell_to_finish(ns, raw)  # a pod created after the finish ends too
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
                workload = (
                    job_workloads.get(group)
                    or workloads.get(group)
                    or next((w for n, w in sorted(workloads.items()) if n.startswith(f"pod-{group}-")), None)
                )
                named = str(((workload or {}).get("metadata") or {}).get("name") or group)
                shown = sorted(events.get(named, []), key=lambda e: e["time"])
                jobs[job.name] = JobView(workload, tuple(pods.get(job.name, [])), tuple(shown))
        obs = Observation(self._elapsed(), dt.datetime.now(dt.UTC), jobs)
        self.history.record(obs, {j.name: j.pods for j in self.scenario.jobs.values()})
        self._mode = self._mode or reason_mode(self.history)
        self._resubmit_evicted(obs)
        return obs

    def _resubmit_evicted(self, obs: Observation) -> None:
        """A submitted, unfinished pod group evicted with none of its pods live any more: its owner
        sends it again (Kueue keeps the ended pods until their replacements exist)."""
        for name in sorted(self._submitted - self._finished):
            view = obs.jobs.get(name)
            if self.scenario.jobs[name].kind != POD_GROUP_KIND or view is None:
                continue
            if name not in self.history.evicted or any(not p.ended for p in view.pods):
                continue  # replacements exist (live) once resubmitted: one resubmission per eviction
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
    shown = {"name": pod.name, "phase": pod.phase, "gated": pod.gated, "deleting": pod.deleting}
    return {**shown, "unschedulable": pod.unschedulable} if pod.unschedulable else shown


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
    core: CoreV1Api,
    custom: CustomObjectsApi,
    scenario_id: str,
    *,
    run: str | None = None,
    batch: BatchV1Api | None = None,
    wait_s: float = NAMESPACE_GONE_WAIT_S,
) -> dict[str, int]:
    """Delete what runs of the scenario created (one run's with `run`): Jobs, then pods (their
    quota), then the namespaces (their LocalQueues), then the cluster-scoped Kueue objects.
    Returns how many objects of each kind it deleted."""
    selector = f"{SCENARIO_LABEL}={scenario_id}" + (f",{RUN_LABEL}={run}" if run else "")
    counts: dict[str, int] = {}
    namespaces = [ns.metadata.name for ns in core.list_namespace(label_selector=selector).items]
    for ns in namespaces:
        if batch is not None:  # before the pods: a Job would replace them
            for job in batch.list_namespaced_job(ns, label_selector=SCENARIO_LABEL).items:
                _delete(batch.delete_namespaced_job, job.metadata.name, ns, propagation_policy="Background")
                counts["jobs"] = counts.get("jobs", 0) + 1
        for pod in core.list_namespaced_pod(ns, label_selector=SCENARIO_LABEL).items:
            if POD_GROUP_LABEL in (pod.metadata.labels or {}):
                # Not retriable: Kueue finishes the group and lets its pods go (its finalizer).
                patch = {"metadata": {"annotations": {RETRIABLE_IN_GROUP: "false"}}}
                _delete(core.patch_namespaced_pod, pod.metadata.name, ns, patch)
            _delete(core.delete_namespaced_pod, pod.metadata.name, ns, grace_period_seconds=0)
            counts["pods"] = counts.get("pods", 0) + 1
        _delete(core.delete_namespace, ns)
        counts["namespaces"] = counts.get("namespaces", 0) + 1
    # A namespace goes once its Workloads have (Kueue's finalizer, after the Jobs' garbage
    # collection): wait, so that the next run starts on a cluster without this one's objects.
    deadline = time.monotonic() + wait_s
    while namespaces and time.monotonic() < deadline:
        if not core.list_namespace(label_selector=selector).items:
            break
        time.sleep(POLL_S)
    else:
        if namespaces and (left := len(core.list_namespace(label_selector=selector).items)):
            counts["namespaces_still_terminating"] = left
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
