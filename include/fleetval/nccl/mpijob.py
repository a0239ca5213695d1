"""Multi-node NCCL probes as a Kubeflow MPIJob (kubeflow.org/v2beta1), gang-admitted by Kueue
(pure; no cluster access, no Airflow import).

One worker per node of the probe, each pinned to its node with all its GPUs (required node
affinity on the probe's nodes + required pod anti-affinity between the job's workers), running
sshd; the launcher (no GPU) waits for the workers to be ready and runs nccl-tests under
`mpirun` (the operator provides the hostfile and ssh keys): `-np <nodes>`, one process per node
driving all its GPUs (`-g <gpus>`), or in the `rank_per_gpu` layout `slotsPerWorker: <gpus>` and
`-np <nodes × gpus>`, one process per GPU (`-g 1`). Its log is the raw output. Gang admission:
the MPIJob carries the `kueue.x-k8s.io/queue-name` label and is created with
`runPolicy.suspend: true`; Kueue admits (unsuspends) it only when the quota for *every* worker's
GPUs is available, so a partial set of workers never holds GPUs (D-SCHED-06).

**mpi-operator v0.4 and v0.5+.** Both serve `kubeflow.org/v2beta1` MPIJob, so API discovery
cannot tell them apart; their CRDs can (`k8s/crds/kubeflow.org_mpijobs.v0.4.0.yaml` has no
`spec.launcherCreationPolicy`, v0.5.0 added it). The job is built for v0.5+
(`launcherCreationPolicy: WaitForWorkersReady`) and created with `fieldValidation=Strict`: a v0.4
API server refuses it with 400 `strict decoding error: unknown field
"spec.launcherCreationPolicy"` (`rejects_launcher_creation_policy`), and the caller creates the
v0.4 form instead. That answer is the cluster's own CRD speaking, on the call fleetval makes
anyway: no version setting to keep in step with upgrades, and no read of
customresourcedefinitions (cluster-scoped; deploy/rbac.yaml does not grant it). The v0.4 form
leaves the field out, and v0.4 creates the launcher together with the workers
(kubeflow/mpi-operator v0.4.0 `pkg/controller/mpi_job_controller.go` L600: `if launcher == nil`
creates it unconditionally; v0.5.0 L660 waits for `countReadyWorkerPods(worker) == len(worker)`
under WaitForWorkersReady — though not for a job created suspended, as Kueue's are:
kubeflow/mpi-operator#615, and fleetval's are, through Kueue). So in both forms the launcher pod
first runs a `wait-for-workers` init container:
every host of the operator's hostfile must resolve (v0.4's headless Service publishes only ready
workers) and accept a connection on the ssh port, within WORKERS_READY_TIMEOUT_S; past it the
init container fails, the job fails with no launcher exit code, and the probe is a harness error,
never a verdict. An init container rather than a prefix of the launcher's command keeps the
launcher's log the raw nccl-tests output and its exit code mpirun's.

kubernetes-validate has no CRD schema for MPIJob: tests validate the MPIJob against each supported
release's CRD (`fleetval.k8s.validation`) and the embedded pod templates as Pods.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Sequence
from typing import Any, Final

from fleetval.k8s.scheduling import node_name_affinity
from fleetval.nccl.probe import DEFAULT_LAYOUT, NCCL_TESTS_BIN, processes_per_node
from fleetval.nodes import MAINTENANCE_TAINT, ONBOARDING_TAINT
from fleetval.probes.pod import NAMESPACE, PROBE_LABEL, ProbeSpec, probe_label

GROUP: Final = "kubeflow.org"
VERSION: Final = "v2beta1"
PLURAL: Final = "mpijobs"
KIND: Final = "MPIJob"
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
DEFAULT_QUEUE: Final = "fleetval-validation"
# Labels the mpi-operator puts on the pods it creates.
JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL: Final = "training.kubeflow.org/job-role"
PROBE_KEY_ANNOTATION: Final = "fleetval.io/probe-key"
SSH_DIR: Final = "/root/.ssh"
# The mpi-operator releases fleetval builds an MPIJob for (module doc): v0.4, and v0.5 or later.
MPI_OPERATOR_V04: Final = "v0.4"
MPI_OPERATOR_V05: Final = "v0.5"
MPI_OPERATOR_VERSIONS: Final = (MPI_OPERATOR_V04, MPI_OPERATOR_V05)
# How long a v0.4 launcher waits for its workers: a cold node pulls the multi-GB nccl-tests image.
WORKERS_READY_TIMEOUT_S: Final = 600
# The operator's ConfigMap volume with the hostfile, as every release names and mounts it on the
# launcher's first container (v0.4.0 mpi_job_controller.go: configVolumeName, configMountPath).
OPERATOR_CONFIG_VOLUME: Final = "mpi-job-config"
OPERATOR_CONFIG_DIR: Final = "/etc/mpi"
WAIT_FOR_WORKERS: Final = "wait-for-workers"
SSH_PORT: Final = 22
# What a v0.4 API server answers, under fieldValidation=Strict, to the v0.5 field.
_V04_REJECTION: Final = re.compile(r'unknown field "\.?spec\.launcherCreationPolicy"')


def mpijob_name(spec: ProbeSpec, attempt: int | None = None) -> str:
    """A DNS-1123 name, short enough for the operator's `<name>-worker-<i>` pod names; `attempt`
    (a task try) makes each try its own job, so a failed one can be kept beside its retry."""
    digest = hashlib.sha256(spec.probe_key.encode()).hexdigest()[:12]
    name = f"fleetval-{spec.tool}-{digest}"
    return name if attempt is None else f"{name}-t{attempt}"


def probe_nodes(spec: ProbeSpec) -> list[str]:
    nodes = spec.params.get("nodes")
    return [str(n) for n in nodes] if nodes else spec.node.split("+")


def slots_per_worker(spec: ProbeSpec) -> int:
    """MPI processes per worker: one, or one per GPU in the `rank_per_gpu` layout."""
    return processes_per_node(str(spec.params.get("layout") or DEFAULT_LAYOUT), spec.gpus)


def launcher_script(spec: ProbeSpec) -> str:
    """`exec mpirun` over every slot of every worker (`slots_per_worker` per node), running the
    nccl-tests binary by its path in the image; the launcher's exit code is mpirun's (the probe's
    reported exit codes say which ones mean nccl-tests ran and reported)."""
    argv = [str(a) for a in spec.params.get("argv") or ()]
    if not argv:
        raise ValueError(f"probe {spec.probe_key!r} has no params.argv to run under mpirun")
    per_node = slots_per_worker(spec)
    mpirun = [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        str(len(probe_nodes(spec)) * per_node),
        "--map-by",
        f"ppr:{per_node}:node",
        "--bind-to",
        "none",
    ]
    for key in sorted(spec.env):
        mpirun += ["-x", key]
    binary = argv[0] if argv[0].startswith("/") else f"{NCCL_TESTS_BIN}/{argv[0]}"
    return f"exec {shlex.join([*mpirun, binary, *argv[1:]])}"


# bash in the launcher's image; `$host` resolving means v0.4's headless Service publishes the
# worker (it is ready), the TCP connect that its sshd listens.
_WAIT_FOR_WORKERS: Final = """\
deadline=$((SECONDS + {timeout_s}))
for host in $(cut -d' ' -f1 {hostfile}); do
  until getent hosts "$host" >/dev/null &&
      timeout 5 bash -c "exec 3<>/dev/tcp/$host/{port}" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "fleetval: MPIJob worker $host not reachable on port {port} within {timeout_s}s" >&2
      exit 1
    fi
    sleep 2
  done
