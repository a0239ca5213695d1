"""The nccl-tests probe: one node's intra-node all_reduce, or a group of nodes (run as an MPIJob)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final

from fleetval.probes.pod import ProbeSpec

# nccl-tests (common.h): 1 wrong results, 3 an NCCL error, 4 its own -T timeout. The output holds
# the evidence; 2 (a CUDA error: the GPUs could not be used) and anything else is the harness.
NCCL_REPORTED_EXIT_CODES: Final = (0, 1, 3, 4)
# nccl-tests with OpenMPI (CoreWeave's public build: CUDA 12.4.1, NCCL 2.21.5), pinned by tag; a
# site build with the fabric's plugins (or a digest) is passed as `image`.
NCCL_TESTS_IMAGE: Final = "ghcr.io/coreweave/nccl-tests:12.4.1-cudnn-devel-ubuntu20.04-nccl2.21.5-1-85f9143"
# The image builds nccl-tests in /opt/nccl-tests/build, which is not on its PATH.
NCCL_TESTS_BIN: Final = "/opt/nccl-tests/build"
NCCL_MIN_BYTES: Final = "8"
NCCL_MAX_BYTES: Final = "8G"
# nccl-tests' own per-operation timeout (-T, seconds): without it a hung collective never returns
# and the pod dies at its deadline as a harness failure; with it the hang is reported (exit 4,
# "Test timeout" in the output) and judged D-NET-NCCL-03. Far above any healthy 8 GB all_reduce,
# socket fallback included.
NCCL_OP_TIMEOUT_S: Final = 600


SUBJECT_MAX: Final = 100


def nccl_subject(nodes: Sequence[str]) -> str:
    """The verdict subject of an NCCL probe: the node, or `nodeA+nodeB` for a pair (the CLI contract).
    A larger group (fault isolation) is `a+b+c…` while that stays short, else
    `group<N>-<digest>` (its verdicts list the nodes)."""
    joined = "+".join(nodes)
    if len(nodes) <= 2 or len(joined) <= SUBJECT_MAX:
        return joined
    return f"group{len(nodes)}-{hashlib.sha256(joined.encode()).hexdigest()[:12]}"


def nccl_probe(
    nodes: Sequence[str],
    *,
    gpus_per_node: int,
    repeat: int,
    run_key: str,
    collective: str = "all_reduce",
    image: str = NCCL_TESTS_IMAGE,
    profile: str | None = None,
    scope: str | None = None,
    fabric: str | None = None,
    purpose: str | None = None,
) -> ProbeSpec:
    """nccl-tests `<collective>_perf -b 8 -e 8G -f 2 -g <gpus> -T 600` over one node or a group of
    nodes (`-T`: a hang ends as a reported timeout, see NCCL_OP_TIMEOUT_S).

    One process per node drives all its GPUs (`-g`), so a group of N nodes is N × gpus ranks.
    The binary runs by its path in the image (`NCCL_TESTS_BIN`, not on the image's PATH); its exit
    code reaches the pod, and the codes nccl-tests uses for a failed collective are "reported"
    (the parsed output decides: a broken link is a `fail` verdict, not a harness error), while a
    missing binary (127) is a harness error. `params["argv"]` is the bare nccl-tests command line
    (the MPIJob launcher runs it under mpirun).
    One node runs as a pod pinned to it; a group runs as an MPIJob gang-admitted through Kueue
    (`fleetval.nccl.mpijob`), whose launcher runs this command under `mpirun -np N`. NCCL_DEBUG=INFO
    makes NCCL print its version, topology and active transport, which the judges require.
    `profile`, `scope`, the expected `fabric` and `purpose` (sweep, isolation) travel in params
    so a stored probe can be re-judged later without its run's plan.
    """
    members = list(nodes)
    if not members:
        raise ValueError("an NCCL probe needs at least one node")
    if len(set(members)) != len(members):
        raise ValueError(f"duplicate nodes in an NCCL probe: {members}")
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
    kind = "intra" if len(members) == 1 else "inter"
    subject = nccl_subject(members)
    argv = [
        f"{collective}_perf",
        "-b",
        NCCL_MIN_BYTES,
        "-e",
        NCCL_MAX_BYTES,
        "-f",
        "2",
        "-g",
        str(gpus_per_node),
        "-T",
        str(NCCL_OP_TIMEOUT_S),
    ]
    params: dict[str, Any] = {"nodes": members, "repeat": repeat, "collective": collective, "argv": argv}
    extra = (("profile", profile), ("scope", scope), ("fabric", fabric), ("purpose", purpose))
    params.update({k: v for k, v in extra if v})
    return ProbeSpec(
        probe_key=f"{run_key}/nccl-{kind}/{subject}/r{repeat}",
        tool="nccl",
        node=subject,
        image=image,
        command=("/bin/bash", "-c"),
        args=(f"exec {NCCL_TESTS_BIN}/{' '.join(argv)}",),
        gpus=gpus_per_node,
        timeout_s=1800,
        env={"NCCL_DEBUG": "INFO"},
        params=params,
        reported_exit_codes=NCCL_REPORTED_EXIT_CODES,
        # NCCL's shared-memory transport needs far more than the runtime's 64 MiB /dev/shm; RDMA
        # needs locked memory. Nothing else: no SYS_ADMIN.
        capabilities=("IPC_LOCK",),
        shm_size="16Gi",
    )
