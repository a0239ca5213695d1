"""The simulator's nccl-tests stdout, with NCCL_DEBUG=INFO lines, in the real current formats.

Formats copied from real outputs (tests/fixtures/nccl, provenance in SOURCES.md): the nccl-tests
2.20 header and `#wrong` table widths (NVIDIA/dgx-spark-playbooks PR #103), footer and `%g`
average (NVIDIA/nccl-tests common.cu), harness lines `<host>: Test NCCL failure <file>:<line>
'<nccl error> / <last error>'` + ` .. <host> pid N: Test failure ...` (nccl-tests #322) and
`<host>: Test timeout (Ns) common.cu:N` (common.cu, `-T`), NCCL INFO lines `NET/IB : Using
[0]mlx5_0:1/IB ... [RO]; OOB eth0:...`, `Using network IB|Socket`, `Failed to open
libibverbs.so[.1]`, `Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA`, `via
P2P/CUMEM/read`, `comm 0x.. rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0`,
`24 coll channels, 24 collnet channels, 0 nvls channels, ...`, and the 2.19+ IB completion
warning `NET/IB : Got completion from peer <ip><port> with status=12 opcode=129 len=0 vendor err
129 (Recv)`. Abbreviated output::

    # nccl-tests version 2.20.0 (b4d5bee) nccl-headers=22105 nccl-library=22105
    # Collective test starting: all_reduce_perf
    ...
    r01-n01:41213:41230 [0] NCCL INFO Using network IB
    ...
      8589934592    2147483648     float     sum      -1    47535  180.71  338.82       0 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 112.418

The numbers are a seeded model: time(S) = latency + k·ln(1 + S/1 MiB) + S/algbw_peak (small
sizes latency-bound, ~90 % of peak at 1 GiB, ~98 % at 8 GiB, as the real 2-node H100 tables
show), with algbw_peak calibrated so that the run's headline busbw (mean out-of-place busbw over
sizes ≥ 1 GiB, the judge's statistic) equals `busbw_gbps` before noise; run-to-run noise has
coefficient of variation `cv`, per-row jitter 0.3 %.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Final

from fleetval.nccl.parser import busbw_factor, normalize_collective

TRANSPORTS: Final = ("IB", "RoCE", "Socket", "NVLink", "P2P", "SHM", "NVLS")
ERRORS: Final = ("ib_completion", "hang", "wrong")
_NETWORKS: Final = ("IB", "RoCE", "Socket")
_REDUCING: Final = frozenset({"all_reduce", "reduce_scatter", "reduce"})
_ROOTED: Final = frozenset({"broadcast", "reduce"})
_PER_RANK_COUNT: Final = frozenset(
    {"all_gather", "reduce_scatter", "alltoall", "gather", "scatter", "hypercube"}
)
# Collectives whose algbw counts only the (n-1)/n of size that crosses to peers (nccl-tests
# hypercube.cu HyperCubeGetBw: count × typesize × (nranks-1) / time, busbw = algbw).
_PEER_SHARE: Final = frozenset({"hypercube"})
_NO_INPLACE_CHECK: Final = frozenset({"alltoall", "sendrecv", "gather", "scatter"})
# Bus ids of an 8-GPU H100 node (the a3mega fixture's devices), repeated for larger nodes.
_BUS_IDS: Final = ("04", "05", "0b", "0c", "84", "85", "8b", "8c")
_GIB: Final = 1 << 30
_MIB: Final = 1 << 20

_TABLE_HEADER: Final = (
    "#\n"
    "#                                                              "
    "out-of-place                       in-place\n"
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
    "     time   algbw   busbw  #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
    "             (us)  (GB/s)  (GB/s)\n"
)


def _version_code(version: str) -> int:
    major, minor, patch = (int(p) for p in version.split("+")[0].split(".")[:3])
    return major * 10000 + minor * 100 + patch


def _fmt_time(us: float) -> str:
    # nccl-tests: %7.0f from 10 ms, %7.1f from 100 µs, %7.2f below.
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def _row_params(size: int, count: int, dtype: str, redop: str, root: int) -> str:
    return f"{size:12d}  {count:12d}  {dtype:>8s}  {redop:>6s}  {root:6d}"


def _row_result(time_us: float, algbw: float, busbw: float, wrong: str) -> str:
    return f"  {_fmt_time(time_us)}  {algbw:6.2f}  {busbw:6.2f}  {wrong:>6s}"


def _sizes(min_bytes: int, max_bytes: int) -> list[int]:
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def render_nccl_tests(
    *,
    collective: str = "all_reduce",
    nranks: int,
    nnodes: int,
    busbw_gbps: float,
    seed: int,
    transport: str,
    hosts: Sequence[str],
    nccl_version: str = "2.21.5",
    errors: str | None = None,
    cv: float = 0.01,
    network: str = "IB",
    env: Mapping[str, str] | None = None,
    min_bytes: int = 8,
    max_bytes: int = 8 * _GIB,
    gpu_name: str = "NVIDIA H100 80GB HBM3",
    timeout_s: int = 600,
    cuda_version: str = "12.4",
    gpus_per_process: int = 1,
) -> str:
    """nccl-tests stdout for one run (see module doc). `transport` is the network for IB/RoCE/
    Socket, or the intra-node path (NVLink/P2P/SHM/NVLS) with `network` as the network NCCL
    selected. `errors`: None, "ib_completion", "hang" (output cut mid-table by the `-T`
    timeout) or "wrong" (`#wrong` > 0, `Out of bounds values : N FAILED`). `gpus_per_process` is
    nccl-tests' `-g`: the ranks of one process share its pid (the header's `nGpus`)."""
    coll = normalize_collective(collective)
    if nranks < 1 or nnodes < 1 or nranks % nnodes:
        raise ValueError(f"nranks ({nranks}) must be a positive multiple of nnodes ({nnodes})")
    if len(hosts) != nnodes:
        raise ValueError(f"{len(hosts)} hosts given for {nnodes} nodes")
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown transport {transport!r}; known: {', '.join(TRANSPORTS)}")
    if errors is not None and errors not in ERRORS:
        raise ValueError(f"unknown errors {errors!r}; known: {', '.join(ERRORS)}")
    net = transport if transport in _NETWORKS else network
    if net not in _NETWORKS:
        raise ValueError(f"unknown network {network!r}; known: {', '.join(_NETWORKS)}")
    if busbw_gbps <= 0 or cv < 0:
        raise ValueError("busbw_gbps must be > 0 and cv >= 0")
    if gpus_per_process < 1 or (nranks // nnodes) % gpus_per_process:
        raise ValueError(f"{nranks // nnodes} ranks per node cannot form {gpus_per_process}-GPU processes")

    rng = random.Random(seed)
    per_node = nranks // nnodes
    hosts = list(hosts)
    ips = [f"10.{(i >> 8) & 255}.{i & 255}.{11 + (i % 200)}" for i in range(nnodes)]
    pids = [rng.randint(2000, 90000) for _ in range(nnodes)]
    env = {"NCCL_SOCKET_IFNAME": "eth0"} if env is None else dict(env)

    def pid_of(node: int, local: int) -> int:
        return pids[node] + local // gpus_per_process

    def ident(rank: int, thread: int = 0) -> str:
        node, local = divmod(rank, per_node)
        pid = pid_of(node, local)
        return f"{hosts[node]}:{pid}:{pid + thread} [{local}]"

    out: list[str] = []
    code = _version_code(nccl_version)
    out.append(f"# nccl-tests version 2.20.0 (b4d5bee) nccl-headers={code} nccl-library={code}")
    out.append(f"# Collective test starting: {coll}_perf")
    step = "2(factor)"
    out.append(
        f"# nThread 1 nGpus {gpus_per_process} minBytes {min_bytes} maxBytes {max_bytes} step: {step} "
        "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0"
    )
    out.append("#")
    out.append("# Using devices")
    for rank in range(nranks):
        node, local = divmod(rank, per_node)
        bus = _BUS_IDS[local % len(_BUS_IDS)]
        out.append(
            f"#  Rank {rank:2d} Group  0 Pid {pid_of(node, local):6d} on {hosts[node]:>10s} device "
            f"{local:2d} [0000:{bus}:00] {gpu_name}"
        )

    # -- NCCL init (NCCL_DEBUG=INFO), per rank in rank order
    comm_id = rng.getrandbits(64)
    for rank in range(nranks):
        node, local = divmod(rank, per_node)
        me, init = ident(rank), ident(rank, 17)
        bus_id = f"{int(_BUS_IDS[local % len(_BUS_IDS)], 16):x}000"
        comm = f"0x{rng.getrandbits(44) | (0x55 << 40):x}"
        out.append(f"{me} NCCL INFO Bootstrap : Using eth0:{ips[node]}<0>")
        for key, value in env.items():
            out.append(f"{me} NCCL INFO {key} set by environment to {value}")
        if rank == 0:
            out.append(f"{me} NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)")
            out.append(f"{me} NCCL INFO NET/Plugin: Using internal network plugin.")
            out.append(f"{me} NCCL INFO cudaDriverVersion 12040")
            if _version_code(nccl_version) >= 22300:
                out.append(f"{me} NCCL INFO NCCL version {nccl_version}+cuda{cuda_version}")
            else:  # older NCCL prints the version line bare (fixture: NCCL 2.16.5)
                out.append(f"NCCL version {nccl_version}+cuda{cuda_version}")
        if net == "Socket":
            out.append(f"{init} NCCL INFO Failed to open libibverbs.so[.1]")
            out.append(f"{init} NCCL INFO NET/Socket : Using [0]eth0:{ips[node]}<0>")
            out.append(f"{init} NCCL INFO Using network Socket")
        else:
            layer = "RoCE" if net == "RoCE" else "IB"
            devs = " ".join(f"[{i}]mlx5_{i}:1/{layer}" for i in range(min(per_node, 8)))
            out.append(f"{init} NCCL INFO NET/IB : Using {devs} [RO]; OOB eth0:{ips[node]}<0>")
            out.append(f"{init} NCCL INFO Using network IB")
        out.append(
            f"{init} NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {local} "
            f"nvmlDev {local} busId {bus_id} commId 0x{comm_id:x} - Init START"
        )
        if transport == "NVLS":
            out.append(f"{init} NCCL INFO NVLS multicast support is available on dev {local}")
        out.append(
            f"{init} NCCL INFO comm {comm} rank {rank} nRanks {nranks} nNodes {nnodes} localRanks "
            f"{per_node} localRank {local} MNNVL 0"
        )
        nxt = (rank + 1) % nranks
        nxt_node, nxt_local = divmod(nxt, per_node)
        if nranks > 1:
            for ch in range(2):
                if nxt_node != node:
                    path = "NET/Socket/0" if net == "Socket" else f"NET/IB/{local % 8}/GDRDMA"
                    out.append(
                        f"{init} NCCL INFO Channel {ch:02d}/0 : {rank}[{local}] -> {nxt}[{nxt_local}] "
                        f"[send] via {path}"
                    )
                else:
                    path = "SHM/direct/direct" if transport == "SHM" else "P2P/CUMEM/read"
                    out.append(
                        f"{init} NCCL INFO Channel {ch:02d}/0 : {rank}[{local}] -> {nxt}[{nxt_local}] "
                        f"via {path}"
                    )
        out.append(f"{init} NCCL INFO Connected all rings")
        nvls = 16 if transport == "NVLS" else 0
        out.append(
            f"{init} NCCL INFO 24 coll channels, 24 collnet channels, {nvls} nvls channels, "
            "32 p2p channels, 32 p2p channels per peer"
        )
        out.append(
            f"{init} NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {local} "
            f"nvmlDev {local} busId {bus_id} commId 0x{comm_id:x} - Init COMPLETE"
        )

    # -- the table
    factor = busbw_factor(coll, nranks)
    share = (nranks - 1) / nranks if coll in _PEER_SHARE else 1.0  # algbw = size × share / time
    # one rank: busbw is 0 (or hypercube's share is), algbw still means something
    eff_factor = factor * share if factor * share > 0 else 1.0
    sizes = _sizes(min_bytes, max_bytes)
    if net == "Socket":
        latency = 220.0 + 10.0 * nnodes
    elif nnodes > 1:
        latency = 55.0 + 5.0 * math.log2(nranks)
    else:
        latency = 12.0 + 2.0 * math.log2(max(nranks, 2))

    def times(peak: float) -> list[float]:
        t1g = _GIB / (peak * 1e3)
        k = 0.10 * t1g / math.log(1 + _GIB / _MIB)
        return [latency + k * math.log(1 + s / _MIB) + s / (peak * 1e3) for s in sizes]

    peak = busbw_gbps / eff_factor
    large = [i for i, s in enumerate(sizes) if s >= _GIB]
    for _ in range(6):  # fixed point: scale the peak until the headline equals busbw_gbps
        if not large:
            break
        t = times(peak)
        headline = sum(sizes[i] / (t[i] * 1e3) for i in large) / len(large) * eff_factor
        peak *= busbw_gbps / headline
    base_times = times(peak)
    run_gain = max(0.3, 1.0 + rng.gauss(0.0, cv))

    dtype, tsize = "float", 4
    redop = "sum" if coll in _REDUCING else "none"
    root = 0 if coll in _ROOTED else -1

    wrong_rows: set[int] = set()
    stop_at: int | None = None
    if errors == "wrong":
        candidates = [i for i, s in enumerate(sizes) if s >= _MIB] or list(range(len(sizes)))
        start = rng.choice(candidates[: max(1, len(candidates) - 2)])
        wrong_rows = set(range(start, min(start + 3, len(sizes))))
    elif errors in ("hang", "ib_completion"):
        floor = 64 * _MIB if errors == "hang" else _MIB
        candidates = [i for i, s in enumerate(sizes) if s >= floor][:-1] or [len(sizes) - 1]
        stop_at = rng.choice(candidates)

    out.append(_TABLE_HEADER.rstrip("\n"))
    busbw_sum, busbw_n, oob = 0.0, 0, 0
    for i, size in enumerate(sizes):
        count = size // tsize
        if coll in _PER_RANK_COUNT:
            count = size // tsize // nranks
            size = count * tsize * nranks
        params = _row_params(size, count, dtype, redop, root)
        if stop_at is not None and i == stop_at:
            out.append(params)  # results never printed: the failure text lands on this line
            break
        cells = []
        for inplace in (False, True):
            jitter = 1.0 + rng.gauss(0.0, 0.003)
            t_us = base_times[i] / (run_gain * jitter)
            algbw = size * share / (t_us * 1e3)
            busbw = algbw * factor
            busbw_sum += busbw
            busbw_n += 1
            if inplace and coll in _NO_INPLACE_CHECK:
                wrong = "N/A"
            elif i in wrong_rows and not inplace:
                wrong = str(rng.randint(1, max(1, count)))
                oob += 1
            else:
                wrong = "0"
            cells.append(_row_result(t_us, algbw, busbw, wrong))
        out.append(params + "".join(cells))

    if stop_at is None:
        avg = busbw_sum / busbw_n if busbw_n else 0.0
        out.append(f"# Out of bounds values : {oob} {'FAILED' if oob else 'OK'}")
        out.append(f"# Avg bus bandwidth    : {avg:g} ")
        out.append("#")
        out.append("")
        return "\n".join(out) + "\n"

    # -- failure tails
    host0, pid0 = hosts[0], pids[0]
    peer_rank = nranks - 1
    if errors == "ib_completion":
        peer_node = peer_rank // per_node
        warn_id = ident(peer_rank, 31)
        gid = ""
        if net == "RoCE":
            gid = f" localGid ::ffff:{ips[peer_node]} remoteGids::ffff:{ips[0]}"
        warning = (
            f"NET/IB : Got completion from peer {ips[0]}<{rng.randint(32768, 60999)}> with status=12 "
            f"opcode=129 len=0 vendor err 129 (Recv){gid} hca mlx5_{peer_rank % per_node % 8}"
        )
        tail = [
            f"{warn_id} transport/net_ib.cc:1696 NCCL WARN {warning}",
            f"{warn_id} NCCL INFO transport/net.cc:1302 -> 6",
            f"{warn_id} NCCL INFO proxy.cc:694 -> 6",
            f"{warn_id} NCCL INFO proxy.cc:874 -> 6 [Progress Thread]",
        ]
        # Rank 0's harness line continues the row whose results never came.
        out[-1] += (
            f"{host0}: Test NCCL failure common.cu:1279 'remote process exited or there was a network "
            "error / '"
        )
        out.extend(tail)
        out.append(f" .. {host0} pid {pid0}: Test failure common.cu:424")
        out.append(f" .. {host0} pid {pid0}: Test failure common.cu:607")
        out.append(f" .. {host0} pid {pid0}: Test failure {coll}.cu:90")
        exit_code = 3
    else:  # hang, stopped by nccl-tests' own -T timeout
        out[-1] += f"{host0}: Test timeout ({timeout_s}s) common.cu:378"
        out.append(f" .. {host0} pid {pid0}: Test failure common.cu:586")
        out.append(f" .. {host0} pid {pid0}: Test failure common.cu:607")
        last = hosts[-1]
        if nnodes > 1:
            out.append(f"{last}: Test timeout ({timeout_s}s) common.cu:378")
            out.append(f" .. {last} pid {pids[-1]}: Test failure common.cu:586")
        exit_code = 4
    out.extend(mpirun_abort_lines(rng, exit_code))
    return "\n".join(out) + "\n"


def mpirun_abort_lines(rng: random.Random, exit_code: int) -> list[str]:
    """What OpenMPI's mpirun prints when a rank exits non-zero (the job is aborted)."""
    return [
        "-------------------------------------------------------",
        "Primary job  terminated normally, but 1 process returned",
        "a non-zero exit code. Per user-direction, the job has been aborted.",
        "-------------------------------------------------------",
        "--------------------------------------------------------------------------",
        "mpirun detected that one or more processes exited with non-zero status, thus causing",
        "the job to be terminated. The first process to do so was:",
        "",
        f"  Process name: [[{rng.randint(1000, 65000)},1],0]",
        f"  Exit code:    {exit_code}",
        "--------------------------------------------------------------------------",
    ]
