"""The GPU Operator's operand DaemonSets in the simulated cluster follow the nodes'
`nvidia.com/gpu.deploy.<operand>` labels, and the `dcgm.exporter_contention` fault makes a running
dcgm-exporter visible to a DCGM diagnostic (DCGM's profiling module busy) until it is paused."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from fleetval.dcgm.judge import judge_dcgm
from fleetval.dcgm.parser import parse_dcgm
from fleetval.dcgm.probe import DCGM_IMAGE, SUPPORTED_DCGM_IMAGES, DcgmImage
from fleetval.fleet.spec import load_fleet_spec
from fleetval.sim.kube import mig_manager, operands
from fleetval.sim.kube.cluster import ListOptions, SimKubeCluster
from fleetval.sim.kube.meta import rfc3339
from fleetval.sim.kube.resources import by_kind
from tests.paths import ROOT

NODE = by_kind("Node")
POD = by_kind("Pod")
EXPORTER_LABEL = "nvidia.com/gpu.deploy.dcgm-exporter"
PAUSED = "paused-for-fleetval-diag"
START = 1_800_000_000.0
# r01-n02's exporter contends with a diagnostic; r01-n03's also crash-loops (so it holds nothing).
FLEET = """
name: exporter
seed: 11
profiles:
  h100:
    gpu_product: NVIDIA-H100-80GB-HBM3
    gpus: 8
    intra_busbw_gbps: 480
    inter_busbw_gbps: 370
    fabric: ib
    dcgm_major: {major}
racks:
  - {{name: r01, profile: h100, nodes: 3}}
faults:
  - {{node: r01-n02, kind: dcgm.exporter_contention}}
  - {{node: r01-n03, kind: dcgm.exporter_contention}}
  - {{node: r01-n03, kind: op.operand_down, operand: dcgm-exporter}}
"""


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def cluster(major: int = 4, engine: Any = None) -> tuple[SimKubeCluster, Clock]:
    clock = Clock()
    sim = SimKubeCluster(load_fleet_spec(FLEET.format(major=major)), engine, clock=clock)
    sim.start()
    return sim, clock


def set_label(sim: SimKubeCluster, node: str, value: str | None, key: str = EXPORTER_LABEL) -> None:
    sim.patch(NODE, "", node, {"metadata": {"labels": {key: value}}}, "application/merge-patch+json")


def operand_pods(sim: SimKubeCluster) -> dict[str, dict[str, Any]]:
    listed = sim.list_objects(POD, operands.NAMESPACE, ListOptions())
    return {p["metadata"]["name"]: p for p in listed["items"]}


def exporters_on(sim: SimKubeCluster, node: str) -> list[dict[str, Any]]:
    """What the pause step asks the API: the exporter pods on `node`."""
    opts = ListOptions(label_selector="app=nvidia-dcgm-exporter", field_selector=f"spec.nodeName={node}")
    return list(sim.list_objects(POD, operands.NAMESPACE, opts)["items"])


def test_pausing_a_nodes_exporter_takes_its_pod_and_true_brings_it_back() -> None:
    sim, clock = cluster()
    before = operand_pods(sim)
    [exporter] = exporters_on(sim, "r01-n02")
    name = exporter["metadata"]["name"]
    assert name == operands.operand_pod_name(sim.spec, "r01-n02", "dcgm-exporter")

    set_label(sim, "r01-n02", PAUSED)
    after = operand_pods(sim)
    assert set(before) - set(after) == {name} and set(after) <= set(before)
    assert all(
        after[n]["metadata"]["resourceVersion"] == before[n]["metadata"]["resourceVersion"] for n in after
    )
    assert exporters_on(sim, "r01-n02") == []
    assert [len(exporters_on(sim, n)) for n in ("r01-n01", "r01-n03")] == [1, 1]

    clock.now = START + 600
    set_label(sim, "r01-n02", "true")
    [back] = exporters_on(sim, "r01-n02")
    assert back["metadata"]["name"] == name and back["metadata"]["uid"] != exporter["metadata"]["uid"]
    assert back["metadata"]["annotations"][operands.SIM_STATIC] == "true"
    assert back["status"]["phase"] == "Running" and back["status"]["startTime"] == rfc3339(clock.now)
    assert {c["type"]: c["status"] for c in back["status"]["conditions"]}["Ready"] == "True"
    assert back["spec"] == exporter["spec"]  # the DaemonSet's pod template, defaults and all
    assert set(operand_pods(sim)) == set(before)
    assert sim.runs == {}  # stored, never run


def test_a_crash_looping_exporter_comes_back_crash_looping() -> None:
    sim, _ = cluster()
    set_label(sim, "r01-n03", PAUSED)
    assert exporters_on(sim, "r01-n03") == []
    set_label(sim, "r01-n03", "true")
    [back] = exporters_on(sim, "r01-n03")
    [main] = back["status"]["containerStatuses"]
    assert main["state"]["waiting"]["reason"] == "CrashLoopBackOff" and main["restartCount"] > 0


def test_a_removed_label_counts_as_true_and_other_operands_follow_theirs() -> None:
    sim, _ = cluster()
    set_label(sim, "r01-n01", None)
    assert len(exporters_on(sim, "r01-n01")) == 1
    plugin = operands.operand_pod_name(sim.spec, "r01-n01", "device-plugin")
    validator = operands.operand_pod_name(sim.spec, "r01-n01", "validator")
    set_label(sim, "r01-n01", "false", key="nvidia.com/gpu.deploy.device-plugin")
    set_label(sim, "r01-n01", "false", key="nvidia.com/gpu.deploy.operator-validator")
    assert not {plugin, validator} & set(operand_pods(sim))
    set_label(sim, "r01-n01", "true", key="nvidia.com/gpu.deploy.device-plugin")
    assert plugin in operand_pods(sim) and validator not in operand_pods(sim)


def test_the_pause_survives_a_restart(tmp_path: pathlib.Path) -> None:
    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import upgrade

    engine = make_engine(f"sqlite:///{tmp_path}/sim.db")
    upgrade(engine)
    sim, _ = cluster(engine=engine)
    set_label(sim, "r01-n02", PAUSED)
    again, _ = cluster(engine=engine)
    assert exporters_on(again, "r01-n02") == []
    set_label(again, "r01-n02", "true")
    assert len(exporters_on(again, "r01-n02")) == 1
    engine.dispose()


# --- what a diagnostic sees ---------------------------------------------------------------------


def diag(sim: SimKubeCluster, name: str, node: str, *, json: bool = True, image: str = DCGM_IMAGE) -> str:
    """The DCGM probe's script (fleetval.dcgm.probe) in a pod on `node`; its log once it ended."""
    script = f"nvidia-smi -L && nv-hostengine >/dev/null && exec dcgmi diag -r 2{' -j' if json else ''}"
    sim.create(
        POD,
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [
                    {
                        "name": "dcgm",
                        "image": image,
                        "command": ["/bin/bash", "-c"],
                        "args": [script],
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    }
                ],
            },
        },
    )
    lines, ended = sim.log_lines("default", name, None)
    assert ended
    return "\n".join(line for _, line in lines) + "\n"


