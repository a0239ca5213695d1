"""The Kubeflow mpi-operator's v2beta1 MPIJob controller, in the simulated cluster.

Facts from kubeflow/mpi-operator v0.8.2 (`pkg/controller/mpi_job_controller.go`,
`mpi_job_controller_status.go`, `pkg/apis/kubeflow/v2beta1/default.go`, `.../validation`):

- Defaults: `cleanPodPolicy: None`, `slotsPerWorker: 1`, `sshAuthMountPath: /root/.ssh`,
  `mpiImplementation: OpenMPI`, `launcherCreationPolicy: AtStartup`; the Launcher replica spec
  restarts `OnFailure`, the Worker one `Never`. A job that fails the operator's validation gets
  a `ValidationError` event and nothing else.
- Per job: a ConfigMap `<job>-config` (hostfile, `discover_hosts.sh` of the running workers)
  and a `kubernetes.io/ssh-auth` Secret `<job>-ssh` (the simulator's keys are placeholders),
  both owned by the job; the headless Service `<job>` is not created (the simulator serves no
  Services). Worker pods `<job>-worker-<i>` from the Worker template, labelled
  `training.kubeflow.org/{operator-name,job-name,job-role=worker,replica-index}`, hostname and
  subdomain set, the ssh Secret mounted at `sshAuthMountPath`, `sshd -De` when the template has
  no command. The launcher is a batch/v1 Job `<job>-launcher` (its pod: `<job>-launcher-<5
  chars>`, `job-role=launcher`, OpenMPI's `OMPI_MCA_*` env, GPUs hidden), created at once or,
  with `WaitForWorkersReady`, once every worker is Ready; it carries `backoffLimit`,
  `activeDeadlineSeconds` and `ttlSecondsAfterFinished` from `runPolicy`.
- A job created suspended gets its launcher Job created suspended at once, and on resume the
  launcher is unsuspended in the sync that creates the workers — whatever the creation policy
  (upstream issue kubeflow/mpi-operator#615); mpirun's ssh retries cover the workers' start. The
  simulated kubelet starts workers before a launcher in the same tick, so the launcher's mpirun
  sees every worker that could be placed.
- Status: conditions `Created`, `Suspended`/resumed, `Running` (launcher pod and every worker
  running), `Succeeded` / `Failed` from the launcher Job (reason `BackoffLimitExceeded/<pod
  reason>` and the pod message appended, as upstream), `replicaStatuses` (`active`, `succeeded`,
  `failed`, zeros left out), `startTime`, `completionTime`. Once finished, `cleanPodPolicy`
  Running deletes the running and pending workers, All every worker, None none. Suspending
  deletes the workers.

Two releases, as the fleet spec's `mpi_operator` says (`release`): `v0.5` (the default) plays
v0.8.2 as above, its API server serving `crds/kubeflow.org_mpijobs.yaml`; `v0.4` plays v0.4.0
(`served_crd`: `crds/kubeflow.org_mpijobs.v0.4.0.yaml`, which has no `launcherCreationPolicy`,
so a Strict create carrying it is refused as on such a cluster). v0.4.0's controller
(`pkg/controller/mpi_job_controller.go`) differs where fleetval can see it: the launcher Job is
created in the sync that creates the workers, whatever their state (L600, `if launcher == nil`);
no `launcherCreationPolicy` default; the workers' Service is `<job>-worker` (`workerSuffix`), so
pods' subdomain and the hostfile's names are `<job>-worker-<i>.<job>-worker.<ns>.svc` (L1203,
L1332), and workers get no DNS search entry.

Simulator limit: a job asking for more than MAX_WORKERS workers gets a warning event and no pods.
"""

from __future__ import annotations

import base64
import copy
import hashlib
from typing import TYPE_CHECKING, Any, Final