done
"""


def wait_for_workers_script(timeout_s: int = WORKERS_READY_TIMEOUT_S) -> str:
    """Until every host of the operator's hostfile resolves and accepts a connection on the ssh
    port, or fail after `timeout_s` naming the host."""
    return _WAIT_FOR_WORKERS.format(
        timeout_s=timeout_s, hostfile=f"{OPERATOR_CONFIG_DIR}/hostfile", port=SSH_PORT
    )


def _wait_for_workers_container(spec: ProbeSpec) -> dict[str, Any]:
    return {
        "name": WAIT_FOR_WORKERS,
        "image": spec.image,  # the launcher's image: bash, getent, timeout
        "command": ["/bin/bash", "-c"],
        "args": [wait_for_workers_script()],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        # Its last words become the status message fleetval reports on a timeout.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        # The operator adds this volume to the launcher pod; only containers[0] mounts it.
        "volumeMounts": [
            {"name": OPERATOR_CONFIG_VOLUME, "mountPath": OPERATOR_CONFIG_DIR, "readOnly": True}
        ],
    }


def rejects_launcher_creation_policy(status: int | None, body: Any) -> bool:
    """Whether a failed create is mpi-operator v0.4's CRD refusing `spec.launcherCreationPolicy`
    under fieldValidation=Strict: 400 with the API server's `Status` body (or its message)."""
    if status != 400:
        return False
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        message = json.loads(text).get("message", text)
    except (ValueError, AttributeError):
        message = text
    return bool(_V04_REJECTION.search(str(message)))


