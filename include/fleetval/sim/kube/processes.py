"""Containers that really run: the checkpoint drill image's and the Kueue scenario jobs' pods
are local processes.

Every other image's container is modelled (`fleetval.sim.images` prints what the tool would
print). The drill image's job is small enough to run, and what the drill judges — a checkpoint
written to storage, a kill inside a write, a save on SIGTERM — is only real if a process does
it. So the simulated kubelet starts the image's command as a process (the reference job forks
from `fleetval.ckpt.local`'s zygote, which loaded PyTorch once). The Kueue scenario job image
(`fleetval.kueue.job.JOB_IMAGE`, Kubernetes' e2e busybox) runs its `sh -c` script with this
machine's /bin/sh: what the scenarios judge — a job that exits 0 when told to finish, a victim
that traps SIGTERM and takes its time — is a shell's signal handling, which a model would only
assert. Both get:

- the container's environment, and its volumes as directories: a PersistentVolumeClaim is
  `<volume root>/<namespace>/<claim>` (the same directory for every pod that mounts the claim,
  as one volume would be), an emptyDir is per pod, a downwardAPI volume is per pod and its files
  are rewritten from the pod as it is now whenever the kubelet looks at it (a real kubelet
  remounts it on each pod update: annotations reach the files within a sync);
- paths under a volume's mountPath in env values and args rewritten to that directory (the one
  liberty: a local process has no mount namespace);
- the fleet spec's job faults (`ckpt.non_atomic`, …) as the reference job's flags, so a faulty
  "cluster" runs a job that misbehaves for real;
- signals as the kubelet sends them (`SimKubeCluster.delete`): SIGTERM, then SIGKILL when the grace
  period ends; deletion with a grace period of 0 kills at once.

Image facts (jobs/ckpt-reference/Dockerfile): ENTRYPOINT ["fleetval-ckpt-train"]; the scripts
fleetval-ckpt-train, fleetval-ckpt-inspect and fleetval-ckpt-corrupt are on PATH. A command
that is not one of them fails as runc fails an executable not found (exit 128, StartError).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from fleetval.ckpt import contract
from fleetval.ckpt.local import CommandProcess, LaunchError, Process, job_available, start_entry
from fleetval.kueue.job import JOB_IMAGE
from fleetval.sim.images import normalize_image

SHELL_IMAGES: Final = frozenset({normalize_image(JOB_IMAGE)})
PROCESS_IMAGES: Final = frozenset({normalize_image(contract.DRILL_IMAGE)}) | SHELL_IMAGES
SHELLS: Final = frozenset({"sh", "/bin/sh", "ash", "/bin/ash"})  # busybox's sh is ash
ENTRYPOINT: Final = contract.TRAIN_COMMAND
ENTRIES: Final = {
    contract.TRAIN_COMMAND[0]: contract.TRAIN_ENTRY,
    contract.INSPECT_COMMAND[0]: contract.INSPECT_ENTRY,
    contract.CORRUPT_COMMAND[0]: contract.CORRUPT_ENTRY,
}
IMAGE_PATH: Final = "/usr/local/bin"


def runs_as_process(image: str) -> bool:
    return normalize_image(image) in PROCESS_IMAGES


@dataclass(frozen=True, slots=True)
class StartFailure:
    """The container could not start: the runtime's message and exit code."""

    message: str
    exit_code: int = 128


def _pod_dir(root: Path, pod: Mapping[str, Any], instance: str) -> Path:
    """A pod's own volumes (emptyDir, downwardAPI), per kubelet instance: simulated clusters give
    the same uids, and two in one process must not share a pod's files."""
    meta = pod["metadata"]
    return root / str(meta["namespace"]) / ".pods" / instance / str(meta["uid"])


def volume_dirs(
    pod: Mapping[str, Any], container: Mapping[str, Any], root: Path, instance: str
) -> dict[str, Path] | StartFailure:
    """mountPath → local directory for each of the container's volume mounts."""
    meta, spec = pod["metadata"], pod["spec"]
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name"))
        if volume is None:
            return StartFailure(f'volume "{mount.get("name")}" not found in the pod')
        if "persistentVolumeClaim" in volume:
            directory = root / meta["namespace"] / str(volume["persistentVolumeClaim"].get("claimName"))
        elif "emptyDir" in volume or "downwardAPI" in volume:
            directory = _pod_dir(root, pod, instance) / str(volume["name"])
        else:
            continue  # other volume kinds hold nothing the drill image reads
        if mount.get("subPath"):
            directory = directory / str(mount["subPath"])
        directory.mkdir(parents=True, exist_ok=True)
        if "downwardAPI" in volume:
            write_downward_api(pod, volume["downwardAPI"], directory)
        mounts[str(mount.get("mountPath", "")).rstrip("/") or "/"] = directory
    return mounts


