"""The DCGM diagnostic probe: `dcgmi diag` in the pinned DCGM image, pinned to one node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from fleetval.dcgm.exit_codes import REPORTED_EXIT_CODES
from fleetval.probes.pod import ProbeSpec


@dataclass(frozen=True, slots=True)
class DcgmImage:
    """A DCGM image fleetval supports: the DCGM it runs has an exit-code table
    (fleetval.dcgm.exit_codes) and run-level plans (fleetval.dcgm.levels) read from that release's
    source, and the simulator's catalog has the image, printing this version."""

    ref: str
    version: str
    shipped_by: str  # where the tag comes from


SUPPORTED_DCGM_IMAGES: Final = (
    DcgmImage(
        "nvcr.io/nvidia/cloud-native/dcgm:3.3.9-1-ubuntu22.04",
        "3.3.9",
        "GPU Operator v24.9 (its component list names this standalone DCGM image)",
    ),
    DcgmImage(
        "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
        "4.2.3",
        "NVIDIA/DCGM docker/Dockerfile.ubuntu22.04 at 4.2.3; fleetval's pin before 4.6.0",
    ),
    DcgmImage(
        "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04",
        "4.6.0",
        "GPU Operator chart v26.7 default `dcgm.version`",
    ),
)

# DCGM diagnostics image, pinned by tag: the GPU Operator's current standalone DCGM, so the probe
# runs the DCGM the fleet already runs. A site overrides it (a mirror, a digest, an older supported
# tag) with FLEETVAL_DCGM_IMAGE.
DCGM_IMAGE: Final = SUPPORTED_DCGM_IMAGES[-1].ref
# dcgmi's exit codes whose output is evidence (0 passed, 205/226 a test failed, 217/218/222 DCGM
# busy with another client), per supported version: fleetval.dcgm.exit_codes. Anything else is the
# harness (no host engine 235, killed, not found 127).
DCGM_REPORTED_EXIT_CODES: Final = REPORTED_EXIT_CODES


def dcgm_diag_probe(node: str, *, level: int, gpus: int, run_key: str, image: str = DCGM_IMAGE) -> ProbeSpec:
    """`dcgmi diag -r <level> -j` on every GPU of `node`.

    `gpus` is the node's GPU *capacity*: after the device plugin withdraws a GPU (an Xid it
    watches), allocatable drops and the pod cannot be scheduled, so a node with a missing GPU is
    never diagnosed on the GPUs that are left and passed. `nvidia-smi -L` first lists the GPUs
    the container got (index → UUID, which DCGM's JSON does not carry); the pod starts its own
    host engine, and `exec` hands dcgmi's exit code to the pod.
    """
    script = f"nvidia-smi -L && nv-hostengine >/dev/null && exec dcgmi diag -r {level} -j"
    return ProbeSpec(
        probe_key=f"{run_key}/dcgm-r{level}/{node}",
        tool="dcgm",
        node=node,
        image=image,
        command=("/bin/bash", "-c"),
        args=(script,),
        gpus=gpus,
        timeout_s=3600 if level >= 3 else 1200,
        params={"level": level},
        reported_exit_codes=DCGM_REPORTED_EXIT_CODES,
        # The pod runs its own nv-hostengine, which reads the profiling (DCP) counters the
        # diagnostic's plugins use; that needs CAP_SYS_ADMIN, as NVIDIA's DCGM-Exporter docs show for
        # its embedded hostengine (`--cap-add SYS_ADMIN`, docs.nvidia.com/datacenter/cloud-native/
        # gpu-telemetry/latest/dcgm-exporter.html). Every other capability is dropped.
        capabilities=("SYS_ADMIN",),
    )
