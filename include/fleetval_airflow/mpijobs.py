"""Multi-node probes as MPIJobs on the cluster: submit, wait, collect — shared by the pair probe
operator (`mpijob_probe.MPIJobProbeOperator`), the isolation operator (`nccl_isolation`) and the
trigger they defer to (`triggers.mpijob.MPIJobTrigger`).

- **Submit**: the MPIJob of `fleetval.nccl.mpijob` (Kueue gang admission: created suspended with
  the queue label), one per task try (`<name>-t<try>`), labelled with its probe. An nccl probe is
  checked first (`fleetval.nccl.preflight`: mpi-operator serving the MPIJob, the workers' RDMA
  device), and the job is created with `fieldValidation=Strict`; a cluster not set up for it is a
  `ProbeConfigError` (a configuration error: not retried). An mpi-operator v0.4 CRD refusing
  `spec.launcherCreationPolicy` gets the v0.4 form of the job instead (`fleetval.nccl.mpijob`),
  and the runner's later jobs go straight to it. A job of the same
  probe that is still queued or running is reattached to instead (a retried task, a worker lost
  mid-wait); one that succeeded is collected (its output not yet stored).
- **Wait**: a job is done when it is `Succeeded` or `Failed`; when still suspended (Kueue never
  admitted it) `admission_timeout_s` after its creation; or when still unfinished past its run
  deadline (admission + the probe's timeout + a grace period).
- **Collect**: the launcher pod's log is the raw output (read with `_preload_content=False`: the
  kubernetes client's str conversion mangles plain text), its exit code says whether nccl-tests
  reported (`ProbeSpec.reported_exit_codes`: the output decides) or the harness broke (127 a
  missing binary, a killed launcher, a v0.4 launcher whose workers never became reachable). A
  succeeded job is deleted; a failed one is kept for forensics (pruned to the newest
  `KEEP_FAILED_JOBS` at the start of each sweep); a job never admitted or overdue is deleted, so
  it cannot start later on nodes that have moved on.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kubernetes.client.exceptions import ApiException

from fleetval.nccl import exit_codes, mpijob, preflight
from fleetval.nodes import ProbeOutput
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import PROBE_LABEL, ProbeSpec, probe_label

POLL_S: Final = 10.0
FIRST_POLL_S: Final = 1.0  # polls back off from 1 s to POLL_S: quick jobs are seen quickly
ADMISSION_TIMEOUT_S: Final = 3600
GRACE_S: Final = 600
KEEP_FAILED_JOBS: Final = 50
DONE: Final = ("Succeeded", "Failed")
# Outcomes of a wait: the job's terminal state, or why the wait gave up on it.
NOT_ADMITTED: Final = "NotAdmitted"
OVERDUE: Final = "Overdue"
GONE: Final = "Gone"
JOBS_SELECTOR: Final = "app.kubernetes.io/part-of=fleetval"
# What nccl-tests prints before its first collective (the parameter line, in every version).
NCCL_TESTS_BANNER: Final = re.compile(r"nccl-tests version|Collective test starting|nThread\s+\d+\s+nGpus")


def _api(namespace: str) -> dict[str, str]:
    return {"group": mpijob.GROUP, "version": mpijob.VERSION, "namespace": namespace, "plural": mpijob.PLURAL}


@dataclass(frozen=True, slots=True)
class JobRef:
    """One submitted MPIJob, and when the wait gives up on it (epoch seconds)."""

    name: str
    namespace: str
    probe: dict[str, Any]  # the ProbeSpec as JSON
    admit_by: float
    end_by: float

    @property
    def spec(self) -> ProbeSpec:
        return ProbeSpec.from_json(self.probe)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobRef:
        return cls(
            str(data["name"]),
            str(data["namespace"]),
            dict(data["probe"]),
            float(data["admit_by"]),
            float(data["end_by"]),
        )


def suspended(job: Mapping[str, Any]) -> bool:
    """Kueue admits a job by unsuspending it (`spec.runPolicy.suspend: false`)."""
    return bool(((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"))


def outcome(job: Mapping[str, Any] | None, ref: JobRef, now: float) -> str | None:
    """The job's outcome, or None while it is worth waiting for."""
    if job is None:
        return GONE
    state = mpijob.job_state(dict(job))
    if state in DONE:
        return state
    if suspended(job) and now > ref.admit_by:
        return NOT_ADMITTED
    if now > ref.end_by:
        return OVERDUE
    return None