def _tolerations() -> list[dict[str, str]]:
    return [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": MAINTENANCE_TAINT, "operator": "Exists"},
        {"key": ONBOARDING_TAINT, "operator": "Exists"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    ]


def mpijob_manifest(
    spec: ProbeSpec,
    *,
    queue_name: str = DEFAULT_QUEUE,
    namespace: str = NAMESPACE,
    admission_timeout_s: int = 3600,
    name: str | None = None,
    worker_devices: Sequence[tuple[str, str]] = (),
    mpi_operator: str = MPI_OPERATOR_V05,
) -> dict[str, Any]:
    """The MPIJob for a multi-node NCCL probe (see module doc), named `name` (default
    `mpijob_name(spec)`). Its `fleetval.io/probe` label finds every job of one probe.
    `worker_devices` are the extended resources each worker requests besides its GPUs: the site's
    RDMA device (`rdma/ib`, `nvidia.com/hostdev`…), without which NCCL falls back to sockets.
    `mpi_operator`: the release the cluster runs (MPI_OPERATOR_VERSIONS, module doc)."""
    if mpi_operator not in MPI_OPERATOR_VERSIONS:
        raise ValueError(f"mpi_operator must be one of {MPI_OPERATOR_VERSIONS}, got {mpi_operator!r}")
    nodes = probe_nodes(spec)
    if len(nodes) < 2:
        raise ValueError(f"an MPIJob probe needs at least two nodes, got {nodes}")
    if spec.gpus < 1:
        raise ValueError("an MPIJob NCCL probe needs GPUs per worker")
    name = name or mpijob_name(spec)
    devices = dict(worker_devices)  # extended resources: the request must equal the limit
    env = [{"name": k, "value": v} for k, v in sorted(spec.env.items())]
    labels = {
        QUEUE_LABEL: queue_name,
        "app.kubernetes.io/part-of": "fleetval",
        "fleetval.io/tool": spec.tool,
        PROBE_LABEL: probe_label(spec.probe_key),
    }
    worker_selector = {JOB_NAME_LABEL: name, JOB_ROLE_LABEL: "worker"}
    worker_pod = {
        "metadata": {"labels": {"app.kubernetes.io/part-of": "fleetval", "fleetval.io/tool": spec.tool}},
        "spec": {
            "serviceAccountName": "fleetval-probe",
            "automountServiceAccountToken": False,
            "tolerations": _tolerations(),
            "affinity": {
                # By the Node object's name (the hostname label need not be it), one term per node.
                "nodeAffinity": node_name_affinity(*nodes)["nodeAffinity"],
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": worker_selector},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                },
            },
            "containers": [
                {
                    "name": "worker",
                    "image": spec.image,
                    "command": ["/usr/sbin/sshd"],
                    "args": ["-De"],
                    "env": env,
                    "resources": {
                        "limits": {"nvidia.com/gpu": str(spec.gpus), **devices},
                        "requests": {
                            "nvidia.com/gpu": str(spec.gpus),
                            **devices,
                            "cpu": "4",
                            "memory": "16Gi",
                        },
                    },
                    # RDMA needs locked memory; NCCL's shared-memory transport needs a real /dev/shm.
                    "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                }
            ],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        },
    }
    launcher_pod = {
        "metadata": {"labels": {"app.kubernetes.io/part-of": "fleetval", "fleetval.io/tool": spec.tool}},
        "spec": {
            "serviceAccountName": "fleetval-probe",
            "restartPolicy": "Never",
            "tolerations": _tolerations(),
            # Both releases: v0.4 starts the launcher at once, v0.5+ too for a job created suspended.
            "initContainers": [_wait_for_workers_container(spec)],
            "containers": [
                {
                    "name": "launcher",
                    "image": spec.image,
                    "command": ["/bin/bash", "-c"],
                    "args": [launcher_script(spec)],
                    "env": env,
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {PROBE_KEY_ANNOTATION: spec.probe_key},
        },
        "spec": {
            "slotsPerWorker": slots_per_worker(spec),
            "mpiImplementation": "OpenMPI",
            # v0.4 has no such field: its launcher waits in its init container instead.
            **({"launcherCreationPolicy": "WaitForWorkersReady"} if mpi_operator == MPI_OPERATOR_V05 else {}),
            "sshAuthMountPath": SSH_DIR,
            "runPolicy": {
                "suspend": True,  # Kueue admits the whole gang by unsuspending it
                "backoffLimit": 0,
                "cleanPodPolicy": "Running",
                "activeDeadlineSeconds": spec.timeout_s + admission_timeout_s,
                "ttlSecondsAfterFinished": 3600,
            },
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher_pod},
                "Worker": {"replicas": len(nodes), "restartPolicy": "Never", "template": worker_pod},
            },
        },
    }


def job_state(mpijob: dict[str, Any]) -> str:
    """`Succeeded`, `Failed`, `Suspended` (waiting for Kueue) or `Running`/`Pending`, from the
    MPIJob's status conditions (the last true terminal condition wins)."""
    conditions = (mpijob.get("status") or {}).get("conditions") or []
    true = {c.get("type") for c in conditions if str(c.get("status")) == "True"}
    for state in ("Succeeded", "Failed", "Running", "Suspended"):
        if state in true:
            return state
    return "Pending"
