"""The image catalog and the simulated container runtime (pure; no HTTP, no database).

The simulated API server's kubelet runs a container through `run_container`: the image's files
and ENTRYPOINT/CMD come from the catalog, the entrypoint runs as runc would exec it, a shell runs
a small model of `sh -c` / `bash -c`, and the probe tools print what the real tools print on that
node (the fleet spec's faults included). A probe that would break on a real cluster (a binary not
on the image's PATH, no host engine for dcgmi, a /dev/shm too small for NCCL's ranks) breaks
here the same way, with the real message and exit code; a script the model cannot run exits 2
with `fleetval-sim: ...` instead of passing silently. Output is deterministic per (fleet seed,
node, pod uid).

Facts, with their sources:

- DCGM images, one per supported release (`fleetval.dcgm.probe.SUPPORTED_DCGM_IMAGES`), each
  printing its own version (`nv-hostengine`'s banner, `dcgmi --version`, the diag's metadata).
  All three share NVIDIA/DCGM's `docker/` recipe: `ENTRYPOINT ["/usr/bin/nv-hostengine"]`,
  `CMD ["-n", "-b", "0.0.0.0", "--log-level", "NONE", "-f", "-"]`, `NVIDIA_VISIBLE_DEVICES=all`;
  `dcgmi` and `nv-hostengine` install to `${CMAKE_INSTALL_BINDIR}` (/usr/bin; DCGM
  `CMakeLists.txt`). `4.2.3-1-ubuntu22.04`: `Dockerfile.ubuntu22.04` at 4.2.3, FROM
  `nvcr.io/nvidia/cuda:12.8.0-base-ubuntu22.04`, package `datacenter-gpu-manager-4-cuda12`
  (dcgmproftester12), `nvvs` in /usr/libexec/datacenter-gpu-manager-4. `4.6.0-1-ubuntu24.04`:
  the ubuntu24.04 recipe is not in the public repository (its `Dockerfile.ubuntu22.04` at 4.6.0
  installs the -cuda12 and -cuda13 packages on `cuda:13.0.1-base`); a run of the published image
  (yassineteimi/nvidia-gpu-fleet-poc `docs/artifacts/session-b-dcgm-image-check.txt` @141c1af,
  tests/fixtures/dcgm) shows `/usr/bin/dcgmproftester12` and `13` and `dcgmi  version: 4.6.0`;
  Ubuntu 24.04: bash 5.2. `3.3.9-1-ubuntu22.04` (GPU Operator v24.9's DCGM): the 3.x package
  `datacenter-gpu-manager` (dcgmproftester11 and 12; `nvvs` in /usr/share/nvidia-validation-
  suite, `DCGM_NVVS_INSTALL_DIR` at 3.3.9). Ubuntu: /bin/sh is dash, merged /usr.
- `dcgmi --version`: TCLAP's `StdOutput::version` (an empty line, `dcgmi  version: <v>`, an
  empty line), as the captured 4.6.0 run prints it.
- nccl-tests image `ghcr.io/coreweave/nccl-tests:12.4.1-cudnn-devel-ubuntu20.04-nccl2.21.5-1-
  85f9143`: coreweave/nccl-tests `Dockerfile.ubuntu20` at 85f9143: nccl-tests (NVIDIA/nccl-tests
  2cbb968) built with `make MPI=1` in WORKDIR /opt/nccl-tests, so the binaries are
  /opt/nccl-tests/build/<collective>_perf (plus the /opt/nccl_tests symlink) and are not on
  PATH; OpenMPI rebuilt into /opt/hpcx/ompi (`mpirun` at /opt/hpcx/ompi/bin/mpirun, on PATH);
  `openssh-server` (/usr/sbin/sshd); PATH as its `ENV PATH`. No ENTRYPOINT of its own: the CUDA
  base image's `/opt/nvidia/nvidia_entrypoint.sh`. Ubuntu 20.04: bash 5.0, dash.
- Shell messages: bash `execute_cmd.c` / `error.c` (`%s: line %d: %s: command not found`, the
  `line N: ` prefix only when the line number is > 0; bash 5.0 counts `-c` lines from 0, 5.1
  from 1, so `bash -c foo` prints `bash: foo: command not found` on 5.0 and `bash: line 1: foo:
  command not found` on 5.1), builtins always print `line N: ` (`builtin_error`); dash prints
  `sh: 1: foo: not found`; busybox ash `sh: foo: not found` (as BusyBox/Alpine logs show it).
  Exit 127 for a command not found (Posix).
- runc/containerd for an entrypoint that is not there: container status `StartError`, exit code
  128, message `failed to create containerd task: failed to create shim task: OCI runtime create
  failed: runc create failed: unable to start container process: exec: "foo": executable file
  not found in $PATH: unknown` (`stat /x: no such file or directory` for a path); wording as
  reported in opencontainers/runc#4713 and containerd issues (containerd 1.7, runc 1.1).
- `nv-hostengine` (DCGM `hostengine/src/main.cpp`): prints `Started host engine version <v>
  using port number: 5555 ` (trailing space) and daemonizes; with `-n` it stays in the
  foreground; a second one prints `Host engine already running with pid <pid>` and exits 1.
- `dcgmi` without a host engine (DCGM `dcgmi/Command.cpp`): `Error: unable to establish a
  connection to the specified host: localhost` then `Error: Unable to connect to host engine.
  Host engine connection invalid/disconnected.`, exit status DCGM_ST_CONNECTION_NOT_VALID (-21)
  as a byte: 235. `dcgmi diag` when a test fails (`dcgmi/Diag.cpp` GetFailureResult):
  DCGM_ST_NVVS_ISOLATE_ERROR (-51 → 205) if any error's priority is ISOLATE, else
  DCGM_ST_NVVS_ERROR (-30 → 226). Durations: `dcgmi diag --help` says r1 "~ seconds", r2 "~ 2
  minutes", r3 "~ 15 minutes"; r4 is an estimate (1.5 h). A container sees only the GPUs the
  device plugin gave it, numbered 0..n-1 in bus order (NVML inside the container), with their
  real UUIDs: `nvidia-smi -L` (injected by the NVIDIA container toolkit) maps index to UUID.
- nccl-tests (2cbb968 `src/common.cu`, `common.h`): a rank whose CUDA device does not exist
  fails `cudaGetDeviceProperties` (`<host>: Test CUDA failure common.cu:892 'invalid device
  ordinal'`, exit testCudaError = 2); an NCCL error exits testNcclError = 3, a `-T` timeout
  testTimeout = 4, wrong results by the nccl-tests version the output prints (its simulated
  output prints 2.20.0): `exit(EXIT_FAILURE)` = 1 up to v2.17.2, testNumResults = 6 in
  v2.17.3-v2.17.6, 7 from v2.17.7. No `-T` means no timeout: a hung
  collective never returns. NCCL 2.21.5 (`src/misc/shmutils.cc`, `src/proxy.cc`) creates one
  proxy-ops pool of 7340384 bytes per rank in /dev/shm (size as reported with NCCL 2.21.5 on
  8×H100 in pytorch/torchtitan#853), so eight ranks need 58.8 MB and fit the runtime's 64 MiB
  default (P2P over NVLink needs no SHM-transport buffers); when /dev/shm is full:
  `misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-XXXXXX to 7340388
  bytes`, `misc/shmutils.cc:113 NCCL WARN Error while creating shared memory segment ... (size
  7340384)`, `ncclSystemError`: `unhandled system error (run with NCCL_DEBUG=INFO for details)`.
- OpenMPI 4.1 (HPC-X 2.19) `mpirun`: refuses root without `--allow-run-as-root` or
  OMPI_ALLOW_RUN_AS_ROOT=1 + OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (help text as printed by 4.x);
  `There are not enough slots available...` for more processes than slots; `mpirun was unable
  to find the specified executable file...`; a failed rank ends with `mpirun detected that one
  or more processes exited with non-zero status` and mpirun exits with that rank's code.

Not faithful (deliberately simple): ranks under mpirun fill hosts evenly (slots from `-H
host:N` or the operator's slotsPerWorker, or `--map-by ppr:K:node`), nothing else of its mapping;
worker /dev/shm is assumed large enough (the launcher cannot see it); hostnames in nccl-tests
output are node names, not worker pod names; the CUDA entrypoint's banner is not printed; a
container without GPUs gets no driver tools and no `/dev/nvidia<N>` (unless the cluster's
`op.isolation_leak` fault hands it the node's GPUs); `ls` lists only directories of the image and
/dev; nccl-tests output comes from `fleetval.nccl.simulated`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import posixpath
import random
import re
import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.dcgm.probe import SUPPORTED_DCGM_IMAGES, DcgmImage
from fleetval.dcgm.simulated import DCGM_VERSIONS, DcgmFault, render_dcgm
from fleetval.errors import ParseError, SpecError
from fleetval.fleet.gpus import gpu_uuid
from fleetval.fleet.spec import FleetSpec
from fleetval.mig import simulated as mig_sim
from fleetval.mig.isolation import FILL_SCRIPT, PROBE_IMAGE, WORKLOAD_SCRIPT
from fleetval.nccl.parser import normalize_collective, parse_nccl
from fleetval.nccl.probe import NCCL_TESTS_IMAGE
from fleetval.nccl.simulated import mpirun_abort_lines
from fleetval.nccl.simulated_run import nccl_run

NEVER: Final = math.inf  # duration_s of a process that does not exit by itself
DEFAULT_SHM_BYTES: Final = 64 << 20  # the container runtime's /dev/shm when the pod mounts none
DCGM_PORT: Final = 5555

# DCGM fault kinds of the fleet spec -> the renderer's kinds; hardware-class Xids fail the r3+
# stress tests the way DCGM would find the damage (application/driver Xids leave the GPU healthy).
DCGM_FAULT_KINDS: Final = {
    "dcgm.memory": "memory",
    "dcgm.pcie": "pcie",
    "dcgm.nvlink": "nvlink",
    "dcgm.thermal_warn": "thermal_warn",
}
XID_CLASS_TO_DCGM: Final = {"memory": "memory", "device": "pcie", "link": "nvlink"}
# A node fault, not a GPU's: while the node's dcgm-exporter runs, DCGM's profiling module is busy.
EXPORTER_CONTENTION: Final = "dcgm.exporter_contention"
# dcgm_errors.c priorities of the renderer's findings, by `error_severity` value (ISOLATE = 2).
_DCGM_ISOLATE: Final = 2
_DCGM_EXIT_NVVS_ERROR: Final = 226  # DCGM_ST_NVVS_ERROR (-30) as an exit byte
_DCGM_EXIT_ISOLATE: Final = 205  # DCGM_ST_NVVS_ISOLATE_ERROR (-51)
_DCGM_EXIT_NO_CONNECTION: Final = 235  # DCGM_ST_CONNECTION_NOT_VALID (-21)
# Nominal `dcgmi diag -r N` run times on an 8-GPU node (see module doc).
DCGM_DIAG_SECONDS: Final = {1: 30.0, 2: 150.0, 3: 1200.0, 4: 5400.0}

_NCCL_POOL_BYTES: Final = 7340384  # NCCL 2.21.5 proxy-ops pool (sizeof(struct ncclProxyOpsPool))
_PAGE: Final = 4096
_NCCL_INIT_SECONDS: Final = 20.0  # estimate: CUDA context, NCCL init, buffer allocation
_NCCL_ITERS: Final = 5 + 20 + 1  # warmup + timed iterations + the data check, per size and mode
COLLECTIVES: Final = (
    "all_reduce",
    "all_gather",
    "broadcast",
    "reduce_scatter",
    "reduce",
    "alltoall",
    "scatter",
    "gather",
    "sendrecv",
    "hypercube",
)


# ---------------------------------------------------------------------------------------------
# The catalog


@dataclass(frozen=True, slots=True)
class Image:
    """What the runtime needs of an image: its files (absolute path -> the program it is), its
    ENV, ENTRYPOINT/CMD and WORKDIR, and the bash version (it decides how shell errors read)."""

    ref: str
    files: Mapping[str, str]
    env: Mapping[str, str]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = "/"
    bash_version: tuple[int, int] = (5, 1)
    tool_version: str = ""  # the version its tool prints (DCGM images: the DCGM release)


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Programs the runtime can run. Anything else in an image is "other": present (so the shell
# finds it) but not simulated (running it exits 2 with fleetval-sim's message).
_UBUNTU_BIN: Final = {
    "bash": "bash",
    "sh": "dash",
    "dash": "dash",
    "rbash": "other",
    "cat": "cat",
    "echo": "echo",
    "ls": "ls",
    "sleep": "sleep",
    "true": "true",
    "false": "false",
    # Present in the image; the simulator does not run them.
    **dict.fromkeys(
        _words(
            "cp mv rm mkdir rmdir ln chmod chown touch date hostname uname grep sed head tail "
            "tee printf env timeout nproc wc sort uniq tr cut xargs find awk mawk id whoami test "
            "[ basename dirname seq stat readlink realpath mktemp sync tar gzip df du ps kill "
            "nice nohup stdbuf which bc expr yes pwd"
        ),
        "other",
    ),
}
_UBUNTU_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CUDA_PATH: Final = "/usr/local/nvidia/bin:/usr/local/cuda/bin:" + _UBUNTU_PATH


def _ubuntu_files() -> dict[str, str]:
    """Core utilities of an Ubuntu image; /bin and /sbin are symlinks into /usr (merged /usr)."""
    files: dict[str, str] = {}
    for name, program in _UBUNTU_BIN.items():
        files[f"/usr/bin/{name}"] = program
        files[f"/bin/{name}"] = program
    return files


# What differs between the supported DCGM images: CUDA builds of dcgmproftester, where nvvs
# lives, the Ubuntu release's bash.
_DCGM_IMAGE_LAYOUT: Final[dict[str, tuple[tuple[int, ...], str, tuple[int, int]]]] = {
    "3.3.9": ((11, 12), "/usr/share/nvidia-validation-suite/nvvs", (5, 1)),
    "4.2.3": ((12,), "/usr/libexec/datacenter-gpu-manager-4/nvvs", (5, 1)),
    "4.6.0": ((12, 13), "/usr/libexec/datacenter-gpu-manager-4/nvvs", (5, 2)),
}


def _dcgm_image(supported: DcgmImage) -> Image:
    proftesters, nvvs, bash_version = _DCGM_IMAGE_LAYOUT[supported.version]
    files = _ubuntu_files()
    files.update(
        {
            "/usr/bin/dcgmi": "dcgmi",
            "/usr/bin/nv-hostengine": "nv-hostengine",
            nvvs: "other",
            **{f"/usr/bin/dcgmproftester{cuda}": "other" for cuda in proftesters},
        }
    )
    return Image(
        ref=normalize_image(supported.ref),
        files=files,
        env={
            "PATH": _CUDA_PATH,
            "NVIDIA_DRIVER_CAPABILITIES": "compute,utility,compat32",
            "NVIDIA_DISABLE_REQUIRE": "true",
            "NVIDIA_VISIBLE_DEVICES": "all",
            "NO_SETCAP": "",
            "DEBIAN_FRONTEND": "noninteractive",
        },
        entrypoint=("/usr/bin/nv-hostengine",),
        cmd=("-n", "-b", "0.0.0.0", "--log-level", "NONE", "-f", "-"),
        bash_version=bash_version,
        tool_version=supported.version,
    )


def _nccl_tests_image() -> Image:
    files = _ubuntu_files()
    for collective in COLLECTIVES:
        files[f"/opt/nccl-tests/build/{collective}_perf"] = "nccl-tests"
        files[f"/opt/nccl_tests/build/{collective}_perf"] = "nccl-tests"  # ln -s /opt/nccl-tests
    for name in ("mpirun", "mpiexec", "orterun"):
        files[f"/opt/hpcx/ompi/bin/{name}"] = "mpirun"
    files.update(
        {
            "/opt/hpcx/ompi/bin/ompi_info": "other",
            "/opt/hpcx/ompi/bin/orted": "other",
            "/usr/sbin/sshd": "sshd",
            "/sbin/sshd": "sshd",
            "/usr/bin/ssh": "other",
            "/usr/local/cuda/bin/nvcc": "other",
            "/usr/bin/ibv_devinfo": "other",
            "/opt/nvidia/nvidia_entrypoint.sh": "nvidia-entrypoint",
        }
    )
    hpcx_path = (
        "/opt/hpcx/sharp/bin:/opt/hpcx/clusterkit/bin:/opt/hpcx/hcoll/bin:/opt/hpcx/ucc/bin:"
        "/opt/hpcx/ucx/bin:/opt/hpcx/ompi/bin:" + _CUDA_PATH
    )
    return Image(
        ref=normalize_image(NCCL_TESTS_IMAGE),
        files=files,
        env={
            "PATH": hpcx_path,
            "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
            "NVIDIA_VISIBLE_DEVICES": "all",
            "OMPI_HOME": "/opt/hpcx/ompi",
            "MPI_HOME": "/opt/hpcx/ompi",
            "OPAL_PREFIX": "/opt/hpcx/ompi",
            "HPCX_DIR": "/opt/hpcx",
        },
        entrypoint=("/opt/nvidia/nvidia_entrypoint.sh",),
        workdir="/opt/nccl-tests",
        bash_version=(5, 0),
    )


def _pytorch_image() -> Image:
    """NGC's PyTorch image (the MIG isolation probes'): Ubuntu 24.04 (bash 5.2), `python3` with
    PyTorch, the CUDA images' entrypoint and ENV."""
    files = _ubuntu_files()
    files.update(
        {
            "/usr/bin/python3": "python",
            "/usr/bin/python": "python",
            "/usr/local/cuda/bin/nvcc": "other",
            "/opt/nvidia/nvidia_entrypoint.sh": "nvidia-entrypoint",
        }
    )
    return Image(
        ref=normalize_image(PROBE_IMAGE),
        files=files,
        env={
            "PATH": _CUDA_PATH,
            "NVIDIA_VISIBLE_DEVICES": "all",
            "NVIDIA_DRIVER_CAPABILITIES": "compute,utility,video",
        },
        entrypoint=("/opt/nvidia/nvidia_entrypoint.sh",),
        workdir="/workspace",
        bash_version=(5, 2),
    )