def outcome(text: str, node: str) -> tuple[str, str]:
    judgement = judge_dcgm(parse_dcgm(text), gate="weekly", node=node, level=2, expected_gpus=8)
    return judgement.result.value, judgement.rule.outcome


@pytest.mark.parametrize("dcgm", SUPPORTED_DCGM_IMAGES, ids=lambda d: d.version)
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_a_running_exporter_makes_the_diagnostic_inconclusive_and_pausing_it_clears_it(
    dcgm: DcgmImage, as_json: bool
) -> None:
    sim, _ = cluster()
    busy = diag(sim, "busy", "r01-n02", json=as_json, image=dcgm.ref)
    assert parse_dcgm(busy).dcgm_version == dcgm.version  # the pod's image decides, not the profile
    assert outcome(busy, "r01-n02") == ("inconclusive", "profiling_busy")
    [failed] = [t for t in parse_dcgm(busy).tests if t.result == "fail"]
    assert failed.name == ("pcie" if dcgm.version.startswith("4.") else "PCIe") and set(
        failed.gpus.values()
    ) == {"fail"}
    assert len(failed.warnings) == 8
    assert (
        "Error using DCGM API dcgmProfWatchFields: The requested profiling metrics cannot be collected in a "
        "single pass" in failed.warnings[0].message
    )

    set_label(sim, "r01-n02", PAUSED)
    assert outcome(diag(sim, "paused", "r01-n02", json=as_json, image=dcgm.ref), "r01-n02") == (
        "pass",
        "pass",
    )
    set_label(sim, "r01-n02", "true")
    again = diag(sim, "again", "r01-n02", json=as_json, image=dcgm.ref)
    assert outcome(again, "r01-n02")[1] == "profiling_busy"


def test_no_contention_without_the_fault_or_with_the_exporter_down() -> None:
    sim, _ = cluster()
    assert outcome(diag(sim, "healthy", "r01-n01"), "r01-n01") == ("pass", "pass")
    assert outcome(diag(sim, "crashing", "r01-n03"), "r01-n03") == ("pass", "pass")


def test_dcgmi_exits_as_for_a_failed_test_not_an_isolate_error() -> None:
    sim, _ = cluster()
    diag(sim, "busy", "r01-n02")
    [terminated] = [
        s["state"]["terminated"] for s in sim.get(POD, "default", "busy")["status"]["containerStatuses"]
    ]
    assert terminated["exitCode"] == 226  # DCGM_ST_NVVS_ERROR


# --- the MIG manager's pause -------------------------------------------------------------------


def test_a_mig_reconfiguration_takes_the_paused_operands_off_the_node_until_success() -> None:
    clock = Clock()
    sim = SimKubeCluster(
        load_fleet_spec((ROOT / "include/fleetval/sim/fleets/mig.yaml").read_text()),
        time_scale=1.0,
        clock=clock,
    )
    sim.start()
    paused = {"device-plugin", "gpu-feature-discovery", "dcgm-exporter"}
    names = {o: operands.operand_pod_name(sim.spec, "r01-n01", o) for o in operands.OPERANDS}
    set_label(sim, "r01-n01", "all-balanced", key=mig_manager.CONFIG_LABEL)
    present = set(operand_pods(sim))
    assert {o for o, n in names.items() if n not in present} == paused
    clock.now = START + mig_manager.PAUSE_S + mig_manager.MODE_CHANGE_S + 8 * mig_manager.APPLY_S
    sim.reconcile()
    labels = sim.get(NODE, "", "r01-n01")["metadata"]["labels"]
    assert labels[mig_manager.STATE_LABEL] == "success"
    assert set(names.values()) <= set(operand_pods(sim))
