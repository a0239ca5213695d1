"""Containers that really run: the checkpoint drill image's pods are local processes.

Every other image's container is modelled (`fleetval.sim.images` prints what the tool would
print). The drill image's job is small enough to run, and what the drill judges — a checkpoint
written to storage, a kill inside a write, a save on SIGTERM — is only real if a process does
it. So the simulated kubelet starts the image's command as a process (the reference job forks
from `fleetval.ckpt.local`'s zygote, which loaded PyTorch once), with:

- the container's environment, and its volumes as directories: a PersistentVolumeClaim is
  `<volume root>/<namespace>/<claim>` (the same directory for every pod that mounts the claim,
  as one volume would be), an emptyDir is per pod;
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
from fleetval.ckpt.local import LaunchError, Process, job_available, start_entry
from fleetval.sim.images import normalize_image

PROCESS_IMAGES: Final = frozenset({normalize_image(contract.DRILL_IMAGE)})
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


def volume_dirs(
    pod: Mapping[str, Any], container: Mapping[str, Any], root: Path
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
        elif "emptyDir" in volume:
            directory = root / meta["namespace"] / ".pods" / meta["uid"] / str(volume["name"])
        else:
            continue  # other volume kinds hold nothing the drill image reads
        if mount.get("subPath"):
            directory = directory / str(mount["subPath"])
        directory.mkdir(parents=True, exist_ok=True)
        mounts[str(mount.get("mountPath", "")).rstrip("/") or "/"] = directory
    return mounts


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
    job_faults: tuple[str, ...] = (),
) -> Process | StartFailure:
    """Start the container's command; `job_faults` (the fleet spec's `ckpt.*` faults) break the
    reference job the way its flags do."""
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
    mounts = volume_dirs(pod, container, volume_root)
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


def default_volume_root(fleet: str) -> Path:
    configured = os.environ.get("FLEETVAL_SIM_VOLUMES")
    base = Path(configured) if configured else Path(os.environ.get("TMPDIR", "/tmp")) / "fleetval-sim-volumes"
    return base / fleet
