"""FleetSpec's per-node fault index answers what a scan of every fault answers, in spec order."""

from __future__ import annotations

import dataclasses

from fleetval.fleet.spec import load_fleet_spec

SPEC = {
    "name": "idx",
    "seed": 3,
    "profiles": {
        "h100": {
            "gpu_product": "NVIDIA-H100-80GB-HBM3",
            "gpus": 8,
            "intra_busbw_gbps": 480,
            "inter_busbw_gbps": 370,
            "fabric": "ib",
        }
    },
    "racks": [{"name": "r01", "profile": "h100", "nodes": 4}, {"name": "r02", "profile": "h100", "nodes": 2}],
    "faults": [
        {"node": "r01-n02", "kind": "dcgm.memory", "gpu": 1},
        {"kind": "kueue.no_reclaim"},
        {"node": "r02-n01", "kind": "nccl.flaky"},
        {"node": "r01-n02", "kind": "xid", "code": 79, "gpu": 4},
        {"node": "r01-n02", "kind": "nccl.hang"},
        {"kind": "ckpt.slow_save"},
    ],
}


def scanned(spec, node, layer=None):  # type: ignore[no-untyped-def]
    return [f for f in spec.faults if f.node == node and (layer is None or f.layer == layer)]


def test_faults_on_and_cluster_faults_match_a_full_scan() -> None:
    spec = load_fleet_spec(SPEC)
    for node, _rack in spec.nodes():
        for layer in (None, "device", "network", "job"):
            assert spec.faults_on(node, layer) == scanned(spec, node, layer)
    assert [f.kind for f in spec.faults_on("r01-n02")] == ["dcgm.memory", "xid", "nccl.hang"]
    assert spec.faults_on("r01-n01") == []
    assert [f.kind for f in spec.cluster_faults()] == ["kueue.no_reclaim", "ckpt.slow_save"]
    assert [f.kind for f in spec.cluster_faults("job")] == ["ckpt.slow_save"]


def test_a_replaced_spec_indexes_its_own_faults() -> None:
    spec = load_fleet_spec(SPEC)
    fewer = dataclasses.replace(spec, faults=spec.faults[:1])
    assert [f.kind for f in fewer.faults_on("r01-n02")] == ["dcgm.memory"]
    assert fewer.cluster_faults() == []
    assert fewer == dataclasses.replace(spec, faults=spec.faults[:1])