def _field(pod: Mapping[str, Any], path: str) -> str | None:
    """A downward API fieldRef's value (the metadata fields a volume may project), or None."""
    meta = pod["metadata"]
    for kind in ("annotations", "labels"):
        prefix = f"metadata.{kind}['"
        if path.startswith(prefix) and path.endswith("']"):
            return str((meta.get(kind) or {}).get(path[len(prefix) : -2], ""))
        if path == f"metadata.{kind}":
            return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get(kind) or {}).items()))
    if path in ("metadata.name", "metadata.namespace", "metadata.uid"):
        return str(meta.get(path.split(".", 1)[1], ""))
    return None


def write_downward_api(pod: Mapping[str, Any], source: Mapping[str, Any], directory: Path) -> None:
    """Write a downwardAPI volume's files from the pod as it is now; a file is replaced (renamed
    over, as the kubelet's atomic writer does) only when its content changed."""
    for item in source.get("items") or []:
        value = _field(pod, str((item.get("fieldRef") or {}).get("fieldPath", "")))
        relative = str(item.get("path", ""))
        if value is None or not relative or relative.startswith("/") or ".." in relative.split("/"):
            continue
        target = directory / relative
        try:
            if target.read_text() == value:
                continue
        except OSError:
            pass
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f".{target.name}.tmp")
        staged.write_text(value)
        staged.replace(target)


def refresh_downward_api(pod: Mapping[str, Any], root: Path, instance: str) -> None:
    """The pod's downwardAPI volumes rewritten from its current metadata (a running pod's
    annotations changed)."""
    for volume in pod["spec"].get("volumes") or []:
        if "downwardAPI" in volume:
            directory = _pod_dir(root, pod, instance) / str(volume.get("name"))
            if directory.is_dir():
                write_downward_api(pod, volume["downwardAPI"], directory)


def _local(value: str, mounts: Mapping[str, Path]) -> str:
    for mount_path in sorted(mounts, key=len, reverse=True):
        if value == mount_path or value.startswith(mount_path + "/"):
            return str(mounts[mount_path]) + value[len(mount_path) :]
    return value


def start(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    command: list[str],
    args: list[str],
    volume_root: Path,
    log_path: Path,
    job_faults: tuple[str, ...],
    instance: str,
) -> Process | StartFailure:
    """Start the container's command; `job_faults` (the fleet spec's `ckpt.*` faults) break the
    reference job the way its flags do."""
    if normalize_image(str(container.get("image", ""))) in SHELL_IMAGES:
        return _start_shell(pod, container, [*command, *args], volume_root, log_path, instance)
    if (missing := job_available()) is not None:
        return StartFailure(f"fleetval-sim: cannot run {container.get('image')}: {missing}")
    argv = [*(command or ENTRYPOINT), *args]
    executable = argv[0].rsplit("/", 1)[-1] if argv[0].startswith(IMAGE_PATH + "/") else argv[0]
    entry = ENTRIES.get(executable)
    if entry is None:
        return StartFailure(
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc "
            "create failed: unable to start container process: exec: "
            f'"{argv[0]}": executable file not found in $PATH: unknown'
        )
    mounts = volume_dirs(pod, container, volume_root, instance)
    if isinstance(mounts, StartFailure):
        return mounts
    env = {
        "HOSTNAME": str(pod["metadata"]["name"]),
        **{
            str(e["name"]): _local(str(e.get("value", "")), mounts)
            for e in container.get("env") or []
            if "name" in e
        },
    }
    if entry == contract.TRAIN_ENTRY and job_faults:
        env[contract.ENV_FAULTS] = ",".join(f.removeprefix(contract.FAULT_PREFIX) for f in job_faults)
    workdir = mounts.get(str(container.get("workingDir", "")).rstrip("/")) or log_path.parent
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return start_entry(entry, [_local(a, mounts) for a in argv[1:]], env, log_path, workdir)
    except (LaunchError, OSError) as exc:
        return StartFailure(f"fleetval-sim: {exc}")


def _start_shell(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    argv: list[str],
    volume_root: Path,
    log_path: Path,
    instance: str,
) -> Process | StartFailure:
    """A `sh -c SCRIPT` container of the scenario job image, run by this machine's /bin/sh."""
    if not argv or argv[0] not in SHELLS:
        shown = argv[0] if argv else "(no command: the image's entrypoint)"
        return StartFailure(
            f"fleetval-sim: the scenario job image runs `sh -c SCRIPT` only, got {shown!r}", 126
        )
    mounts = volume_dirs(pod, container, volume_root, instance)
    if isinstance(mounts, StartFailure):
        return mounts
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOSTNAME": str(pod["metadata"]["name"]),
        **{
            str(e["name"]): _local(str(e.get("value", "")), mounts)
            for e in container.get("env") or []
            if "name" in e
        },
    }
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return CommandProcess(["/bin/sh", *argv[1:]], env, log_path, log_path.parent)
    except (LaunchError, OSError) as exc:
        return StartFailure(f"fleetval-sim: {exc}")


def default_volume_root(fleet: str) -> Path:
    configured = os.environ.get("FLEETVAL_SIM_VOLUMES")
    base = Path(configured) if configured else Path(os.environ.get("TMPDIR", "/tmp")) / "fleetval-sim-volumes"
    return base / fleet
