"""NCCL probe layouts: one process per node driving its GPUs (`-g <gpus>`, the default) or one MPI
rank per GPU (`-g 1`, `slotsPerWorker: <gpus>`), each judged against baselines of its own."""

from __future__ import annotations

import pathlib
import re
import shlex
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fleetval.k8s.validation import load_crds, validate_custom
from fleetval.nccl import baselines as nccl_baselines
from fleetval.nccl import judge_stored as nccl_judge
from fleetval.nccl import plan as nccl_plan
from fleetval.nccl.mpijob import job_state, mpijob_manifest
from fleetval.nccl.parser import parse_nccl
from fleetval.nccl.probe import NCCL_TESTS_BIN, nccl_probe
from fleetval.records import Result
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import Store
from tests.nccl_lab import PROFILE, Lab
from tests.paths import DEMO_FLEET
from tests.simkube import SimKube

NS = "fleetval"
MPIJOBS = {"group": "kubeflow.org", "version": "v2beta1", "plural": "mpijobs"}
PAIR = ["r01-n01", "r01-n02"]


def launcher_argv(job: dict[str, Any]) -> list[str]:
    container = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    return shlex.split(container["args"][0])


def test_rank_per_gpu_runs_one_rank_per_gpu_under_its_own_probe_keys() -> None:
    default = nccl_probe(PAIR, gpus_per_node=8, repeat=0, run_key="k")
    per_gpu = nccl_probe(PAIR, gpus_per_node=8, repeat=0, run_key="k", layout="rank_per_gpu")
    g = default.params["argv"].index("-g")
    assert (default.params["argv"][g + 1], per_gpu.params["argv"][g + 1]) == ("8", "1")
    assert default.probe_key == "k/nccl-inter/r01-n01+r01-n02/r0"  # stored probes keep their keys
    assert per_gpu.probe_key == "k/nccl-inter-rank-per-gpu/r01-n01+r01-n02/r0"
    assert "layout" not in default.params and per_gpu.params["layout"] == "rank_per_gpu"

    intra = nccl_probe(["r01-n01"], gpus_per_node=8, repeat=0, run_key="k", layout="rank_per_gpu")
    assert shlex.split(intra.args[0])[:12] == [
        "exec", "mpirun", "--allow-run-as-root", "-np", "8", "-H", "localhost:8", "--bind-to", "none",
        "-x", "NCCL_DEBUG", f"{NCCL_TESTS_BIN}/all_reduce_perf",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="unknown NCCL layout 'per_thread'"):
        nccl_probe(PAIR, gpus_per_node=8, repeat=0, run_key="k", layout="per_thread")


def test_an_mpijob_gives_each_worker_a_slot_per_gpu_in_rank_per_gpu() -> None:
    crd = load_crds()[("kubeflow.org", "mpijobs")]
    default = mpijob_manifest(nccl_probe(PAIR, gpus_per_node=8, repeat=0, run_key="k"))
    per_gpu = mpijob_manifest(nccl_probe(PAIR, gpus_per_node=8, repeat=0, run_key="k", layout="rank_per_gpu"))
    for job in (default, per_gpu):
        validate_custom(job, crd, "v2beta1")
    assert default["spec"]["slotsPerWorker"] == 1 and per_gpu["spec"]["slotsPerWorker"] == 8
    for job, np, ppr in ((default, "2", "ppr:1:node"), (per_gpu, "16", "ppr:8:node")):
        argv = launcher_argv(job)
        assert argv[argv.index("-np") + 1] == np and argv[argv.index("--map-by") + 1] == ppr
    assert default["metadata"]["name"] != per_gpu["metadata"]["name"]


def _pids(log: str) -> set[str]:
    return set(re.findall(r"^#\s+Rank\s+\d+ Group\s+\d+ Pid\s+(\d+)", log, re.M))


def _run_mpijob(kube: SimKube, layout: str) -> tuple[dict[str, Any], str]:
    body = mpijob_manifest(
        nccl_probe(["r01-n05", "r01-n06"], gpus_per_node=8, repeat=0, run_key=layout, layout=layout)
    )
    name = body["metadata"]["name"]
    kube.custom.create_namespaced_custom_object(namespace=NS, body=body, **MPIJOBS)
    deadline = time.monotonic() + 20
    while job_state(
        job := kube.custom.get_namespaced_custom_object(namespace=NS, name=name, **MPIJOBS)
    ) not in (
        "Succeeded",
        "Failed",
    ):
        assert time.monotonic() < deadline, f"{layout}: the MPIJob never finished"
        time.sleep(0.05)
    selector = f"training.kubeflow.org/job-name={name},training.kubeflow.org/job-role=launcher"
    [launcher] = kube.core.list_namespaced_pod(NS, label_selector=selector).items
    log = kube.core.read_namespaced_pod_log(launcher.metadata.name, NS, _preload_content=False).data.decode()
    return job, str(log)


