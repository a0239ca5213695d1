"""The simulator's answer to an NCCL probe: nccl-tests stdout for the probe's node or node group,
with the fleet spec's network faults applied.

Simulator truth is the profile's `intra_busbw_gbps` (one node, `gpus` ranks, NVLink) and
`inter_busbw_gbps` (a group of nodes, `nodes × gpus` ranks, over the profile's fabric). Healthy
runs vary like real ones: each node has a fixed offset (seeded by the fleet seed and the node
name, σ 1 %, within ±3 %: reference nodes are not identical) and every run its own noise (CV 1 %,
`render_nccl_tests`). A group runs at the pace of its slowest member.

Faults on any node of the probe (fleet spec fault kinds):

- `nccl.nvlink_degraded` (`factor`, default 0.6): the node's NVLink bandwidth × factor — intra
  runs drop to `intra × factor`; a group containing it is capped there too (its ring crosses the
  degraded NVLink);
- `nccl.socket_fallback`: NCCL selects `Socket` (libibverbs fails to load) — its intra-node runs
  say so too, at full NVLink speed; a group's busbw drops to 12 % of the fabric's (TCP over the
  host NIC), with no error at all — the silent defect;
- `nccl.flaky` (`cv`, default 0.15): the run-to-run spread of runs touching the node has CV
  `cv` over any three consecutive repeats (a link that alternates between good and degraded);
- `nccl.errors`: IB completion errors (status=12) cut inter-node runs short; intra-node runs do
  not use the network and are unaffected;
- `nccl.hang`: the run stops mid-table at nccl-tests' own timeout;
- `nccl.wrong`: `#wrong` > 0 at some sizes and `Out of bounds values : N FAILED`.

Deterministic per (fleet seed, node(s), repeat, salt); the caller salts with the probe key (or
the pod's uid), so the same probe in the same run always prints the same bytes and a new run
measures anew. `nccl_run` is the core (explicit nodes, GPUs per node, collective, salt); the
simulated container runtime (`fleetval.sim.images`) calls it, `nccl_output` adapts a ProbeSpec.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from typing import Final

from fleetval.errors import SpecError
from fleetval.fleet.spec import FleetSpec
from fleetval.nccl.simulated import render_nccl_tests
from fleetval.probes.pod import ProbeSpec

HEALTHY_RUN_CV: Final = 0.01
NODE_SPREAD: Final = 0.01  # σ of a node's fixed offset from its profile's truth
NODE_SPREAD_MAX: Final = 0.03
SOCKET_SHARE: Final = 0.12
DEFAULT_NVLINK_FACTOR: Final = 0.6
DEFAULT_FLAKY_CV: Final = 0.15
DEFAULT_NCCL_VERSION: Final = "2.21.5"
# A flaky link's gain over consecutive repeats: sample std of (+1, -1, 0) is exactly 1, so three
# consecutive repeats show CV ≈ `cv` whatever the phase.
_FLAKY_PATTERN: Final = (1.0, -1.0, 0.0)


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "big")


def node_offset(fleet_seed: int, node: str) -> float:
    """A node's fixed busbw factor around its profile's truth (same in every run)."""
    z = random.Random(_seed(fleet_seed, node, "nccl-offset")).gauss(0.0, NODE_SPREAD)
    return 1.0 + max(-NODE_SPREAD_MAX, min(NODE_SPREAD_MAX, z))


def probe_nodes(probe: ProbeSpec) -> list[str]:
    nodes = probe.params.get("nodes")
    return [str(n) for n in nodes] if nodes else probe.node.split("+")


def nccl_output(spec: FleetSpec, probe: ProbeSpec, *, seed_salt: str) -> str:
    """nccl-tests stdout (NCCL_DEBUG=INFO) for `probe` on the simulated fleet (see module doc)."""
    nodes = probe_nodes(probe)
    gpus = {spec.profile_of(n).gpus for n in nodes}
    if len(gpus) != 1:
        raise SpecError(f"NCCL probe {probe.probe_key!r} spans nodes with different GPU counts: {nodes}")
    return nccl_run(
        spec,
        nodes,
        probe.gpus or gpus.pop(),
        str(probe.params.get("collective", "all_reduce")),
        repeat=int(probe.params.get("repeat", 0)),
        salt=seed_salt,
        env=probe.env,
        timeout_s=probe.timeout_s if probe.timeout_s < 3600 else 600,
        gpus_per_process=1 if probe.params.get("layout") == "rank_per_gpu" else probe.gpus or 1,
    )


def nccl_run(
    spec: FleetSpec,
    nodes: Sequence[str],
    gpus_per_node: int,
    collective: str = "all_reduce",
    *,
    repeat: int = 0,
    salt: str = "",
    env: Mapping[str, str] | None = None,
    timeout_s: int = 600,
    min_bytes: int = 8,
    max_bytes: int = 8 << 30,
    gpus_per_process: int = 1,
) -> str:
    """nccl-tests stdout (NCCL_DEBUG=INFO) for one run: `gpus_per_node` ranks on each of `nodes`,
    `gpus_per_process` of them in each process (nccl-tests' `-g`).

    `repeat` is the run's position in a series (a flaky link's phase), `salt` makes a new run
    measure anew; `env` is the run's environment (its NCCL_* variables, NCCL_DEBUG aside, are
    echoed as NCCL prints them); `timeout_s` is nccl-tests' `-T` (a hang ends there)."""
    nodes = list(nodes)
    profiles = [spec.profile_of(n) for n in nodes]
    if len({p.gpus for p in profiles}) != 1:
        raise SpecError(f"an NCCL run spans nodes with different GPU counts: {nodes}")
    per_node = gpus_per_node
    fabrics = {p.fabric for p in profiles}
    fabric_net = "RoCE" if fabrics == {"roce"} else "IB"
    inter = len(nodes) > 1

    offset = min(node_offset(spec.seed, n) for n in nodes)
    intra_truth = min(p.intra_busbw_gbps for p in profiles)
    busbw = (min(p.inter_busbw_gbps for p in profiles) if inter else intra_truth) * offset
    network = fabric_net
    transport = fabric_net if inter else "NVLink"
    errors: str | None = None
    flaky: list[tuple[str, float]] = []
    kinds: set[str] = set()
    for node in nodes:
        for fault in spec.faults_on(node, "network"):
            kinds.add(fault.kind)
            if fault.kind == "nccl.nvlink_degraded":
                factor = float(fault.params.get("factor", DEFAULT_NVLINK_FACTOR))
                busbw = min(busbw, intra_truth * offset * factor)
            elif fault.kind == "nccl.socket_fallback":
                network = "Socket"
                if inter:
                    transport = "Socket"
                    busbw *= SOCKET_SHARE
            elif fault.kind == "nccl.flaky":
                flaky.append((node, float(fault.params.get("cv", DEFAULT_FLAKY_CV))))
    if "nccl.hang" in kinds:
        errors = "hang"
    elif "nccl.errors" in kinds and inter and network != "Socket":
        errors = "ib_completion"
    elif "nccl.wrong" in kinds:
        errors = "wrong"
    if flaky:
        node, cv = max(flaky, key=lambda f: f[1])
        phase = _seed(spec.seed, node, "nccl-flaky") % len(_FLAKY_PATTERN)
        busbw *= max(0.3, 1.0 + cv * _FLAKY_PATTERN[(repeat + phase) % len(_FLAKY_PATTERN)])

    version = str(
        (spec.raw.get("profiles", {}).get(profiles[0].name, {}) or {}).get(
            "nccl_version", DEFAULT_NCCL_VERSION
        )
    )
    nccl_env = {"NCCL_SOCKET_IFNAME": "eth0"}
    nccl_env.update(
        {k: v for k, v in (env or {}).items() if k.startswith("NCCL_") and not k.startswith("NCCL_DEBUG")}
    )
    return render_nccl_tests(
        collective=collective,
        nranks=per_node * len(nodes),
        nnodes=len(nodes),
        busbw_gbps=busbw,
        seed=_seed(spec.seed, "+".join(nodes), repeat, salt),
        transport=transport,
        network=network,
        hosts=nodes,
        nccl_version=version,
        errors=errors,
        cv=HEALTHY_RUN_CV,
        env=nccl_env,
        gpu_name=profiles[0].gpu_product.replace("-", " "),
        timeout_s=timeout_s,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        gpus_per_process=gpus_per_process,
    )