def _ubuntu_image(tag: str, bash_version: tuple[int, int]) -> Image:
    return Image(
        ref=normalize_image(f"ubuntu:{tag}"),
        files=_ubuntu_files(),
        env={"PATH": _UBUNTU_PATH},
        cmd=("/bin/bash",),
        bash_version=bash_version,
    )


def _busybox_image(tag: str) -> Image:
    """The busybox image: every applet is a link to /bin/busybox in /bin; `sh` is ash."""
    files = {f"/bin/{name}": "other" for name in _UBUNTU_BIN if name not in ("bash", "dash", "rbash")}
    files.update(
        {
            "/bin/busybox": "other",
            "/bin/sh": "ash",
            "/bin/ash": "ash",
            "/bin/cat": "cat",
            "/bin/echo": "echo",
            "/bin/sleep": "sleep",
            "/bin/true": "true",
            "/bin/false": "false",
        }
    )
    return Image(ref=normalize_image(f"busybox:{tag}"), files=files, env={"PATH": _UBUNTU_PATH}, cmd=("sh",))


def normalize_image(ref: str) -> str:
    """An image reference as the runtime resolves it: `ubuntu:22.04` ->
    `docker.io/library/ubuntu:22.04`, a missing tag is `latest`."""
    name, _, digest = ref.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    repo, tag = (name[:colon], name[colon + 1 :]) if colon > slash else (name, "latest")
    first = repo.split("/", 1)[0]
    if "/" not in repo or ("." not in first and ":" not in first and first != "localhost"):
        repo = f"docker.io/{repo}"
    if repo.startswith("docker.io/") and repo.count("/") == 1:
        repo = "docker.io/library/" + repo.removeprefix("docker.io/")
    return f"{repo}:{tag}" + (f"@{digest}" if digest else "")