def test_the_simulated_cluster_runs_each_layout_as_mpirun_would(sim_kube: Any) -> None:
    kube: SimKube = sim_kube(DEMO_FLEET, time_scale=0.0)
    for layout, ngpus, processes, slots in (("process_per_node", 8, 2, 1), ("rank_per_gpu", 1, 16, 8)):
        job, log = _run_mpijob(kube, layout)
        assert job_state(job) == "Succeeded", log[-2000:]
        run = parse_nccl(log)
        assert (run.nranks, run.nnodes, run.params["nGpus"]) == (16, 2, ngpus), layout
        assert len(_pids(log)) == processes, layout  # the ranks of one process share its pid
        name = job["metadata"]["name"]
        hostfile = kube.core.read_namespaced_config_map(f"{name}-config", NS).data["hostfile"]
        assert hostfile.count(f" slots={slots}\n") == 2, hostfile

    # One node alone: mpirun in the probe's own pod, eight ranks on its eight GPUs.
    spec = nccl_probe(["r01-n05"], gpus_per_node=8, repeat=0, run_key="intra", layout="rank_per_gpu")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nccl-rank-per-gpu", "namespace": NS},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": "r01-n05"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "probe",
                    "image": spec.image,
                    "command": list(spec.command),
                    "args": list(spec.args),
                    "env": [{"name": k, "value": v} for k, v in spec.env.items()],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                }
            ],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}],
        },
    }
    kube.core.create_namespaced_pod(NS, pod)
    deadline = time.monotonic() + 20
    while kube.core.read_namespaced_pod("nccl-rank-per-gpu", NS).status.phase not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, "the intra-node pod never finished"
        time.sleep(0.05)
    log = kube.core.read_namespaced_pod_log("nccl-rank-per-gpu", NS, _preload_content=False).data.decode()
    run = parse_nccl(log)
    assert kube.core.read_namespaced_pod("nccl-rank-per-gpu", NS).status.phase == "Succeeded", log[-2000:]
    assert (run.nranks, run.nnodes, run.params["nGpus"], len(_pids(log))) == (8, 1, 1, 8)


def test_a_plan_keeps_its_layout_and_scopes_its_baselines_by_it() -> None:
    nodes = Lab().list_nodes()
    default = nccl_plan.plan_sweep(nodes, repeats=1)
    per_gpu = nccl_plan.plan_sweep(nodes, repeats=1, layout="rank_per_gpu")
    restored = nccl_plan.NcclPlan.from_json(per_gpu.to_json())
    assert restored.layout == "rank_per_gpu" and restored == per_gpu
    stored_before_layouts = {k: v for k, v in default.to_json().items() if k != "layout"}
    assert nccl_plan.NcclPlan.from_json(stored_before_layouts).layout == "process_per_node"
    scopes = {
        layout: {s.params["scope"] for s in nccl_plan.sweep_specs(plan, run_key="k")}
        for layout, plan in (("default", default), ("per_gpu", per_gpu))
    }
    assert scopes["default"] == {"intra-8", "inter-2x8"}
    assert scopes["per_gpu"] == {"intra-8-rank-per-gpu", "inter-2x8-rank-per-gpu"}
    with pytest.raises(ValueError, match="unknown NCCL layout"):
        nccl_plan.plan_sweep(nodes, layout="rank_per_thread")


@pytest.fixture
def lite(tmp_path: pathlib.Path) -> Iterator[tuple[Store, Lab]]:
    engine = make_engine(f"sqlite:///{tmp_path}/fleetval.db")
    upgrade(engine)
    yield Store(engine), Lab()
    engine.dispose()


def _sweep_pairs(store: Store, lab: Lab, run_key: str, nodes: list[str], layout: str) -> int:
    run_id = store.ensure_run(run_key, suite=nccl_plan.SUITE, backend="test", meta={})
    plan = nccl_plan.plan_sweep(lab.list_nodes(), repeats=3, only=nodes, layout=layout)
    specs = [s for s in nccl_plan.sweep_specs(plan, run_key=run_key) if len(s.params["nodes"]) > 1]
    for repeat in range(3):
        lab.run(store, run_id, [s for s in specs if s.params["repeat"] == repeat])
    nccl_judge.judge_sweep(store, run_id, specs, lookup=nccl_judge.promoted_lookup(store))
    return run_id


def _busbw_results(store: Store, run_id: int) -> dict[str, tuple[str, str]]:
    return {
        v["subject"]: (v["result"], v["reason"])
        for v in store.verdicts(run_id)
        if v["criterion"] == "D-NET-NCCL-02"
    }


def test_each_layout_is_judged_against_baselines_of_its_own(lite: tuple[Store, Lab]) -> None:
    store, lab = lite
    reference = ["r01-n01", "r01-n03", "r01-n05", "r02-n02"]
    ref_run = _sweep_pairs(store, lab, "ref", reference, "process_per_node")
    made = nccl_baselines.establish_baseline(store, ref_run, PROFILE, "inter-2x8")
    store.promote_baseline(made.baseline_id)

    # Only the default layout's baseline exists: a rank-per-GPU pair is never judged against it.
    per_gpu_run = _sweep_pairs(store, lab, "per-gpu", reference, "rank_per_gpu")
    results = _busbw_results(store, per_gpu_run)
    assert results and {r for r, _ in results.values()} == {Result.INCONCLUSIVE.value}
    assert all("inter-2x8-rank-per-gpu" in reason for _, reason in results.values())

    own = nccl_baselines.establish_baseline(store, per_gpu_run, PROFILE, "inter-2x8-rank-per-gpu")
    store.promote_baseline(own.baseline_id)
    again = _busbw_results(store, _sweep_pairs(store, lab, "per-gpu-2", reference, "rank_per_gpu"))
    assert {r for r, _ in again.values()} == {Result.PASS.value}