from fleetval.fleet.spec import FleetSpec
from fleetval.k8s.validation import (
    ApiError,
    Crd,
    FieldError,
    aggregate,
    dns1035_label,
    invalid,
    load_crd_release,
    load_crds,
    not_supported,
    required,
)
from fleetval.sim.kube.jobs import finished as job_finished
from fleetval.sim.kube.meta import (
    condition,
    condition_true,
    controlled_by,
    controller_ref,
    owned,
    phase,
    pod_ready,
    rfc3339,
    truncate_event,
)
from fleetval.sim.kube.resources import Resource, by_kind

if TYPE_CHECKING:
    from fleetval.sim.kube.cluster import SimKubeCluster

OPERATOR_NAME: Final = "mpi-operator"
OPERATOR_NAME_LABEL: Final = "training.kubeflow.org/operator-name"
JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL: Final = "training.kubeflow.org/job-role"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
LAUNCHER: Final = "launcher"
WORKER: Final = "worker"
MANAGED_BY: Final = ("kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue")
CLEAN_POD_POLICIES: Final = ("All", "None", "Running")
MPI_IMPLEMENTATIONS: Final = ("Intel", "MPICH", "OpenMPI")
RESTART_POLICIES: Final = ("Never", "OnFailure")
CONFIG_MOUNT_PATH: Final = "/etc/mpi"
MAX_WORKERS: Final = 1024
COMPONENT: Final = "mpi-job-controller"
_CONFIG_VOLUME: Final = "mpi-job-config"
_SSH_VOLUME: Final = "ssh-auth"
V04: Final = "v0.4"
V05: Final = "v0.5"  # v0.5 and later, played as v0.8.2
# The upstream CRD release a v0.4 cluster serves (k8s/crds/kubeflow.org_mpijobs.v0.4.0.yaml).
V04_CRD_TAG: Final = "v0.4.0"


class _Stop(Exception):
    """This sync cannot go on (upstream returns the error and requeues the job)."""


def _mpijob() -> Resource:
    return by_kind("MPIJob")


def release(fleet: FleetSpec) -> str:
    """The mpi-operator release the simulated cluster runs: the fleet spec's `mpi_operator`."""
    return str(fleet.raw.get("mpi_operator") or V05)


def served_crd(fleet: FleetSpec) -> Crd:
    """The MPIJob CRD the simulated API server validates against: that of the cluster's release."""
    if release(fleet) == V04:
        return load_crd_release("kubeflow.org", "mpijobs", V04_CRD_TAG)
    return load_crds()[("kubeflow.org", "mpijobs")]


def launcher_due(version: str, policy: str | None, workers_ready: bool) -> bool:
    """Whether a sync creates the missing launcher Job: v0.4 always does; v0.5+ under
    WaitForWorkersReady only once every worker it got (none while suspended, #615) is ready."""
    return version == V04 or policy == "AtStartup" or workers_ready


def _service(job_name: str, version: str) -> str:
    """The workers' headless Service, the pods' subdomain: `<job>` (v0.5+), `<job>-worker` (v0.4)."""
    return f"{job_name}-worker" if version == V04 else job_name


def reconcile_mpijobs(cluster: SimKubeCluster) -> None:
    version = release(cluster.spec)
    for job in cluster.stored(_mpijob()):
        if job["metadata"].get("deletionTimestamp"):
            continue
        try:
            _sync(cluster, job, version)
        except _Stop:
            continue
        except ApiError as exc:  # an object of the job refused: upstream reports it and requeues
            cluster.emit(job, "Warning", "MPIJobFailed", truncate_event(str(exc)), COMPONENT, once=True)


def _defaulted(spec: dict[str, Any], version: str) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    run_policy = spec.setdefault("runPolicy", {})
    run_policy.setdefault("cleanPodPolicy", "None")
    spec.setdefault("slotsPerWorker", 1)
    spec.setdefault("sshAuthMountPath", "/root/.ssh")
    spec.setdefault("mpiImplementation", "OpenMPI")
    if version != V04:
        spec.setdefault("launcherCreationPolicy", "AtStartup")
    replicas = spec.get("mpiReplicaSpecs") or {}
    for role, restart, count in (("Launcher", "OnFailure", 1), ("Worker", "Never", 0)):
        if isinstance(replicas.get(role), dict):
            replicas[role].setdefault("restartPolicy", restart)
            replicas[role].setdefault("replicas", count)
    return spec