def _catalog() -> dict[str, Image]:
    images = [
        *(_dcgm_image(supported) for supported in SUPPORTED_DCGM_IMAGES),
        _nccl_tests_image(),
        _pytorch_image(),
        _ubuntu_image("22.04", (5, 1)),
        _ubuntu_image("20.04", (5, 0)),
        _busybox_image("1.36"),
    ]
    return {image.ref: image for image in images}


IMAGES: Final = _catalog()


def lookup_image(ref: str) -> Image | None:
    """The catalog's image for a reference, or None (the kubelet cannot pull it)."""
    return IMAGES.get(normalize_image(ref))


# ---------------------------------------------------------------------------------------------
# Container context and result


@dataclass(frozen=True, slots=True)
class ContainerContext:
    node: str  # the node the pod was scheduled on
    gpu_indices: tuple[int, ...]  # GPUs the device plugin gave the container (healthy ones only)
    env: Mapping[str, str]
    salt: str  # pod uid: same pod → same bytes, a new pod measures anew
    peers: tuple[tuple[str, tuple[int, ...]], ...] = ()  # mpirun in an MPIJob launcher: workers
    shm_bytes: int | None = None  # size of /dev/shm (None = the 64 MiB default)
    driver_version: str = ""  # the node's loaded driver ("" = its profile's; a driver upgrade changes it)
    mig: mig_sim.MigView | None = None  # the MIG devices the device plugin gave it (mig_manager)
    started_at: float | None = None  # when it started (the date nvidia-smi prints)
    # The node's dcgm-exporter was up when the container started (its deploy label "true"): its
    # profiling watches then compete with a diagnostic's (fault `dcgm.exporter_contention`).
    exporter_running: bool = False


@dataclass(frozen=True, slots=True)
class ContainerResult:
    """How the container ended. `reason`/`message` are the kubelet's container status: reason
    `Completed` or `Error` for a process that ran; `StartError` (exit 128, runc's message) for
    an entrypoint that could not be exec'd; `ErrImagePull` for an image the catalog does not
    have (the container never starts: exit code and duration mean nothing). `duration_s` is
    `NEVER` (math.inf) for a process that does not exit by itself (a daemon in the foreground,
    `sleep infinity`, a hung collective): the kubelet ends it (deadline, deletion), and
    `exit_code` is then what the kill gives (137)."""

    output: str  # what `kubectl logs` shows (stdout and stderr interleaved)
    exit_code: int
    duration_s: float  # nominal run time of the real tool on real hardware (the server scales it)
    reason: str = "Completed"
    message: str = ""


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "big")


# ---------------------------------------------------------------------------------------------
# DCGM reports


def _xid_class(code: int) -> str:
    from fleetval.xid.table import XID_TABLE

    rule = XID_TABLE.rules.get(code)
    return rule.xid_class.value if rule is not None else "unknown"


def dcgm_faults(fleet: FleetSpec, node: str, level: int) -> list[DcgmFault]:
    """The faults DCGM finds on `node` at run level `level`, by physical GPU index."""
    device = fleet.faults_on(node, "device")
    faults = [
        DcgmFault(gpu=int(f.params["gpu"]), kind=DCGM_FAULT_KINDS[f.kind])
        for f in device
        if f.kind in DCGM_FAULT_KINDS
    ]
    if level >= 3:
        faults += [
            DcgmFault(gpu=int(f.params["gpu"]), kind=kind)
            for f in device
            if f.kind == "xid"
            and (kind := XID_CLASS_TO_DCGM.get(_xid_class(int(f.params["code"])), "")) != ""
        ]
    return faults


def dcgm_major(fleet: FleetSpec, node: str) -> int:
    """The profile's `dcgm_major` (default 4): the DCGM of reports rendered without a pod. A pod
    runs its image's DCGM, as on a real node, whatever the profile says."""
    profile = fleet.profile_of(node)
    return int((fleet.raw.get("profiles", {}).get(profile.name, {}) or {}).get("dcgm_major", 4))


def gpu_uuids(fleet: FleetSpec, node: str, indices: Sequence[int]) -> list[str]:
    return [gpu_uuid(fleet.seed, node, i) for i in indices]


def dcgm_report(
    fleet: FleetSpec,
    node: str,
    level: int,
    *,
    gpu_indices: Sequence[int] | None = None,
    fmt: str = "json",
    driver_version: str = "",
    exporter_running: bool = False,
    dcgm_version: str = "",
) -> str:
    """What `dcgmi diag -r <level>` (`-j` when fmt="json") prints on `node`, seeing the GPUs in
    `gpu_indices` (all of the node's when None) as 0..n-1 in index order, with their UUIDs, on
    `driver_version` (the profile's when ""); `exporter_running`: the node's dcgm-exporter is up, so
    a `dcgm.exporter_contention` node finds DCGM's profiling module busy on every GPU.
    `dcgm_version`: the DCGM that runs it (a pod: its image's); "" = the profile's `dcgm_major`."""
    profile = fleet.profile_of(node)
    indices = sorted(set(gpu_indices)) if gpu_indices is not None else list(range(profile.gpus))
    local = {physical: i for i, physical in enumerate(indices)}
    faults = [
        DcgmFault(gpu=local[f.gpu], kind=f.kind) for f in dcgm_faults(fleet, node, level) if f.gpu in local
    ]
    if exporter_running and any(f.kind == EXPORTER_CONTENTION for f in fleet.faults_on(node, "device")):
        faults += [DcgmFault(gpu=i, kind="profiling_busy") for i in range(len(indices))]
    return render_dcgm(
        level=level,
        gpu_count=len(indices),
        gpu_uuids=gpu_uuids(fleet, node, indices),
        driver_version=driver_version or profile.driver_version,
        faults=faults,
        dcgm_major=dcgm_major(fleet, node),
        fmt=fmt,
        dcgm_version=dcgm_version,
    )


def _severities(value: Any) -> Iterator[int]:
    if isinstance(value, dict):
        if "error_severity" in value:
            yield int(value["error_severity"])
        for child in value.values():
            yield from _severities(child)
    elif isinstance(value, list):
        for child in value:
            yield from _severities(child)


def dcgm_exit_code(report_json: str) -> int:
    """dcgmi's exit code for a finished diagnostic (GetFailureResult): 0, 205 or 226."""
    severities = list(_severities(json.loads(report_json)))
    if not severities:
        return 0
    return _DCGM_EXIT_ISOLATE if _DCGM_ISOLATE in severities else _DCGM_EXIT_NVVS_ERROR


# ---------------------------------------------------------------------------------------------
# The process model


class _Exit(Exception):
    """A shell's `exit`/`exec`: the shell ends with `status`."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Forever(Exception):
    """The foreground process does not end by itself."""


class _Unsupported(Exception):
    """Something the simulator cannot run: the container exits 2 with this message."""


Stream = str | None  # "out", "err" or None (/dev/null)


@dataclass(slots=True)
class _Out:
    """A process's stdout and stderr after redirections."""

    proc: _Proc
    fds: dict[int, Stream] = field(default_factory=lambda: {1: "out", 2: "err"})

    def out(self, text: str) -> None:
        self.proc.write(self.fds.get(1), text)

    def err(self, text: str) -> None:
        self.proc.write(self.fds.get(2), text)


Program = Callable[["_Proc", list[str], dict[str, str], _Out], int]


class _Proc:
    """One container: its filesystem, the log, the clock, the daemons it started."""

    def __init__(self, image: Image, ctx: ContainerContext, fleet: FleetSpec) -> None:
        self.image = image
        self.ctx = ctx
        self.fleet = fleet
        self.files = dict(image.files)
        self.files.update(dict.fromkeys((f"/dev/{name}" for name in _DEV_ENTRIES), "device"))
        parents = sorted({d.instance.gpu for d in ctx.mig.devices}) if ctx.mig else []
        if ctx.gpu_indices or parents:
            # The NVIDIA container toolkit mounts the driver's utilities and the GPUs' device
            # nodes into GPU containers (device nodes keep the host's minor numbers; a MIG
            # container gets its parent GPU's).
            self.files["/usr/bin/nvidia-smi"] = "nvidia-smi"
            nvidia = [*(f"nvidia{i}" for i in (ctx.gpu_indices or parents)), *_NVIDIA_CONTROL_DEVICES]
            self.files.update(dict.fromkeys((f"/dev/{name}" for name in nvidia), "device"))
        self.log: list[str] = []
        self.elapsed = 0.0
        self.rng = random.Random(_seed(fleet.seed, ctx.node, ctx.salt, image.ref))
        self.hostengine_pid: int | None = None

    def write(self, stream: Stream, text: str) -> None:
        if stream is not None and text:
            self.log.append(text)

    def pid(self) -> int:
        return self.rng.randint(20, 4000)

    def find(self, name: str, env: Mapping[str, str]) -> str | None:
        """execvp's lookup: a name with a slash is a path (relative to WORKDIR), else PATH."""
        if "/" in name:
            path = posixpath.normpath(posixpath.join(self.image.workdir, name))
            return path if path in self.files else None
        for directory in (env.get("PATH") or "").split(":"):
            candidate = posixpath.normpath(posixpath.join(directory or ".", name))
            if candidate in self.files:
                return candidate
        return None

    def run(self, path: str, argv: list[str], env: dict[str, str], out: _Out) -> int:
        program = self.files[path]
        handler = _PROGRAMS.get(program)
        if handler is None:
            raise _Unsupported(f"unsupported command: {path} (in the image, not simulated)")
        return handler(self, argv, env, out)


# ---------------------------------------------------------------------------------------------
# Simple programs


