"""The DCGM diagnostic probe: `dcgmi diag` in the pinned DCGM image, pinned to one node."""

from __future__ import annotations

from typing import Final

from fleetval.dcgm.exit_codes import REPORTED_EXIT_CODES
from fleetval.pinned_images import DCGM_IMAGE as DCGM_IMAGE
from fleetval.pinned_images import SUPPORTED_DCGM_IMAGES as SUPPORTED_DCGM_IMAGES
from fleetval.pinned_images import DcgmImage as DcgmImage
from fleetval.probes.pod import ProbeSpec

# DCGM_IMAGE (pinned) is a site's default; FLEETVAL_DCGM_IMAGE overrides it (a mirror, a digest, an
# older supported tag).

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