def _validation_errors(name: str, spec: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    replicas = spec.get("mpiReplicaSpecs")
    workers = (replicas or {}).get("Worker")
    count = int(workers.get("replicas") or 0) if isinstance(workers, dict) else 0
    hostname = f"{name}-worker-{max(count, 1) - 1}"
    problems = dns1035_label(hostname)
    if problems:
        detail = f"will not able to create pod and service with invalid DNS label {hostname!r}: "
        errors.append(invalid("metadata.name", name, detail + ", ".join(problems)))
    if not replicas:
        errors.append(required("spec.mpiReplicaSpecs", "must have replica specs"))
    else:
        for role in ("Launcher", "Worker"):
            path = f"spec.mpiReplicaSpecs[{role}]"
            replica = replicas.get(role)
            if not isinstance(replica, dict):
                if role == "Launcher":
                    errors.append(required(path, "must have Launcher replica spec"))
                continue
            if replica.get("restartPolicy") not in RESTART_POLICIES:
                errors.append(
                    not_supported(f"{path}.restartPolicy", replica.get("restartPolicy"), RESTART_POLICIES)
                )
            if not ((replica.get("template") or {}).get("spec") or {}).get("containers"):
                errors.append(
                    required(f"{path}.template.spec.containers", "must define at least one container")
                )
            if role == "Launcher" and replica.get("replicas") != 1:
                errors.append(invalid(f"{path}.replicas", replica.get("replicas"), "must be 1"))
            if role == "Worker" and int(replica.get("replicas") or 0) <= 0:
                errors.append(
                    invalid(f"{path}.replicas", replica.get("replicas"), "must be greater than or equal to 1")
                )
    if int(spec.get("slotsPerWorker") or 0) < 0:
        errors.append(
            invalid("spec.slotsPerWorker", spec["slotsPerWorker"], "must be greater than or equal to 0")
        )
    run_policy = spec["runPolicy"]
    if run_policy.get("cleanPodPolicy") not in CLEAN_POD_POLICIES:
        policy = run_policy.get("cleanPodPolicy")
        errors.append(not_supported("spec.runPolicy.cleanPodPolicy", policy, CLEAN_POD_POLICIES))
    for field in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        value = run_policy.get(field)
        if value is not None and int(value) < 0:
            errors.append(invalid(f"spec.runPolicy.{field}", value, "must be greater than or equal to 0"))
    managed_by = run_policy.get("managedBy")
    if managed_by is not None and managed_by not in MANAGED_BY:
        errors.append(not_supported("spec.runPolicy.managedBy", managed_by, MANAGED_BY))
    if not spec.get("sshAuthMountPath"):
        errors.append(required("spec.sshAuthMountPath", "must have a mount path for SSH credentials"))
    if spec.get("mpiImplementation") not in MPI_IMPLEMENTATIONS:
        errors.append(
            not_supported("spec.mpiImplementation", spec.get("mpiImplementation"), MPI_IMPLEMENTATIONS)
        )
    return errors


def _set(status: dict[str, Any], kind: str, value: str, reason: str, message: str, now: float) -> bool:
    """updateMPIJobConditions: True when the condition changed. A terminal condition turns Running
    (and an earlier Failed) to False; Running and Restarting replace each other."""
    current = condition(status, kind)
    if current is not None and (current.get("status"), current.get("reason")) == (value, reason):
        return False
    stamp = rfc3339(now)
    new = {
        "type": kind,
        "status": value,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }
    if current is not None and current.get("status") == value:
        new["lastTransitionTime"] = current.get("lastTransitionTime", stamp)
    kept = []
    for c in status.get("conditions") or []:
        other = c.get("type")
        if other == kind or {kind, other} == {"Running", "Restarting"}:
            continue
        if kind in ("Failed", "Succeeded") and other in ("Running", "Failed"):
            c = {**c, "status": "False"}
        kept.append(c)
    status["conditions"] = [*kept, new]
    return True


def _finished(status: dict[str, Any]) -> bool:
    return condition_true(status, "Succeeded") or condition_true(status, "Failed")


def _counts(active: int = 0, succeeded: int = 0, failed: int = 0) -> dict[str, int]:
    """A ReplicaStatus as Go serialises it: zero counts are omitted."""
    counts = {"active": active, "succeeded": succeeded, "failed": failed}
    return {k: v for k, v in counts.items() if v}


def _sync(cluster: SimKubeCluster, job: dict[str, Any], version: str) -> None:
    meta = job["metadata"]
    ns, name = meta["namespace"], meta["name"]
    now = cluster.clock()
    spec = _defaulted(job.get("spec") or {}, version)
    run_policy = spec["runPolicy"]
    if run_policy.get("managedBy") not in (None, MANAGED_BY[0]):
        return
    errors = _validation_errors(name, spec)
    if errors:
        message = truncate_event(f"Found validation errors: {aggregate(errors)}")
        cluster.emit(job, "Warning", "ValidationError", message, COMPONENT, once=True)
        return
    new = copy.deepcopy(job)
    status = new.setdefault("status", {})
    if not status.get("conditions"):
        message = f"MPIJob {ns}/{name} is created."
        _set(status, "Created", "True", "MPIJobCreated", message, now)
        cluster.emit(job, "Normal", "MPIJobCreated", message, COMPONENT)
    suspended = bool(run_policy.get("suspend"))
    if _finished(status) and status.get("completionTime"):
        if run_policy["cleanPodPolicy"] in ("All", "Running"):
            _clean_up_workers(cluster, job, spec, status)
        cluster.write(_mpijob(), new)
        return
    if not suspended and "startTime" not in status:
        status["startTime"] = rfc3339(now)
    job_res = by_kind("Job")
    launcher = cluster.lookup(job_res, ns, f"{name}-launcher")
    workers: list[dict[str, Any]] = []
    if launcher is None or not job_finished(launcher):
        _config_map(cluster, job, spec, version)
        _ssh_secret(cluster, job)
        if not suspended:
            workers = _workers(cluster, job, spec, version)
        policy = spec.get("launcherCreationPolicy")
        if launcher is None and launcher_due(version, policy, all(pod_ready(w) for w in workers)):
            try:
                launcher = cluster.insert(job_res, ns, _launcher_job(cluster, job, spec, version))
            except ApiError as exc:
                message = truncate_event(f"launcher pod created failed: {exc}")
                cluster.emit(job, "Warning", "MPIJobFailed", message, COMPONENT, once=True)
                raise _Stop from None
    if launcher is not None and bool((launcher.get("spec") or {}).get("suspend")) != suspended:
        changed = copy.deepcopy(launcher)
        changed["spec"]["suspend"] = suspended
        if not suspended:  # resuming: the template takes Kueue's scheduling directives (KEP-2926)
            desired = _launcher_template(cluster, job, spec, version)
            template = changed["spec"]["template"]
            template.setdefault("metadata", {}).setdefault("labels", {}).update(desired["metadata"]["labels"])
            for key in ("nodeSelector", "tolerations", "schedulingGates"):
                if key in desired["spec"]:
                    template["spec"][key] = desired["spec"][key]
                else:
                    template["spec"].pop(key, None)
        launcher = cluster.write(job_res, changed)
    if suspended:
        _clean_up_workers(cluster, job, spec, status)
    _update_status(cluster, job, new, launcher, workers, suspended, now)
    cluster.write(_mpijob(), new)


def _worker_name(job_name: str, index: int) -> str:
    return f"{job_name}-worker-{index}"


def _worker_count(spec: dict[str, Any]) -> int:
    worker = (spec.get("mpiReplicaSpecs") or {}).get("Worker")
    return int(worker.get("replicas") or 0) if isinstance(worker, dict) else 0


def _owned_or_stop(cluster: SimKubeCluster, job: dict[str, Any], obj: dict[str, Any]) -> None:
    """An object of the job's name that the job does not control stops the sync (ErrResourceExists)."""
    if not controlled_by(obj, job):
        what = f'Resource "{obj["metadata"]["name"]}" of Kind "{obj["kind"]}"'
        message = f"{what} already exists and is not managed by MPIJob"
        cluster.emit(job, "Warning", "ErrResourceExists", message, COMPONENT, once=True)
        raise _Stop


def _workers(
    cluster: SimKubeCluster, job: dict[str, Any], spec: dict[str, Any], version: str
) -> list[dict[str, Any]]:
    """getOrCreateWorker: scale down past `replicas`, then get or create each worker."""
    pod_res = by_kind("Pod")
    meta = job["metadata"]
    ns, name = meta["namespace"], meta["name"]
    count = _worker_count(spec)
    if count > MAX_WORKERS:
        message = f"fleetval-sim: {count} workers is more than the simulator creates ({MAX_WORKERS})"
        cluster.emit(job, "Warning", "MPIJobFailed", message, COMPONENT, once=True)
        raise _Stop
    for extra in cluster.stored(pod_res, ns):
        labels = extra["metadata"].get("labels") or {}
        if labels.get(JOB_NAME_LABEL) == name and labels.get(JOB_ROLE_LABEL) == WORKER:
            index = labels.get(REPLICA_INDEX_LABEL, "")
            if index.isdigit() and int(index) >= count:
                cluster.erase(pod_res, extra)
    workers = []
    for i in range(count):
        found = cluster.lookup(pod_res, ns, _worker_name(name, i))
        if found is not None:
            pod = found
        else:
            try:
                pod = cluster.insert(pod_res, ns, _new_worker(job, spec, i, version))
            except ApiError as exc:
                message = truncate_event(f"worker pod created failed: {exc}")
                cluster.emit(job, "Warning", "MPIJobFailed", message, COMPONENT, once=True)
                raise _Stop from None
        _owned_or_stop(cluster, job, pod)
        workers.append(pod)
    return workers


def _clean_up_workers(
    cluster: SimKubeCluster, job: dict[str, Any], spec: dict[str, Any], status: dict[str, Any]
) -> None:
    """cleanUpWorkerPods: under cleanPodPolicy Running, finished workers stay."""
    pod_res = by_kind("Pod")
    meta = job["metadata"]
    for i in range(min(_worker_count(spec), MAX_WORKERS)):
        pod = cluster.lookup(pod_res, meta["namespace"], _worker_name(meta["name"], i))
        if pod is None:
            continue
        _owned_or_stop(cluster, job, pod)
        if spec["runPolicy"]["cleanPodPolicy"] == "Running" and phase(pod) not in ("Running", "Pending"):
            continue
        cluster.erase(pod_res, pod)
    status.setdefault("replicaStatuses", {})["Worker"] = {}


def _ssh_volume(spec: dict[str, Any], pod_spec: dict[str, Any], job_name: str) -> None:
    """setupSSHOnPod: the job's ssh Secret on the first container at sshAuthMountPath."""
    secret: dict[str, Any] = {
        "secretName": f"{job_name}-ssh",
        "items": [
            {"key": "ssh-privatekey", "path": "id_rsa"},
            {"key": "ssh-publickey", "path": "id_rsa.pub"},
            {"key": "ssh-publickey", "path": "authorized_keys"},
        ],
    }
    if spec["sshAuthMountPath"] == "/root/.ssh":
        secret["defaultMode"] = 0o600
    pod_spec.setdefault("volumes", []).append({"name": _SSH_VOLUME, "secret": secret})
    container = pod_spec["containers"][0]
    container.setdefault("volumeMounts", []).append(
        {"name": _SSH_VOLUME, "mountPath": spec["sshAuthMountPath"]}
    )


def _pod_basics(
    job: dict[str, Any], spec: dict[str, Any], role: str, hostname: str, version: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The replica's template with the operator's labels, hostname, subdomain and restart policy."""
    name = job["metadata"]["name"]
    replica = spec["mpiReplicaSpecs"]["Launcher" if role == LAUNCHER else "Worker"]
    template = copy.deepcopy(replica.get("template") or {})
    template_meta = template.setdefault("metadata", {})
    labels = template_meta.setdefault("labels", {})
    labels.update({OPERATOR_NAME_LABEL: OPERATOR_NAME, JOB_NAME_LABEL: name, JOB_ROLE_LABEL: role})
    pod_spec = template.setdefault("spec", {})
    pod_spec["hostname"] = hostname
    pod_spec["subdomain"] = _service(name, version)  # the workers' (headless) Service
    if pod_spec.get("hostNetwork"):
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    pod_spec["restartPolicy"] = replica["restartPolicy"]
    return template_meta, pod_spec


def _new_worker(job: dict[str, Any], spec: dict[str, Any], index: int, version: str) -> dict[str, Any]:
    meta = job["metadata"]
    name = _worker_name(meta["name"], index)
    template_meta, pod_spec = _pod_basics(job, spec, WORKER, name, version)
    template_meta["labels"][REPLICA_INDEX_LABEL] = str(index)
    if version != V04:  # v0.4's workers get no search entry
        search = f"{meta['name']}.{meta['namespace']}.svc.cluster.local"
        pod_spec.setdefault("dnsConfig", {}).setdefault("searches", []).append(search)
    container = pod_spec["containers"][0]
    if not container.get("command") and not container.get("args"):
        container["command"] = ["/usr/sbin/sshd", "-De"]
    container.setdefault("env", []).append({"name": "K_MPI_JOB_ROLE", "value": WORKER})
    _ssh_volume(spec, pod_spec, meta["name"])
    pod_meta: dict[str, Any] = {
        "name": name,
        "namespace": meta["namespace"],
        "labels": template_meta["labels"],
        "ownerReferences": [controller_ref(job)],
    }
    if template_meta.get("annotations"):
        pod_meta["annotations"] = template_meta["annotations"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}


def _launcher_template(
    cluster: SimKubeCluster, job: dict[str, Any], spec: dict[str, Any], version: str
) -> dict[str, Any]:
    name = job["metadata"]["name"]
    replica = spec["mpiReplicaSpecs"]["Launcher"]
    if ((replica.get("template") or {}).get("spec") or {}).get("restartPolicy"):
        message = "Restart policy in pod template overridden by restart policy in replica spec"
        cluster.emit(job, "Warning", "SetPodTemplateRestartPolicy", message, COMPONENT, once=True)
    template_meta, pod_spec = _pod_basics(job, spec, LAUNCHER, f"{name}-launcher", version)
    if spec.get("runLauncherAsWorker"):
        template_meta["labels"][REPLICA_INDEX_LABEL] = "0"
    container = pod_spec["containers"][0]
    env = container.setdefault("env", [])
    env.append({"name": "K_MPI_JOB_ROLE", "value": LAUNCHER})
    hostfile = f"{CONFIG_MOUNT_PATH}/hostfile"
    slots = str(spec["slotsPerWorker"])
    implementation_env = {
        "OpenMPI": [
            ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
            ("OMPI_MCA_orte_default_hostfile", hostfile),
            ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
            ("OMPI_MCA_orte_set_default_slots", slots),
        ],
        "Intel": [
            ("I_MPI_HYDRA_HOST_FILE", hostfile),
            ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-o ConnectionAttempts=10"),
            ("I_MPI_PERHOST", slots),
        ],
        "MPICH": [("HYDRA_HOST_FILE", hostfile), ("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10")],
    }
    env.extend({"name": k, "value": v} for k, v in implementation_env[spec["mpiImplementation"]])
    if not spec.get("runLauncherAsWorker"):
        # The operator hides the GPUs from the launcher (an empty value, left out as Go does).
        env.extend([{"name": "NVIDIA_VISIBLE_DEVICES"}, {"name": "NVIDIA_DRIVER_CAPABILITIES"}])
    _ssh_volume(spec, pod_spec, name)
    pod_spec["volumes"].append(
        {
            "name": _CONFIG_VOLUME,
            "configMap": {
                "name": f"{name}-config",
                "items": [
                    {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                    {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
                ],
            },
        }
    )
    container["volumeMounts"].append({"name": _CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_PATH})
    return {"metadata": template_meta, "spec": pod_spec}


def _launcher_job(
    cluster: SimKubeCluster, job: dict[str, Any], spec: dict[str, Any], version: str
) -> dict[str, Any]:
    meta = job["metadata"]
    run_policy = spec["runPolicy"]
    job_spec: dict[str, Any] = {
        "template": _launcher_template(cluster, job, spec, version),
        # Never recreate a pod while the old one terminates (kubernetes/kubernetes#115844).
        "podReplacementPolicy": "Failed",
    }
    for field in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        if run_policy.get(field) is not None:
            job_spec[field] = run_policy[field]
    if run_policy.get("suspend"):
        job_spec["suspend"] = True
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{meta['name']}-launcher",
            "namespace": meta["namespace"],
            "labels": {"app": meta["name"]},
            "ownerReferences": [controller_ref(job)],
        },
        "spec": job_spec,
    }


def _config_map(cluster: SimKubeCluster, job: dict[str, Any], spec: dict[str, Any], version: str) -> None:
    """getOrCreateConfigMap: the hostfile (every worker) and discover_hosts.sh (running ones)."""
    res = by_kind("ConfigMap")
    meta = job["metadata"]
    ns, name = meta["namespace"], meta["name"]
    service = _service(name, version)
    slots = spec["slotsPerWorker"]
    hosts = [
        f"{_worker_name(name, i)}.{service}.{ns}.svc" for i in range(min(_worker_count(spec), MAX_WORKERS))
    ]
    if spec.get("runLauncherAsWorker"):
        hosts.insert(0, f"{name}-launcher.{service}.{ns}.svc")
    openmpi = spec["mpiImplementation"] == "OpenMPI"
    hostfile = "".join(f"{h} slots={slots}\n" if openmpi else f"{h}:{slots}\n" for h in hosts)
    running = sorted(
        p["metadata"]["name"]
        for p in cluster.stored(by_kind("Pod"), ns)
        if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == name
        and (p["metadata"].get("labels") or {}).get(JOB_ROLE_LABEL) == WORKER
        and phase(p) == "Running"
    )
    discover = "#!/bin/sh\n" + "".join(f"echo {p}.{service}.{ns}.svc\n" for p in running)
    data = {"hostfile": hostfile, "discover_hosts.sh": discover}
    current = cluster.lookup(res, ns, f"{name}-config")
    if current is None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"{name}-config",
                "namespace": ns,
                "labels": {"app": name},
                "ownerReferences": [controller_ref(job)],
            },
            "data": data,
        }
        cluster.insert(res, ns, body)
        return
    _owned_or_stop(cluster, job, current)
    if current.get("data") != data:
        cluster.write(res, {**copy.deepcopy(current), "data": data})


def _ssh_secret(cluster: SimKubeCluster, job: dict[str, Any]) -> None:
    """getOrCreateSSHAuthSecret. Upstream generates an ECDSA P-521 key pair; these bytes only look
    like one (deterministic per job, so a restarted simulator writes the same)."""
    res = by_kind("Secret")
    meta = job["metadata"]
    ns, name = meta["namespace"], meta["name"]
    current = cluster.lookup(res, ns, f"{name}-ssh")
    if current is not None:
        _owned_or_stop(cluster, job, current)
        return
    digest = hashlib.sha512(f"fleetval-sim-ssh/{meta['uid']}".encode()).digest()
    key = base64.b64encode(digest * 3).decode()
    private = "-----BEGIN EC PRIVATE KEY-----\n" + key + "\n-----END EC PRIVATE KEY-----\n"
    public = f"ecdsa-sha2-nistp521 {base64.b64encode(digest * 2).decode()}\n"
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/ssh-auth",
        "metadata": {
            "name": f"{name}-ssh",
            "namespace": ns,
            "labels": {"app": name},
            "ownerReferences": [controller_ref(job)],
        },
        "data": {
            "ssh-privatekey": base64.b64encode(private.encode()).decode(),
            "ssh-publickey": base64.b64encode(public.encode()).decode(),
        },
    }
    cluster.insert(res, ns, body)


def _update_status(
    cluster: SimKubeCluster,
    job: dict[str, Any],
    new: dict[str, Any],
    launcher: dict[str, Any] | None,
    workers: list[dict[str, Any]],
    suspended: bool,
    now: float,
) -> None:
    """updateMPIJobStatus."""
    meta = job["metadata"]
    ns, name = meta["namespace"], meta["name"]
    status = new["status"]
    replica_statuses = status.setdefault("replicaStatuses", {})
    if suspended:
        if _set(status, "Suspended", "True", "MPIJobSuspended", "MPIJob suspended", now):
            cluster.emit(job, "Normal", "MPIJobSuspended", "MPIJob suspended", COMPONENT)
    elif condition(status, "Suspended") is not None and _set(
        status, "Suspended", "False", "MPIJobResumed", "MPIJob resumed", now
    ):
        cluster.emit(job, "Normal", "MPIJobResumed", "MPIJob resumed", COMPONENT)
        status["startTime"] = rfc3339(now)
    launcher_running = 0
    if launcher is not None:
        launcher_pods = owned(cluster.stored(by_kind("Pod"), ns), launcher)
        launcher_running = sum(phase(p) == "Running" for p in launcher_pods)
        launcher_status = launcher.get("status") or {}
        counts = {"failed": int(launcher_status.get("failed") or 0)}
        if condition_true(launcher_status, "Complete"):
            counts["succeeded"] = 1
            message = f"MPIJob {ns}/{name} successfully completed."
            status.setdefault("completionTime", launcher_status.get("completionTime") or rfc3339(now))
            if _set(status, "Succeeded", "True", "MPIJobSucceeded", message, now):
                cluster.emit(job, "Normal", "MPIJobSucceeded", message, COMPONENT)
        elif condition_true(launcher_status, "Failed"):
            failed = condition(launcher_status, "Failed") or {}
            reason = str(failed.get("reason") or "MPIJobFailed")
            message = str(failed.get("message") or f"MPIJob {ns}/{name} has failed")
            if reason == "BackoffLimitExceeded":
                failed_pods = [p for p in launcher_pods if phase(p) == "Failed"]
                if failed_pods:
                    last = max(failed_pods, key=lambda p: str(p["metadata"].get("creationTimestamp", "")))
                    reason += "/" + str(last["status"].get("reason") or "")
                    message = truncate_event(message + ": " + str(last["status"].get("message") or ""))
            status.setdefault("completionTime", rfc3339(now))
            if _set(status, "Failed", "True", reason, message, now):
                cluster.emit(job, "Warning", reason, message, COMPONENT)
        else:
            counts["active"] = launcher_running
        replica_statuses["Launcher"] = _counts(**counts)
    running = sum(phase(w) == "Running" for w in workers)
    replica_statuses["Worker"] = _counts(
        active=running,
        succeeded=sum(phase(w) == "Succeeded" for w in workers),
        failed=sum(phase(w) == "Failed" for w in workers),
    )
    if suspended:
        _set(status, "Running", "False", "MPIJobSuspended", f"MPIJob {ns}/{name} is suspended.", now)
    elif _finished(status):
        if condition(status, "Running") is None:
            stamp = status.get("completionTime") or rfc3339(now)
            message = f"MPIJob {ns}/{name} is finished but Running condition was never set."
            never = {
                "type": "Running",
                "status": "False",
                "reason": "MPIJobRunning",
                "message": message,
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            }
            status["conditions"] = [*status.get("conditions", []), never]
    elif launcher is not None and launcher_running >= 1 and running == len(workers):
        message = f"MPIJob {ns}/{name} is running."
        if _set(status, "Running", "True", "MPIJobRunning", message, now):
            cluster.emit(job, "Normal", "MPIJobRunning", f"MPIJob {ns}/{name} is running", COMPONENT)