def _run_true(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    return 0


def _run_false(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    return 1


def _echo_text(args: list[str], *, interprets_escapes: bool) -> str:
    newline = True
    while args and re.fullmatch(r"-[neE]+", args[0]):
        flags = args.pop(0)
        if "e" in flags:
            interprets_escapes = True
        if "E" in flags:
            interprets_escapes = False
        if "n" in flags:
            newline = False
    text = " ".join(args)
    if interprets_escapes and "\\" in text:
        raise _Unsupported("unsupported shell construct: echo with backslash escapes")
    return text + ("\n" if newline else "")


def _run_echo(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    out.out(_echo_text(argv[1:], interprets_escapes=False))
    return 0


def _run_cat(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    # stdin is empty in a container without a TTY; /dev/null is empty too.
    if any(a not in ("/dev/null", "-") for a in argv[1:]):
        raise _Unsupported(f"unsupported command: {' '.join(argv)} (the simulator has no files)")
    return 0


# A container's /dev under containerd (runc's default devices and mounts).
_DEV_ENTRIES: Final = (
    "core", "fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
    "stdout", "termination-log", "tty", "urandom", "zero",
)  # fmt: skip
_NVIDIA_CONTROL_DEVICES: Final = ("nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl")


def _run_ls(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    """`ls [-1] /dev`: the container's device nodes, one per line, in the C locale's order (the
    simulated images list no other directory faithfully)."""
    dirs = [a for a in argv[1:] if a != "-1"]
    if not dirs or any(posixpath.normpath(a) != "/dev" for a in dirs):
        raise _Unsupported(f"unsupported command: {' '.join(argv)} (only ls [-1] /dev is simulated)")
    status = 0
    for i, directory in enumerate(dirs):
        prefix = posixpath.normpath(posixpath.join(proc.image.workdir, directory)).rstrip("/") + "/"
        names = sorted({p[len(prefix) :].split("/", 1)[0] for p in proc.files if p.startswith(prefix)})
        if not names and prefix != "/":
            out.err(f"ls: cannot access '{directory}': No such file or directory\n")
            status = 2
            continue
        if len(dirs) > 1:
            out.out(("\n" if i else "") + f"{directory}:\n")
        out.out("".join(f"{name}\n" for name in names))
    return status


_SLEEP_UNITS: Final = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _run_sleep(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    """coreutils sleep: the sum of its intervals; `infinity` never ends."""
    if len(argv) < 2:
        out.err("sleep: missing operand\nTry 'sleep --help' for more information.\n")
        return 1
    total = 0.0
    for arg in argv[1:]:
        if arg.lower() in ("inf", "infinity"):
            raise _Forever()
        match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)", arg)
        if match is None:
            out.err(f"sleep: invalid time interval '{arg}'\nTry 'sleep --help' for more information.\n")
            return 1
        total += float(match.group(1)) * _SLEEP_UNITS[match.group(2)]
    proc.elapsed += total
    return 0


def _run_nvidia_entrypoint(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    # The CUDA images' entrypoint prints a banner (not modelled) and execs its arguments.
    if len(argv) < 2:
        return 0
    path = proc.find(argv[1], env)
    if path is None:
        raise _Unsupported(f"unsupported command: {argv[1]} is not in the image (entrypoint exec)")
    return proc.run(path, argv[1:], env, out)


def _run_sshd(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    """An MPIJob worker's `sshd -De`: serves the launcher's mpirun until the pod is deleted."""
    if "-D" not in argv and not any(a.startswith("-D") for a in argv[1:]):
        return 0  # daemonizes
    if any("e" in a for a in argv[1:] if a.startswith("-")):
        out.err("Server listening on 0.0.0.0 port 22.\nServer listening on :: port 22.\n")
    raise _Forever()


def _mig_visible(view: mig_sim.MigView) -> list[mig_sim.MigDeviceUse]:
    """The MIG devices a container sees: its own, or with `sees_all` every one of its GPUs."""
    own = list(view.devices)
    if view.spilled_mib and own:
        first = own[0]
        own[0] = mig_sim.MigDeviceUse(
            first.instance, first.attrs, first.used_mib + view.spilled_mib, first.parent_uuid
        )
    seen = own + (list(view.neighbours) if view.sees_all else [])
    return sorted(seen, key=lambda d: (d.instance.gpu, d.instance.gi))


def _nvidia_smi_mig(proc: _Proc, view: mig_sim.MigView, argv: list[str]) -> str:
    """`nvidia-smi -L` and `nvidia-smi` in a container given MIG devices: its parent GPUs numbered
    from 0, each with the MIG devices it sees numbered from 0 in GI order."""
    visible = _mig_visible(view)
    parents = sorted({d.instance.gpu for d in visible})
    proc.elapsed += 0.5
    if argv[1:] in (["-L"], ["--list-gpus"]):
        lines = []
        for index, physical in enumerate(parents):
            mine = [d for d in visible if d.instance.gpu == physical]
            lines.append(mig_sim.list_line(index, view.gpu_name, mine[0].parent_uuid))
            lines += [
                mig_sim.mig_list_line(d.instance.profile, dev, d.instance.uuid) for dev, d in enumerate(mine)
            ]
        return "".join(lines)
    if argv[1:]:
        raise _Unsupported(
            f"unsupported command: {' '.join(argv)} (nvidia-smi -L and nvidia-smi are simulated)"
        )
    gpus, devices = [], []
    for index, physical in enumerate(parents):
        mine = [d for d in visible if d.instance.gpu == physical]
        bus = f"00000000:{0x18 + 0x10 * physical:02X}:00.0"
        used = sum(d.used_mib for d in mine)
        gpus.append(mig_sim.SmiGpuRow(index, view.gpu_name, bus, True, used, view.full_memory_mib))
        devices += [
            mig_sim.SmiDeviceRow(index, d.instance.gi, 0, dev, d.used_mib, d.attrs)
            for dev, d in enumerate(mine)
        ]
    driver = proc.ctx.driver_version or proc.fleet.profile_of(proc.ctx.node).driver_version
    return mig_sim.render_smi(driver=driver, gpus=gpus, devices=devices, when=proc.ctx.started_at)


def _run_nvidia_smi(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    """`nvidia-smi -L`: the container's GPUs, numbered from 0, with their UUIDs (MIG devices too)."""
    if proc.ctx.mig is not None:
        out.out(_nvidia_smi_mig(proc, proc.ctx.mig, argv))
        return 0
    if argv[1:] not in (["-L"], ["--list-gpus"]):
        raise _Unsupported(f"unsupported command: {' '.join(argv)} (only nvidia-smi -L is simulated)")
    indices = sorted(proc.ctx.gpu_indices)
    name = proc.fleet.profile_of(proc.ctx.node).gpu_product.replace("-", " ")
    for i, uuid in enumerate(gpu_uuids(proc.fleet, proc.ctx.node, indices)):
        out.out(f"GPU {i}: {name} (UUID: {uuid})\n")
    proc.elapsed += 0.5
    return 0


def _run_python(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    """`python3 -c SCRIPT` for the MIG isolation probes' two scripts (fleetval.mig.isolation), on the
    MIG devices the container was given; any other Python exits 2 (not simulated)."""
    # Compared without the final newline: the KubernetesPodOperator renders env values with Jinja,
    # which drops it (Python runs the script the same).
    script = argv[2].rstrip("\n") if len(argv) >= 3 and argv[1] == "-c" else None
    view = proc.ctx.mig
    if script not in (WORKLOAD_SCRIPT.rstrip("\n"), FILL_SCRIPT.rstrip("\n")):
        raise _Unsupported(
            f"unsupported command: {argv[0]} (only fleetval's MIG probe scripts are simulated)"
        )
    if view is None or not view.devices:
        raise _Unsupported(f"unsupported command: {argv[0]} -c <MIG probe> without a MIG device")
    proc.elapsed += 15.0  # the interpreter, PyTorch and a CUDA context
    if script == FILL_SCRIPT.rstrip("\n"):
        listing = _nvidia_smi_mig(proc, view, ["nvidia-smi", "-L"])
        out.out(mig_sim.fill_lines(listing, [(d.instance.uuid, d.attrs.memory_mib) for d in view.devices]))
        proc.elapsed += 5.0
        raise _Forever()  # holds the memory until the pod is deleted
    own = view.devices[0]
    total = own.attrs.memory_mib
    free = max(0, total - mig_sim.IDLE_MIB - mig_sim.CONTEXT_MIB - view.spilled_mib)
    tflops = own.attrs.sm * mig_sim.TFLOPS_PER_SM * (1 + proc.rng.uniform(-0.01, 0.01))
    out.out(
        mig_sim.workload_lines(
            name=view.gpu_name + f" MIG {own.instance.profile}",
            sm=own.attrs.sm,
            total_mib=total,
            free_mib=free,
            alloc_ok=True,
            tflops=tflops,
        )
    )
    proc.elapsed += 10.0
    return 0


# ---------------------------------------------------------------------------------------------
# DCGM tools


def _run_hostengine(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    foreground = False
    port = DCGM_PORT
    args = argv[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-n", "--no-daemon"):
            foreground = True
        elif arg in ("-p", "--port") and i + 1 < len(args):
            port = int(args[i + 1])
            i += 1
        elif arg in (
            "-b",
            "--bind-interface",
            "--log-level",
            "-f",
            "--log-filename",
            "--service-account",
        ) or arg in ("--denylist-modules", "--home-dir", "--pid"):
            i += 1
        else:
            raise _Unsupported(f"unsupported command: {' '.join(argv)}")
        i += 1
    if proc.hostengine_pid is not None:
        out.out(f"Host engine already running with pid {proc.hostengine_pid}\n")
        return 1
    if not proc.ctx.gpu_indices:
        # Without GPUs the toolkit mounts no NVML: DCGM fails to initialize (logged to syslog).
        proc.elapsed += 1.0
        return 255
    version = _dcgm_version(proc)
    proc.hostengine_pid = proc.pid()
    proc.elapsed += 2.0
    out.out(f"Started host engine version {version} using port number: {port} \n")
    if foreground:
        raise _Forever()
    return 0


def _dcgm_version(proc: _Proc) -> str:
    """The DCGM release the container runs: its image's (the fleet profile's major otherwise)."""
    return proc.image.tool_version or DCGM_VERSIONS[dcgm_major(proc.fleet, proc.ctx.node)]


def _run_dcgmi(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    args = argv[1:]
    if args == ["--version"]:  # TCLAP's built-in switch (StdOutput::version); needs no host engine
        out.out(f"\ndcgmi  version: {_dcgm_version(proc)}\n\n")
        return 0
    if not args or args[0] != "diag":
        raise _Unsupported(f"unsupported command: {' '.join(argv)} (only dcgmi diag is simulated)")
    level: int | None = None
    fmt = "text"
    i = 1
    while i < len(args):
        arg = args[i]
        if arg in ("-r", "--run") and i + 1 < len(args):
            if args[i + 1] not in ("1", "2", "3", "4"):
                raise _Unsupported(f"unsupported command: {' '.join(argv)} (only run levels 1-4)")
            level = int(args[i + 1])
            i += 1
        elif arg in ("-j", "--json"):
            fmt = "json"
        else:
            raise _Unsupported(f"unsupported command: {' '.join(argv)}")
        i += 1
    if level is None:
        raise _Unsupported(f"unsupported command: {' '.join(argv)} (dcgmi diag needs -r)")
    if proc.hostengine_pid is None:
        proc.elapsed += 0.1
        out.out("Error: unable to establish a connection to the specified host: localhost\n")
        out.out("Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
        return _DCGM_EXIT_NO_CONNECTION
    ctx = proc.ctx

    def diag(output: str) -> str:
        return dcgm_report(
            proc.fleet,
            ctx.node,
            level,
            gpu_indices=ctx.gpu_indices,
            fmt=output,
            driver_version=ctx.driver_version,
            exporter_running=ctx.exporter_running,
            dcgm_version=_dcgm_version(proc),
        )

    report = diag(fmt)
    as_json = report if fmt == "json" else diag("json")
    proc.elapsed += DCGM_DIAG_SECONDS[level]
    out.out(report)
    return dcgm_exit_code(as_json)


# ---------------------------------------------------------------------------------------------
# nccl-tests and mpirun


@dataclass(slots=True)
class _NcclArgs:
    collective: str
    ngpus: int = 1
    nthreads: int = 1
    min_bytes: int = 32 << 20
    max_bytes: int = 32 << 20
    step_factor: int | None = None
    timeout_s: int = 0


_NCCL_LONG: Final = {
    "nthreads": "t",
    "ngpus": "g",
    "minbytes": "b",
    "maxbytes": "e",
    "stepfactor": "f",
    "timeout": "T",
    "check": "c",
    "stepbytes": "i",
    "iters": "n",
    "warmup_iters": "w",
    "op": "o",
    "datatype": "d",
    "root": "r",
    "blocking": "z",
}


def _parse_size(text: str) -> int | None:
    """nccl-tests `parsesize`: a count with an optional K/M/G (powers of 1024) suffix."""
    match = re.fullmatch(r"(\d+)([kKmMgG]?).*", text)
    if match is None:
        return None
    return int(match.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2).lower()]


def _nccl_args(argv: list[str]) -> _NcclArgs:
    name = posixpath.basename(argv[0])
    collective = name.removesuffix("_perf")
    try:
        normalize_collective(collective)
    except ValueError:
        raise _Unsupported(
            f"unsupported command: {argv[0]} (the simulator has no {collective} model)"
        ) from None
    parsed = _NcclArgs(collective)
    args = argv[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            key, _, value = arg[2:].partition("=")
            flag = _NCCL_LONG.get(key, "?")
            if not value and i + 1 < len(args):
                value = args[i + 1]
                i += 1
        elif re.fullmatch(r"-[A-Za-z].*", arg):
            flag, value = arg[1], arg[2:]
            if not value and i + 1 < len(args):
                value = args[i + 1]
                i += 1
        else:
            raise _Unsupported(f"unsupported command: {' '.join(argv)}")
        i += 1
        if flag == "g":
            parsed.ngpus = int(value)
        elif flag == "t":
            parsed.nthreads = int(value)
        elif flag in ("b", "e"):
            size = _parse_size(value)
            if size is None:
                raise _Unsupported(f"unsupported command: {' '.join(argv)} (size {value!r})")
            if flag == "b":
                parsed.min_bytes = size
            else:
                parsed.max_bytes = size
        elif flag == "f":
            parsed.step_factor = int(value)
        elif flag == "T":
            parsed.timeout_s = int(value)
        elif flag == "c" and value in ("0", "1"):
            pass
        else:
            raise _Unsupported(f"unsupported command: {' '.join(argv)} (option -{flag})")
    if parsed.nthreads != 1:
        raise _Unsupported(f"unsupported command: {' '.join(argv)} (only -t 1)")
    if parsed.step_factor != 2 and parsed.min_bytes != parsed.max_bytes:
        raise _Unsupported(f"unsupported command: {' '.join(argv)} (only -f 2 size steps)")
    return parsed


_MPIRUN_FOOTER: Final = (
    "-------------------------------------------------------\nPrimary job  terminated normally"
)


def _mpirun_failure(rng: random.Random, exit_code: int) -> str:
    return "\n".join([*mpirun_abort_lines(rng, exit_code), ""])


def _nccl_debug(text: str, level: str) -> str:
    """What NCCL prints at `NCCL_DEBUG=level`: INFO lines only at INFO/TRACE, WARN lines from
    WARN up, the version line from VERSION up (nothing when unset)."""
    level = level.upper()
    if level in ("INFO", "TRACE"):
        return text
    kept: list[str] = []
    for line in text.split("\n"):
        if " NCCL INFO " in line:
            continue
        if " NCCL WARN " in line and level != "WARN":
            if kept and not kept[-1]:
                kept.pop()  # NCCL starts a WARN message with a newline: it goes with it
            continue
        if line.startswith("NCCL version ") and level not in ("VERSION", "WARN"):
            continue
        kept.append(line)
    return "\n".join(kept)


_NCCL_TESTS_VERSION_LINE: Final = re.compile(r"# nccl-tests version (\d+)\.(\d+)\.(\d+)")


def nccl_wrong_results_exit_code(output: str) -> int:
    """What nccl-tests exits with for wrong results, by the version its output prints
    (NVIDIA/nccl-tests `src/common.cu` run() and `src/common.h` testResult_t at each tag):
    `exit(EXIT_FAILURE)` = 1 up to v2.17.2 (and with no version line: the line came in v2.17.4),
    testNumResults = 6 in v2.17.3-v2.17.6, testNumResults = 7 from v2.17.7 (testInvalidUsage = 6
    was added before it)."""
    found = _NCCL_TESTS_VERSION_LINE.search(output)
    if found is None:
        return 1
    version = tuple(int(p) for p in found.groups())
    if version >= (2, 17, 7):
        return 7
    return 6 if version >= (2, 17, 3) else 1


def _nccl_exit_code(output: str) -> int:
    if ": Test timeout (" in output:
        return 4
    if ": Test NCCL failure " in output:
        return 3
    if re.search(r"# Out of bounds values : \d+ FAILED", output):
        return nccl_wrong_results_exit_code(output)
    return 0


def _nccl_duration(output: str, nnodes: int, timeout_s: int) -> float:
    try:
        run = parse_nccl(output)
    except ParseError:
        return _NCCL_INIT_SECONDS
    table = sum((r.time_oop or 0.0) + (r.time_ip or 0.0) for r in run.rows) * 1e-6 * _NCCL_ITERS
    waited = float(timeout_s) if ": Test timeout (" in output else 0.0
    return _NCCL_INIT_SECONDS + 5.0 * (nnodes - 1) + table + waited


def _nccl_header(full: str) -> list[str]:
    """The lines nccl-tests prints before NCCL starts (through the device list)."""
    lines = full.split("\n")
    end = max(i for i, line in enumerate(lines) if line.startswith("#  Rank") or line == "# Using devices")
    return lines[: end + 1]


def _shm_pool() -> int:
    """/dev/shm one rank's proxy-ops pool takes: the segment and its reference count, in pages."""
    return -(-(_NCCL_POOL_BYTES + 4) // _PAGE) * _PAGE


def _nccl_shm_failure(proc: _Proc, full: str, host: str, ngpus: int, shm: int) -> str:
    """NCCL 2.21.5 running out of /dev/shm while each rank creates its proxy-ops pool."""
    rank = min(ngpus - 1, shm // _shm_pool())  # the first rank whose pool does not fit
    lines = _nccl_header(full)
    found = re.search(r"Pid +(\d+)", full)
    pid = int(found.group(1)) if found else proc.pid()
    for line in full.split("\n")[len(lines) :]:
        lines.append(line)
        if "Init START" in line and f" rank {rank} " in line:
            break
    tid = pid + 40 + rank
    alphabet = string.ascii_letters + string.digits
    shm_path = "/dev/shm/nccl-" + "".join(proc.rng.choice(alphabet) for _ in range(6))
    who = f"{host}:{pid}:{tid} [{rank}]"
    segment = f"Error while creating shared memory segment {shm_path} (size {_NCCL_POOL_BYTES})"
    real_size = _NCCL_POOL_BYTES + 4  # the segment plus its reference count
    failure = "unhandled system error (run with NCCL_DEBUG=INFO for details)"
    lines += [
        "",
        f"{who} misc/shmutils.cc:72 NCCL WARN Error: failed to extend {shm_path} to {real_size} bytes",
        "",
        f"{who} misc/shmutils.cc:113 NCCL WARN {segment}",
        f"{who} NCCL INFO proxy.cc:1257 -> 2",
        f"{who} NCCL INFO proxy.cc:1320 -> 2",
        f"{host}: Test NCCL failure common.cu:951 '{failure} / {segment}'",
        f" .. {host} pid {pid}: Test failure common.cu:842",
        "",
    ]
    return "\n".join(lines)


def _cuda_device_failure(full: str, host: str, pid: int) -> str:
    lines = _nccl_header(full)
    device_lines = [i for i, line in enumerate(lines) if line.startswith("#  Rank")]
    if device_lines:
        lines = lines[: device_lines[0]]  # the device list is printed only once all devices answered
    lines += [
        f"{host}: Test CUDA failure common.cu:892 'invalid device ordinal'",
        f" .. {host} pid {pid}: Test failure common.cu:842",
        "",
    ]
    return "\n".join(lines)


def _hung(output: str, host: str) -> str:
    """A hang without `-T`: the output stops at the row whose collective never completes."""
    marker = f"{host}: Test timeout ("
    lines = output.split("\n")
    for i, line in enumerate(lines):
        if marker in line:
            return "\n".join([*lines[:i], line[: line.index(marker)]])
    return output


def _run_nccl(
    proc: _Proc,
    argv: list[str],
    env: dict[str, str],
    out: _Out,
    *,
    nodes: Sequence[str] | None = None,
    node_gpus: Sequence[int] | None = None,
    procs_per_node: int = 1,
    local: bool = False,
) -> int:
    """A `<collective>_perf` run: on this container's node, or under mpirun on `nodes`,
    `procs_per_node` processes per node, each driving `-g` GPUs."""
    args = _nccl_args(argv)
    under_mpirun = nodes is not None
    group = list(nodes) if nodes is not None else [proc.ctx.node]
    visible = list(node_gpus) if node_gpus is not None else [len(proc.ctx.gpu_indices)]
    ranks = args.ngpus * args.nthreads * procs_per_node
    repeat = _seed(proc.ctx.salt, "repeat") % 3
    try:
        full = nccl_run(
            proc.fleet,
            group,
            ranks,
            args.collective,
            repeat=repeat,
            salt=proc.ctx.salt,
            env=env,
            timeout_s=args.timeout_s or 600,
            min_bytes=args.min_bytes,
            max_bytes=args.max_bytes,
            gpus_per_process=args.ngpus * args.nthreads,
        )
    except SpecError as exc:
        raise _Unsupported(f"unsupported command: {' '.join(argv)} ({exc})") from None
    level = env.get("NCCL_DEBUG", "")
    short = [i for i, count in enumerate(visible) if count < ranks]
    if short:
        host = group[short[0]]
        text = _cuda_device_failure(full, host, proc.pid() * 10)
        code = 2
        proc.elapsed += 3.0
    elif (
        (local or not under_mpirun)  # this pod's own /dev/shm (a worker's is assumed large enough)
        and ranks > 1
        and ranks * _shm_pool() > (proc.ctx.shm_bytes or DEFAULT_SHM_BYTES)
    ):
        text = _nccl_shm_failure(proc, full, group[0], ranks, proc.ctx.shm_bytes or DEFAULT_SHM_BYTES)
        code = 3
        proc.elapsed += _NCCL_INIT_SECONDS
    else:
        text = full
        if not under_mpirun and _MPIRUN_FOOTER in text:
            text = text[: text.index(_MPIRUN_FOOTER)]
        code = _nccl_exit_code(text)
        if code == 4 and not args.timeout_s:
            out.out(_nccl_debug(_hung(text, group[0]), level))
            proc.elapsed += _nccl_duration(text, len(group), 0)
            raise _Forever()
        proc.elapsed += _nccl_duration(text, len(group), args.timeout_s)
    if under_mpirun and code and _MPIRUN_FOOTER not in text:
        text = text + _mpirun_failure(proc.rng, code)
    out.out(_nccl_debug(text, level))
    return code


_ROOT_MESSAGE: Final = """\
--------------------------------------------------------------------------
mpirun has detected an attempt to run as root.

Running as root is *strongly* discouraged as any mistake (e.g., in
defining TMPDIR) or bug can result in catastrophic damage to the OS
file system, leaving your system in an unusable state.

We strongly suggest that you run mpirun as a non-root user.

You can override this protection by adding the --allow-run-as-root option
to the cmd line or by setting two environment variables in the following way:
the variable OMPI_ALLOW_RUN_AS_ROOT=1 to indicate the desire to override this
protection, and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 to confirm the choice and
add one more layer of certainty that you want to do so.
We reiterate our advice against doing so - please proceed at your own risk.
--------------------------------------------------------------------------
"""

_SLOTS_MESSAGE: Final = """\
--------------------------------------------------------------------------
There are not enough slots available in the system to satisfy the {np}
slots that were requested by the application:

  {app}

Either request fewer slots for your application, or make more slots
available for use.

A "slot" is the Open MPI term for an allocatable unit where we can
launch a process.  The number of slots available are defined by the
environment in which Open MPI processes are run:

  1. Hostfile, via "slots=N" clauses (N defaults to number of
     processor cores if not provided)
  2. The --host command line parameter, via a ":N" suffix on the
     hostname (N defaults to 1 if not provided)
  3. Resource manager (e.g., SLURM, PBS/Torque, LSF, etc.)
  4. If none of a hostfile, the --host command line parameter, or an
     RM is present, Open MPI defaults to the number of processor cores

In all the above cases, if you want Open MPI to default to the number
of hardware threads instead of the number of processor cores, use the
--use-hwthread-cpus option.

Alternatively, you can use the --oversubscribe option to ignore the
number of available slots when deciding the number of processes to
launch.
--------------------------------------------------------------------------
"""

_NOT_FOUND_MESSAGE: Final = """\
--------------------------------------------------------------------------
mpirun was unable to find the specified executable file, and therefore
did not launch the job.  This error was first reported for process
rank 0; it may have occurred for other processes as well.

NOTE: A common cause for this error is misspelling a mpirun command
      line parameter option (remember that mpirun interprets the first
      unrecognized command line token as the executable).

Node:       {node}
Executable: {app}
--------------------------------------------------------------------------
{np} total processes failed to start
"""

_MPIRUN_VALUE_OPTIONS: Final = frozenset(
    {"--bind-to", "-bind-to", "--map-by", "-map-by", "-H", "--host", "-host", "--hostfile", "-hostfile"}
    | {"--machinefile", "-machinefile", "--rank-by", "-rank-by", "--prefix", "-prefix"}
)


def _slots(env: Mapping[str, str], hosts: str | None) -> int | None:
    """Slots per host: `-H host:N`, else the mpi-operator's OMPI_MCA_orte_set_default_slots
    (its hostfile's `slots=`); None when neither says (OpenMPI would count cores)."""
    if hosts is not None:
        counts = [part.rpartition(":")[2] for part in hosts.split(",")]
        return (
            int(counts[0])
            if all(c.isascii() and c.isdigit() for c in counts) and len(set(counts)) == 1
            else None
        )
    value = env.get("OMPI_MCA_orte_set_default_slots", "")
    return int(value) if value.isascii() and value.isdigit() else None


def _run_mpirun(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    """OpenMPI's mpirun: in an MPIJob launcher over its workers (`ctx.peers`, rank order), else on
    this container's node (`-H localhost:N`). Ranks fill each host's slots in order (or
    `--map-by ppr:K:node`); every host runs the same number of ranks."""
    args = argv[1:]
    np: int | None = None
    allow_root = False
    exported: dict[str, str] = {}
    hosts: str | None = None
    per_node_map: int | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-np", "-n", "--np", "--n", "-c") and i + 1 < len(args):
            if not args[i + 1].isdigit():
                raise _Unsupported(f"unsupported command: {' '.join(argv)} (-np {args[i + 1]})")
            np = int(args[i + 1])
            i += 2
        elif arg in ("--allow-run-as-root", "-allow-run-as-root"):
            allow_root = True
            i += 1
        elif arg == "-x" and i + 1 < len(args):
            key, eq, value = args[i + 1].partition("=")
            if eq:
                exported[key] = value
            elif key in env:
                exported[key] = env[key]
            i += 2
        elif arg in ("-H", "--host", "-host") and i + 1 < len(args):
            hosts = args[i + 1]
            i += 2
        elif arg in ("--map-by", "-map-by") and i + 1 < len(args):
            ppr = re.fullmatch(r"ppr:(\d+):node", args[i + 1])
            per_node_map = int(ppr.group(1)) if ppr else None
            i += 2
        elif arg in _MPIRUN_VALUE_OPTIONS and i + 1 < len(args):
            i += 2
        elif arg in ("--mca", "-mca", "--gmca", "-gmca") and i + 2 < len(args):
            i += 3
        elif arg in ("--oversubscribe", "-oversubscribe"):
            i += 1
        elif arg.startswith("-"):
            raise _Unsupported(f"unsupported command: {' '.join(argv)} (mpirun option {arg})")
        else:
            break
    app = args[i:]
    if not app:
        raise _Unsupported(f"unsupported command: {' '.join(argv)} (no executable)")
    if not allow_root and not (
        env.get("OMPI_ALLOW_RUN_AS_ROOT") == "1" and env.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") == "1"
    ):
        out.err(_ROOT_MESSAGE)
        return 1
    peers = list(proc.ctx.peers)
    local = not peers
    if local:
        peers = [(proc.ctx.node, tuple(proc.ctx.gpu_indices))]
    slots = _slots(env, hosts) or 1
    per_node = per_node_map or slots
    np = len(peers) * per_node if np is None else np
    if np > len(peers) * slots or per_node > slots:
        out.err(_SLOTS_MESSAGE.format(np=np, app=app[0]))
        return 1
    if np % per_node:
        raise _Unsupported(f"unsupported command: {' '.join(argv)} (hosts with unequal rank counts)")
    proc.elapsed += 3.0  # ssh and orted start-up on the workers
    workers = peers[: np // per_node]
    # Ranks run over ssh in the workers: they see only what -x exports, and the image's PATH.
    rank_env = {"PATH": proc.image.env.get("PATH", "")} | exported
    path = proc.find(app[0], rank_env)
    if path is None:
        out.err(_NOT_FOUND_MESSAGE.format(node=workers[0][0], app=app[0], np=np))
        return 1
    if proc.files[path] != "nccl-tests":
        raise _Unsupported(f"unsupported command: {' '.join(app)} under mpirun (only nccl-tests)")
    return _run_nccl(
        proc,
        [app[0], *app[1:]],
        rank_env,
        out,
        nodes=[node for node, _ in workers],
        node_gpus=[len(gpus) for _, gpus in workers],
        procs_per_node=per_node,
        local=local,
    )


# ---------------------------------------------------------------------------------------------
# The shell model


@dataclass(frozen=True, slots=True)
class _Shell:
    """Which shell and how it words its errors."""

    kind: str  # "bash" | "dash" | "ash" (busybox)
    name: str  # $0, as invoked
    bash_version: tuple[int, int]

    def _bash_line(self, line: int) -> int:
        # bash 5.0 numbers the lines of a -c string from 0, 5.1 from 1.
        return line - 1 if self.bash_version < (5, 1) else line

    def error(self, line: int, text: str) -> str:
        """An error the shell itself reports (`internal_error`/`file_error` in bash)."""
        if self.kind == "ash":
            return f"{self.name}: {text}\n"
        if self.kind == "dash":
            return f"{self.name}: {line}: {text}\n"
        n = self._bash_line(line)
        return f"{self.name}: line {n}: {text}\n" if n > 0 else f"{self.name}: {text}\n"

    def builtin_error(self, line: int, text: str) -> str:
        if self.kind == "ash":
            return f"{self.name}: {text}\n"
        if self.kind == "dash":
            return f"{self.name}: {line}: {text}\n"
        return f"{self.name}: line {self._bash_line(line)}: {text}\n"

    def not_found(self, line: int, command: str) -> str:
        if self.kind in ("dash", "ash"):
            return self.error(line, f"{command}: not found")
        if "/" in command:
            return self.error(line, f"{command}: No such file or directory")
        return self.error(line, f"{command}: command not found")

    def syntax_error(self, line: int, token: str | None, source: str) -> str:
        if self.kind == "ash":
            what = f'"{token}"' if token else "end of file"
            return f"{self.name}: syntax error: unexpected {what}\n"
        if self.kind == "dash":
            what = f'"{token}" unexpected' if token else "end of file unexpected"
            return f"{self.name}: {line}: Syntax error: {what}\n"
        n = self._bash_line(line)
        if token is None:
            return f"{self.name}: -c: line {n}: syntax error: unexpected end of file\n"
        return (
            f"{self.name}: -c: line {n}: syntax error near unexpected token `{token}'\n"
            f"{self.name}: -c: line {n}: `{source}'\n"
        )


@dataclass(slots=True)
class _Word:
    parts: list[tuple[str, str, bool]]  # ("lit" | "var", text, quoted)
    line: int

    def literal(self) -> str | None:
        """The word's text when it is a plain unquoted literal (a command or keyword name)."""
        if len(self.parts) == 1 and self.parts[0][0] == "lit" and not self.parts[0][2]:
            return self.parts[0][1]
        return None

    def source(self) -> str:
        return "".join(text if kind == "lit" else "$" + text for kind, text, _ in self.parts)


@dataclass(frozen=True, slots=True)
class _Redir:
    fd: int | None  # None: both stdout and stderr (&>)
    target: str  # "/dev/null", or "&1" / "&2"


@dataclass(slots=True)
class _Command:
    words: list[_Word]
    redirs: list[_Redir]
    line: int


@dataclass(slots=True)
class _AndOr:
    commands: list[_Command]
    ops: list[str]  # "&&" / "||" between commands
    background: bool = False


class _SyntaxError(Exception):
    def __init__(self, line: int, token: str | None) -> None:
        super().__init__(token)
        self.line = line
        self.token = token


_KEYWORDS: Final = frozenset(
    _words("if then else elif fi for while until do done case esac function select time ! { } [[ ]] coproc")
)
_UNSUPPORTED_BUILTINS: Final = frozenset(
    _words(
        "cd export unset source . eval trap wait read shift local declare typeset readonly "
        "test [ printf alias unalias ulimit umask command builtin type hash pushd popd dirs "
        "let getopts kill jobs fg bg disown shopt enable caller return break continue times"
    )
)
_OPERATORS: Final = ("&&", "||", ";", "&", "\n")


def _unsupported(what: str) -> _Unsupported:
    return _Unsupported(f"unsupported shell construct: {what}")


def _lex(script: str) -> list[_Word | _Redir | tuple[str, int]]:
    """Split a -c script into words, redirections and operators; reject what the model lacks."""
    tokens: list[_Word | _Redir | tuple[str, int]] = []
    i, line, n = 0, 1, len(script)
    word: _Word | None = None

    def flush() -> None:
        nonlocal word
        if word is not None:
            tokens.append(word)
            word = None

    def add(kind: str, text: str, quoted: bool) -> None:
        nonlocal word
        if word is None:
            word = _Word([], line)
        if kind == "lit" and word.parts and word.parts[-1][0] == "lit" and word.parts[-1][2] == quoted:
            word.parts[-1] = ("lit", word.parts[-1][1] + text, quoted)
        else:
            word.parts.append((kind, text, quoted))

    def dollar(at: int, quoted: bool) -> int:
        """Parse a `$` expansion at `at`; returns the index after it."""
        nxt = script[at + 1] if at + 1 < n else ""
        if nxt == "(":
            raise _unsupported("$(( ))" if script.startswith("((", at + 1) else "$( )")
        if nxt == "{":
            end = script.find("}", at + 2)
            inner = script[at + 2 : end] if end != -1 else ""
            if end == -1 or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@?#]", inner):
                raise _unsupported("${...} expansion")
            add("var", inner, quoted)
            return end + 1
        match = re.match(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@?#]", script[at + 1 :])
        if match is None:
            if nxt in ("$", "!", "-", "*"):
                raise _unsupported(f"${nxt}")
            add("lit", "$", quoted)
            return at + 1
        add("var", match.group(0), quoted)
        return at + 1 + match.end()

    while i < n:
        ch = script[i]
        if ch == "\\":
            if i + 1 < n and script[i + 1] == "\n":
                i += 2
                line += 1
                continue
            if i + 1 < n:
                add("lit", script[i + 1], True)
            i += 2
            continue
        if ch == "'":
            end = script.find("'", i + 1)
            if end == -1:
                raise _SyntaxError(line, None)
            text = script[i + 1 : end]
            add("lit", text, True)
            line += text.count("\n")
            i = end + 1
            continue
        if ch == '"':
            i += 1
            if word is None:
                word = _Word([], line)
            add("lit", "", True)
            while i < n and script[i] != '"':
                c = script[i]
                if c == "\\" and i + 1 < n and script[i + 1] in '$`"\\\n':
                    if script[i + 1] == "\n":
                        line += 1
                    else:
                        add("lit", script[i + 1], True)
                    i += 2
                elif c == "$":
                    i = dollar(i, True)
                elif c == "`":
                    raise _unsupported("`...` command substitution")
                else:
                    if c == "\n":
                        line += 1
                    add("lit", c, True)
                    i += 1
            if i >= n:
                raise _SyntaxError(line, None)
            i += 1
            continue
        if ch == "$":
            i = dollar(i, False)
            continue
        if ch == "`":
            raise _unsupported("`...` command substitution")
        if ch == "#" and word is None:
            while i < n and script[i] != "\n":
                i += 1
            continue
        if ch in " \t":
            flush()
            i += 1
            continue
        if ch in "<>" or (ch == "&" and script.startswith("&>", i)):
            fd: int | None = 1
            if ch == "<":
                raise _unsupported("< redirection")
            literal = word.literal() if word is not None else None
            if literal is not None and literal.isdigit():
                fd = int(literal)
                word = None
            flush()
            if ch == "&":
                fd = None
                i += 1
            i += 1
            if i < n and script[i] == ">":
                i += 1  # >> appends; the targets modelled make it the same
            if i < n and script[i] == "&":
                m = re.match(r"&([0-9]+|-)", script[i:])
                if m is None or m.group(1) not in ("1", "2"):
                    raise _unsupported(f"redirection >{script[i : i + 3]}")
                tokens.append(_Redir(fd, "&" + m.group(1)))
                i += m.end()
                continue
            while i < n and script[i] in " \t":
                i += 1
            m = re.match(r"[^\s;&|<>()]+", script[i:])
            target = m.group(0) if m else ""
            if target != "/dev/null":
                raise _unsupported(f"redirection to {target or 'nothing'}")
            tokens.append(_Redir(fd, target))
            i += len(target)
            continue
        if ch == "|" and not script.startswith("||", i):
            raise _unsupported("| pipe")
        if ch in "()":
            raise _unsupported("( ) subshell")
        op = next((o for o in _OPERATORS if script.startswith(o, i)), None)
        if op is not None:
            flush()
            tokens.append((op, line))
            if op == "\n":
                line += 1
            i += len(op)
            continue
        if ch in "*?[" or (ch == "~" and word is None):
            raise _unsupported(f"globbing or tilde expansion ({ch})")
        add("lit", ch, False)
        i += 1
    flush()
    return tokens


def _parse(script: str) -> list[_AndOr]:
    statements: list[_AndOr] = []
    current: _AndOr | None = None
    command: _Command | None = None
    pending = False  # an && / || waiting for its right-hand command
    last_line = 1
    for token in _lex(script):
        if isinstance(token, _Word | _Redir):
            if command is None:
                command = _Command([], [], token.line if isinstance(token, _Word) else last_line)
            if isinstance(token, _Word):
                command.words.append(token)
                last_line = token.line
            else:
                command.redirs.append(token)
            continue
        op, line = token
        last_line = line
        if command is not None:
            if current is None:
                current = _AndOr([], [])
            current.commands.append(command)
            command = None
            pending = False
        elif op == "\n" and (pending or current is None):
            continue
        elif op in ("&&", "||", ";", "&") or pending:
            raise _SyntaxError(line, "newline" if op == "\n" else op)
        if op in ("&&", "||"):
            assert current is not None
            current.ops.append(op)
            pending = True
        elif current is not None:
            current.background = op == "&"
            statements.append(current)
            current = None
    if command is not None:
        if current is None:
            current = _AndOr([], [])
        current.commands.append(command)
        pending = False
    if pending:
        raise _SyntaxError(last_line, None)
    if current is not None:
        statements.append(current)
    for statement in statements:
        for cmd in statement.commands:
            _check_command(cmd)
    return statements


def _check_command(cmd: _Command) -> None:
    if not cmd.words:
        return
    name = cmd.words[0].literal()
    if name is None:
        return
    if name in _KEYWORDS:
        raise _unsupported(name)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", name) or (
        cmd.words[0].parts and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=", cmd.words[0].parts[0][1])
    ):
        raise _unsupported("variable assignment")
    if name in _UNSUPPORTED_BUILTINS:
        raise _unsupported(name)
    if name == "exec" and len(cmd.words) == 1:
        raise _unsupported("exec without a command")


class _Script:
    """One run of a -c script."""

    def __init__(
        self, proc: _Proc, shell: _Shell, params: list[str], env: dict[str, str], out: _Out, errexit: bool
    ) -> None:
        self.proc = proc
        self.shell = shell
        self.params = params
        self.env = env
        self.out = out
        self.errexit = errexit
        self.status = 0

    def lookup(self, name: str) -> str:
        if name == "?":
            return str(self.status)
        if name == "#":
            return str(len(self.params))
        if name == "0":
            return self.shell.name
        if name.isdigit():
            index = int(name)
            return self.params[index - 1] if index <= len(self.params) else ""
        return self.env.get(name, "")

    def expand(self, word: _Word) -> list[str]:
        """Parameter expansion and field splitting of one word."""
        fields: list[str] = []
        current = ""
        real = False  # the current field holds something that makes it a field
        for kind, text, quoted in word.parts:
            if kind == "lit":
                current += text
                real = real or quoted or bool(text)
            elif text == "@":
                values = list(self.params)
                if not values:
                    continue
                pieces = values if quoted else [p for v in values for p in v.split()]
                if not pieces:
                    continue
                current += pieces[0]
                for piece in pieces[1:]:
                    fields.append(current)
                    current = piece
                real = True
            else:
                value = self.lookup(text)
                if quoted:
                    current += value
                    real = True
                    continue
                pieces = value.split()
                if not pieces:
                    continue
                if value[0].isspace() and real:
                    fields.append(current)
                    current = ""
                current += pieces[0]
                for piece in pieces[1:]:
                    fields.append(current)
                    current = piece
                real = True
                if value[-1].isspace():
                    fields.append(current)
                    current, real = "", False
        if real:
            fields.append(current)
        return fields

    def run(self, statements: Sequence[_AndOr]) -> int:
        for statement in statements:
            if statement.background:
                saved = self.proc.elapsed
                with contextlib.suppress(_Forever):
                    self.and_or(statement, background=True)
                self.proc.elapsed = saved  # it runs beside what follows
                self.status = 0
                continue
            self.and_or(statement, background=False)
        return self.status

    def and_or(self, statement: _AndOr, *, background: bool) -> None:
        last = 0
        self.status = self.command(statement.commands[0])
        for index, (op, command) in enumerate(zip(statement.ops, statement.commands[1:], strict=True), 1):
            if (op == "&&") == (self.status == 0):
                self.status = self.command(command)
                last = index
        if self.errexit and not background and self.status != 0 and last == len(statement.commands) - 1:
            raise _Exit(self.status)

    def redirected(self, redirs: Sequence[_Redir]) -> _Out:
        fds = dict(self.out.fds)
        for redir in redirs:
            target: Stream = None if redir.target == "/dev/null" else fds.get(int(redir.target[1:]))
            if redir.fd is None:
                fds[1] = fds[2] = target
            else:
                fds[redir.fd] = target
        return _Out(self.proc, fds)

    def command(self, cmd: _Command) -> int:
        argv = [f for word in cmd.words for f in self.expand(word)]
        out = self.redirected(cmd.redirs)
        if not argv:
            return 0
        name = argv[0]
        if name in (":", "true"):
            return 0
        if name == "false":
            return 1
        if name == "echo":
            out.out(_echo_text(argv[1:], interprets_escapes=self.shell.kind == "dash"))
            return 0
        if name == "set":
            self.set_options(argv)
            return 0
        if name == "exit":
            raise _Exit(self.exit_status(argv, cmd.line, out))
        if name == "exec":
            raise _Exit(self.external(argv[1:], cmd.line, out, exec_builtin=True))
        if name in _UNSUPPORTED_BUILTINS:
            raise _unsupported(name)
        return self.external(argv, cmd.line, out, exec_builtin=False)

    def exit_status(self, argv: list[str], line: int, out: _Out) -> int:
        if len(argv) < 2:
            return self.status
        if re.fullmatch(r"[+-]?\d+", argv[1]):
            return int(argv[1]) & 0xFF
        if self.shell.kind == "dash":
            out.err(self.shell.builtin_error(line, f"exit: Illegal number: {argv[1]}"))
        else:
            out.err(self.shell.builtin_error(line, f"exit: {argv[1]}: numeric argument required"))
        return 2

    def set_options(self, argv: list[str]) -> None:
        args = argv[1:]
        i = 0
        while i < len(args):
            arg = args[i]
            match = re.fullmatch(r"([-+])([eo]+)", arg)
            if match is None:
                raise _unsupported(f"set {' '.join(args)}")
            for flag in match.group(2):
                if flag == "e":
                    self.errexit = match.group(1) == "-"
                else:
                    i += 1
                    option = args[i] if i < len(args) else ""
                    if option == "errexit":
                        self.errexit = match.group(1) == "-"
                    elif option != "pipefail":
                        raise _unsupported(f"set {' '.join(args)}")
            i += 1

    def external(self, argv: list[str], line: int, out: _Out, *, exec_builtin: bool) -> int:
        path = self.proc.find(argv[0], self.env)
        if path is None:
            if exec_builtin and (self.shell.kind != "bash" or "/" not in argv[0]):
                out.err(self.shell.builtin_error(line, f"exec: {argv[0]}: not found"))
            else:
                out.err(self.shell.not_found(line, argv[0]))
            return 127
        return self.proc.run(path, argv, dict(self.env), out)


def _shell_program(kind: str) -> Program:
    def run(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
        return _run_shell(proc, argv, env, out, kind=kind)

    return run


def _run_shell(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out, *, kind: str) -> int:
    """`bash -c SCRIPT [NAME [ARGS...]]` / `sh -c ...` with the options probes use."""
    args = argv[1:]
    errexit = False
    command_mode = False
    i = 0
    while i < len(args) and args[i].startswith(("-", "+")) and args[i] not in ("-", "--"):
        match = re.fullmatch(r"([-+])([ceo]+)", args[i])
        if match is None:
            raise _unsupported(f"{argv[0]} {args[i]}")
        for flag in match.group(2):
            if flag == "c":
                command_mode = True
            elif flag == "e":
                errexit = match.group(1) == "-"
            else:
                i += 1
                if i >= len(args) or args[i] not in ("pipefail", "errexit"):
                    raise _unsupported(f"{argv[0]} -o {args[i] if i < len(args) else ''}")
                errexit = errexit or args[i] == "errexit"
        i += 1
    if i < len(args) and args[i] == "--":
        i += 1
    if not command_mode:
        raise _unsupported(f"{argv[0]} without -c (a script file or stdin)")
    if i >= len(args):
        if kind in ("dash", "ash"):
            out.err(f"{argv[0]}: 0: -c requires an argument\n")
        else:
            out.err(f"{argv[0]}: -c: option requires an argument\n")
        return 2
    script = args[i]
    name = args[i + 1] if i + 1 < len(args) else argv[0]
    shell = _Shell(kind, name, proc.image.bash_version)
    try:
        statements = _parse(script)
    except _SyntaxError as exc:
        source = script.split("\n")[exc.line - 1] if exc.line - 1 < len(script.split("\n")) else ""
        out.err(shell.syntax_error(exc.line, exc.token, source))
        return 2
    runner = _Script(proc, shell, list(args[i + 2 :]), env, out, errexit)
    try:
        return runner.run(statements)
    except _Exit as done:
        return done.status


# ---------------------------------------------------------------------------------------------
# The runtime


_PROGRAMS: Final[dict[str, Program]] = {
    "bash": _shell_program("bash"),
    "dash": _shell_program("dash"),
    "ash": _shell_program("ash"),
    "true": _run_true,
    "false": _run_false,
    "echo": _run_echo,
    "cat": _run_cat,
    "ls": _run_ls,
    "sleep": _run_sleep,
    "nvidia-entrypoint": _run_nvidia_entrypoint,
    "sshd": _run_sshd,
    "nvidia-smi": _run_nvidia_smi,
    "python": _run_python,
    "nv-hostengine": _run_hostengine,
    "dcgmi": _run_dcgmi,
    "nccl-tests": _run_nccl,
    "mpirun": _run_mpirun,
}


class _StartError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _runc_not_found(name: str) -> str:
    detail = (
        f'exec: "{name}": stat {name}: no such file or directory'
        if "/" in name
        else f'exec: "{name}": executable file not found in $PATH'
    )
    return (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
        f"runc create failed: unable to start container process: {detail}: unknown"
    )


def _exec_entrypoint(proc: _Proc, argv: list[str], env: dict[str, str], out: _Out) -> int:
    """runc execs the container's first argument (execvp with the container's PATH)."""
    path = proc.find(argv[0], env)
    if path is None:
        raise _StartError(_runc_not_found(argv[0]))
    return proc.run(path, argv, env, out)


def container_argv(image: Image, command: Sequence[str], args: Sequence[str]) -> list[str]:
    """What the kubelet runs: `command` replaces ENTRYPOINT (and drops CMD), `args` replaces
    CMD."""
    if command:
        return [*command, *args]
    return [*image.entrypoint, *(args if args else image.cmd)]


def run_container(
    image: str, command: list[str], args: list[str], ctx: ContainerContext, fleet: FleetSpec
) -> ContainerResult:
    """Run one container to its end (see the module doc and `ContainerResult`)."""
    found = lookup_image(image)
    if found is None:
        ref = normalize_image(image)
        return ContainerResult(
            "",
            0,
            NEVER,
            reason="ErrImagePull",
            message=(
                f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": '
                f'failed to resolve reference "{ref}": {ref}: not found'
            ),
        )
    argv = container_argv(found, command, args)
    if not argv:
        return ContainerResult("", 0, NEVER, reason="CreateContainerError", message="no command specified")
    proc = _Proc(found, ctx, fleet)
    env = dict(found.env) | dict(ctx.env)
    out = _Out(proc)
    try:
        code = _exec_entrypoint(proc, argv, env, out)
    except _StartError as failed:
        return ContainerResult("", 128, 0.0, reason="StartError", message=failed.message)
    except _Forever:
        return ContainerResult("".join(proc.log), 137, NEVER, reason="Error")
    except _Unsupported as unsupported:
        proc.write("err", f"fleetval-sim: {unsupported}\n")
        code = 2
    except _Exit as done:
        code = done.status
    code &= 0xFF
    return ContainerResult(
        "".join(proc.log), code, proc.elapsed, reason="Completed" if code == 0 else "Error"
    )