def poll(custom: Any, refs: Sequence[JobRef], now: float) -> dict[str, str] | None:
    """{job name: outcome} once every job has one, else None."""
    outcomes: dict[str, str] = {}
    for ref in refs:
        try:
            job = custom.get_namespaced_custom_object(name=ref.name, **_api(ref.namespace))
        except ApiException as exc:
            if exc.status != 404:
                raise
            job = None
        found = outcome(job, ref, now)
        if found is None:
            return None
        outcomes[ref.name] = found
    return outcomes


def backoff(attempt: int, ceiling: float = POLL_S) -> float:
    return float(min(ceiling, FIRST_POLL_S * 2**attempt))


def _created_at(job: Mapping[str, Any], default: float) -> float:
    stamp = (job.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return default
    try:
        return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default


def launcher_failure(code: int | None, spec: ProbeSpec, state: str, job: str, raw: str) -> str | None:
    """Why a finished job is not evidence about its nodes, or None when nccl-tests reported.

    mpirun exits 1 for its own failures (no slots, executable not found, root refused), the
    code nccl-tests uses for wrong results: a non-zero exit without nccl-tests' banner in the log
    is mpirun's, a harness failure. The spec declares every code some nccl-tests version reports
    with; the code is then read by the version the output prints (`exit_codes.exit_code_problem`:
    6 is wrong results in v2.17.3-v2.17.6 but a usage error from v2.17.7)."""
    if code is None:
        return f"MPIJob {job} {state.lower()} without a launcher that ran to the end"
    if code not in spec.reported_exit_codes:
        hint = {126: "not executable", 127: "command not found in the image", 137: "killed"}.get(code, "")
        detail = f" ({hint})" if hint else ""
        return f"the MPIJob launcher exited {code}{detail}, not a code {spec.tool} reports with"
    if code != 0 and spec.tool == "nccl" and not NCCL_TESTS_BANNER.search(raw):
        return f"mpirun exited {code} before nccl-tests ran (see the launcher log of MPIJob {job})"
    if spec.tool == "nccl":
        return exit_codes.exit_code_problem(code, raw)
    return None


class MPIJobRunner:
    """Submit, wait for and collect MPIJob probes (see module doc). `custom` is a
    CustomObjectsApi, `core` a CoreV1Api, both of the `kubernetes` client."""

    def __init__(
        self,
        custom: Any,
        core: Any,
        *,
        namespace: str,
        queue: str,
        admission_timeout_s: int = ADMISSION_TIMEOUT_S,
        worker_devices: Sequence[tuple[str, str]] = (),
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        log: Any = None,
    ) -> None:
        self.custom = custom
        self.core = core
        self.namespace = namespace
        self.queue = queue
        self.admission_timeout_s = admission_timeout_s
        self.worker_devices = tuple(worker_devices)
        self.clock = clock
        self.sleep = sleep
        self.log = log
        # The mpi-operator release whose MPIJob the cluster takes, once a create has told.
        self.mpi_operator = mpijob.MPI_OPERATOR_V05

    def _info(self, msg: str, *args: Any) -> None:
        if self.log is not None:
            self.log.info(msg, *args)

    # --- submit -------------------------------------------------------------------------------
    def submit(self, spec: ProbeSpec, *, attempt: int) -> JobRef:
        """Reattach to this probe's queued, running or uncollected succeeded job, else create one.

        An nccl probe first checks that the cluster serves fleetval's MPIJob and finds the RDMA
        devices its workers request (`fleetval.nccl.preflight`); the job is created with
        `fieldValidation=Strict`, so an mpi-operator whose CRD lacks a field fleetval sets refuses
        it: v0.4's refusal of `spec.launcherCreationPolicy` gets the v0.4 form, any other refusal
        raises. A cluster that is not set up for the probe raises `preflight.ProbeConfigError`."""
        api = _api(self.namespace)
        devices = self.worker_devices
        if spec.tool == "nccl":
            preflight.check_mpijob_api(self.custom)
        listed = self.custom.list_namespaced_custom_object(
            label_selector=f"{PROBE_LABEL}={probe_label(spec.probe_key)}", **api
        )
        jobs = [j for j in listed.get("items", []) if _probe_key(j) == spec.probe_key]
        jobs.sort(key=lambda j: (_created_at(j, 0.0), str(j["metadata"]["name"])), reverse=True)
        reusable = [j for j in jobs if mpijob.job_state(j) != "Failed"]
        if reusable:
            job = reusable[0]
            self._info("reattaching to MPIJob %s (%s)", job["metadata"]["name"], mpijob.job_state(job))
            return self._ref(spec, job)
        if spec.tool == "nccl":
            devices = preflight.worker_devices(self.core, spec, self.worker_devices)
        name = mpijob.mpijob_name(spec, attempt)
        try:
            job = self._create(spec, name, devices)
        except ApiException as exc:
            if self.mpi_operator == mpijob.MPI_OPERATOR_V04 or not mpijob.rejects_launcher_creation_policy(
                exc.status, exc.body
            ):
                raise
            self._info("the cluster's MPIJob CRD is mpi-operator v0.4's: creating %s in its form", name)
            self.mpi_operator = mpijob.MPI_OPERATOR_V04
            job = self._create(spec, name, devices)
        self._info(
            "created MPIJob %s for %s (queue %s, mpi-operator %s)",
            name,
            spec.probe_key,
            self.queue,
            self.mpi_operator,
        )
        return self._ref(spec, job)

    def _create(self, spec: ProbeSpec, name: str, devices: Sequence[tuple[str, str]]) -> Mapping[str, Any]:
        """Create the job for `self.mpi_operator` with fieldValidation=Strict (an existing one of the
        name is taken); ApiException for a refusal, ProbeConfigError where it says why."""
        api = _api(self.namespace)
        body = mpijob.mpijob_manifest(
            spec,
            queue_name=self.queue,
            namespace=self.namespace,
            admission_timeout_s=self.admission_timeout_s,
            name=name,
            worker_devices=devices,
            mpi_operator=self.mpi_operator,
        )
        try:
            job = self.custom.create_namespaced_custom_object(body=body, field_validation="Strict", **api)
        except ApiException as exc:
            if exc.status != 409:
                hint = preflight.create_error_hint(exc.status, str(exc.body or ""))
                if hint:
                    raise preflight.ProbeConfigError(hint) from exc
                raise
            job = self.custom.get_namespaced_custom_object(name=name, **api)
        return job if isinstance(job, Mapping) else body

    def _ref(self, spec: ProbeSpec, job: Mapping[str, Any]) -> JobRef:
        created = _created_at(job, self.clock())
        admit_by = created + self.admission_timeout_s
        return JobRef(
            name=str(job["metadata"]["name"]),
            namespace=self.namespace,
            probe=spec.to_json(),
            admit_by=admit_by,
            end_by=admit_by + spec.timeout_s + GRACE_S,
        )

    # --- wait (on the worker; the deferrable path waits in MPIJobTrigger) ----------------------
    def wait(self, refs: Sequence[JobRef], *, poll_interval: float = POLL_S) -> dict[str, str]:
        attempt = 0
        while True:
            found = poll(self.custom, refs, self.clock())
            if found is not None:
                return found
            self.sleep(backoff(attempt, poll_interval))
            attempt += 1

    # --- collect ------------------------------------------------------------------------------
    def collect(self, ref: JobRef, result: str) -> ProbeOutput:
        """The probe's output from a waited-for job, and the job cleaned up (see module doc)."""
        spec = ref.spec
        raw, code, error = "", None, None
        if result in DONE:
            pod = self._launcher(ref)
            waited = None
            if pod is not None:
                raw = self._log(pod)
                code = _exit_code(pod)
                waited = _wait_failure(pod)
            error = waited or launcher_failure(code, spec, result, ref.name, raw)
            if result == "Succeeded":
                self.delete(ref)
        elif result == NOT_ADMITTED:
            self.delete(ref)
            error = (
                f"MPIJob {ref.name} was not admitted by Kueue (queue {self.queue}) within "
                f"{self.admission_timeout_s}s: withdrawn"
            )
        elif result == OVERDUE:
            self.delete(ref)
            error = f"MPIJob {ref.name} did not finish by its deadline: deleted"
        else:
            error = f"MPIJob {ref.name} was deleted before it finished"
        output = probe_outputs.probe_output(spec, raw, exit_code=code, error=error, finished_at=self.clock())
        return dataclasses.replace(output, spec={**output.spec, "mpijob": ref.name})

    def failure(self, spec: ProbeSpec, error: str) -> ProbeOutput:
        """A probe whose job could not be submitted or waited for: a harness error."""
        return probe_outputs.probe_output(
            spec, "", exit_code=None, error=error[:500], finished_at=self.clock()
        )

    def _launcher(self, ref: JobRef) -> Any:
        pods = self.core.list_namespaced_pod(
            ref.namespace,
            label_selector=f"{mpijob.JOB_NAME_LABEL}={ref.name},{mpijob.JOB_ROLE_LABEL}=launcher",
        ).items
        if not pods:
            return None
        epoch = dt.datetime.min.replace(tzinfo=dt.UTC)
        return max(pods, key=lambda p: p.metadata.creation_timestamp or epoch)

    def _log(self, pod: Any) -> str:
        container = pod.spec.containers[0].name if pod.spec and pod.spec.containers else None
        try:
            response = self.core.read_namespaced_pod_log(
                pod.metadata.name, pod.metadata.namespace, container=container, _preload_content=False
            )
        except ApiException as exc:
            if self.log is not None:
                self.log.warning("could not read the launcher's log: %s", exc.reason)
            return ""
        return str(response.data.decode("utf-8", errors="replace"))

    def delete(self, ref: JobRef) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                name=ref.name, propagation_policy="Foreground", **_api(ref.namespace)
            )
        except ApiException as exc:
            if exc.status != 404:  # already gone is what we wanted
                raise

    # --- forensics, bounded -------------------------------------------------------------------
    def prune_failed(self, *, keep: int = KEEP_FAILED_JOBS) -> list[str]:
        """Delete all but the newest `keep` failed fleetval MPIJobs; returns the names deleted."""
        api = _api(self.namespace)
        try:
            jobs = self.custom.list_namespaced_custom_object(label_selector=JOBS_SELECTOR, **api).get(
                "items", []
            )
        except ApiException as exc:
            if exc.status == 404:  # no mpi-operator CRD on this cluster: nothing to prune
                return []
            raise
        failed = [j for j in jobs if mpijob.job_state(j) == "Failed"]
        # Timestamps have whole seconds: the name (its try) breaks ties.
        failed.sort(key=lambda j: (_created_at(j, 0.0), str(j["metadata"]["name"])), reverse=True)
        doomed = [str(j["metadata"]["name"]) for j in failed[keep:]]
        for name in doomed:
            try:
                self.custom.delete_namespaced_custom_object(name=name, **api)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return doomed


def _probe_key(job: Mapping[str, Any]) -> str | None:
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    key = annotations.get(mpijob.PROBE_KEY_ANNOTATION)
    return str(key) if key is not None else None


def _wait_failure(pod: Any) -> str | None:
    """Why a v0.4 launcher never ran mpirun: its wait for the workers failed (mpijob module doc)."""
    statuses = (pod.status.init_container_statuses if pod.status else None) or []
    for status in statuses:
        ended = status.state.terminated if status.state else None
        if status.name == mpijob.WAIT_FOR_WORKERS and ended and ended.exit_code:
            detail = (ended.message or "").strip() or f"exit code {ended.exit_code}"
            return f"the MPIJob launcher's wait for its workers failed: {detail}"
    return None


def _exit_code(pod: Any) -> int | None:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    for status in statuses:
        if status.state and status.state.terminated:
            return int(status.state.terminated.exit_code)
    return None
