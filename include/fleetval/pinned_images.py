"""Every container image fleetval's probes and jobs run, pinned by tag, in one place.

A site that mirrors images (an air-gapped cluster, a registry cache) mirrors these; a setting
named here overrides one. Data only: the tool packages and the settings read their defaults from
here, so reading the settings loads no tool package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


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

# DCGM diagnostics: the GPU Operator's current standalone DCGM, so the probe runs the DCGM the
# fleet already runs.
DCGM_IMAGE: Final = SUPPORTED_DCGM_IMAGES[-1].ref
# nccl-tests with OpenMPI (CoreWeave's public build: CUDA 12.4.1, NCCL 2.21.5); a site build with
# the fabric's plugins is the usual override.
NCCL_TESTS_IMAGE: Final = "ghcr.io/coreweave/nccl-tests:12.4.1-cudnn-devel-ubuntu20.04-nccl2.21.5-1-85f9143"
# MIG isolation workload and filler (PyTorch: allocates and runs matmuls on its MIG device).
MIG_WORKLOAD_IMAGE: Final = "nvcr.io/nvidia/pytorch:25.01-py3"
# Kueue scenario jobs: Kubernetes v1.34 e2e's busybox (test/utils/image/manifest.go), public,
# small, on every mirror.
KUEUE_JOB_IMAGE: Final = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
# The checkpoint drill's training job (built from jobs/ckpt-reference).
CKPT_DRILL_IMAGE: Final = "ghcr.io/fleetval/ckpt-drill:0.1.0"


@dataclass(frozen=True, slots=True)
class PinnedImage:
    ref: str
    runs: str  # what fleetval runs in it
    override: str  # the setting or DAG param that replaces it


PINNED_IMAGES: Final = (
    PinnedImage(DCGM_IMAGE, "DCGM diagnostics (weekly sweep, onboarding, Xid r3)", "FLEETVAL_DCGM_IMAGE"),
    PinnedImage(NCCL_TESTS_IMAGE, "NCCL pairs and rings (MPIJobs)", "FLEETVAL_NCCL_IMAGE"),
    PinnedImage(
        NCCL_TESTS_IMAGE,
        "GPU Operator isolation probe (a pod without a GPU request)",
        "gpu_operator_validation param `image`",
    ),
    PinnedImage(MIG_WORKLOAD_IMAGE, "MIG isolation workload and filler", "mig_validation param `image`"),
    PinnedImage(KUEUE_JOB_IMAGE, "Kueue scenario jobs", "kueue_contention param `image`"),
    PinnedImage(CKPT_DRILL_IMAGE, "checkpoint/resume drill", "checkpoint_resume_drill param `image`"),
)
