"""ProbePodOperator against the simulated cluster, through the real KubernetesPodOperator, the
provider's hook and the kubernetes client: the defects a first real cluster would have hit."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

import pytest

from fleetval.dcgm.parser import parse_dcgm
from fleetval.dcgm.probe import dcgm_diag_probe
from fleetval.nccl.probe import NCCL_TESTS_IMAGE, nccl_probe
from fleetval.nvidia_smi.parser import split_gpu_list
from fleetval.probes.pod import ProbeSpec
from tests.paths import DEMO_FLEET

NS = "fleetval"


def context(task_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(
        dag_id="probe_test",
        task_id=task_id,
        map_index=-1,
        try_number=1,
        start_date=dt.datetime.now(dt.UTC),
        xcom_push=lambda **_: None,
    )
    return {"ti": ti, "run_id": "manual__probe_test", "dag": SimpleNamespace()}


def run_probe(spec: ProbeSpec, fv_run: int, **kwargs: Any) -> Any:
    from fleetval_airflow.probe_pod import ProbePodOperator

    # The synchronous path here (no triggerer); the end-to-end tests and the demo run deferred.
    kwargs.setdefault("deferrable", False)
    op = ProbePodOperator(task_id=f"probe_{spec.tool}", probe=spec.to_json(), fv_run=fv_run, **kwargs)
    op.execute(context(op.task_id))
    return op


@pytest.fixture
def kube(sim_kube: Any) -> Any:
    kube = sim_kube(DEMO_FLEET)
    kube.run = kube.store.ensure_run("probe-test", suite="weekly", backend="kubernetes")
    return kube


def stored(kube: Any, spec: ProbeSpec) -> dict[str, Any]:
    [probe] = kube.store.probes(kube.run, [spec.probe_key])
    return probe  # type: ignore[no-any-return]


def probe_pods(kube: Any) -> list[Any]:
    return list(kube.core.list_namespaced_pod(NS, label_selector="app.kubernetes.io/part-of=fleetval").items)


def test_a_reported_dcgm_failure_is_output_not_a_task_failure(kube: Any) -> None:
    spec = dcgm_diag_probe("r01-n03", level=2, gpus=8, run_key="t")
    run_probe(spec, kube.run)
    probe = stored(kube, spec)
    assert probe["spec"]["harness_error"] is None and probe["exit_code"] == 205  # memory: isolate-priority
    uuids, report = split_gpu_list(probe["raw"])
    assert len(uuids) == 8
    assert parse_dcgm(report).overall == "fail"
    assert probe_pods(kube) == []  # the finding is in the store; the pod is cleaned up


def test_a_command_missing_from_the_image_is_a_harness_failure(kube: Any) -> None:
    from airflow.exceptions import AirflowException

    good = nccl_probe(["r01-n02"], gpus_per_node=8, repeat=1, run_key="t")
    # The bare binary name, as the product once ran it: nccl-tests is not on the image's PATH.
    bare = ProbeSpec.from_json(
        {**good.to_json(), "probe_key": "t/bare", "args": ["exec all_reduce_perf -b 8 -e 8G -f 2 -g 8"]}
    )
    with pytest.raises(AirflowException):
        run_probe(bare, kube.run)
    probe = stored(kube, bare)
    assert "not found" in probe["raw"] and "127" in probe["spec"]["harness_error"]
    fixed = run_probe(good, kube.run)
    assert fixed is not None
    probe = stored(kube, good)
    assert probe["spec"]["harness_error"] is None
    assert "command not found" not in probe["raw"] and "Avg bus bandwidth" in probe["raw"]
    assert good.image == NCCL_TESTS_IMAGE


def test_the_exit_code_of_a_missing_binary_fails_the_task(kube: Any) -> None:
    from airflow.exceptions import AirflowException

    spec = ProbeSpec.from_json(
        {
            **dcgm_diag_probe("r01-n04", level=2, gpus=8, run_key="t").to_json(),
            "args": ["nvidia-smi -L && nv-hostengine >/dev/null && exec dcgmi-typo diag -r 2 -j"],
        }
    )
    with pytest.raises(AirflowException):
        run_probe(spec, kube.run)
    probe = stored(kube, spec)
    assert "127" in probe["spec"]["harness_error"]
    [pod] = probe_pods(kube)  # a failed probe pod is kept for forensics
    assert pod.status.phase == "Failed"


def test_a_pod_pending_at_its_startup_timeout_is_deleted(kube: Any) -> None:
    # r02-n08's GPU 2 was withdrawn (Xid 79): a probe for all 8 GPUs can never be scheduled.
    spec = dcgm_diag_probe("r02-n08", level=3, gpus=8, run_key="t")
    with pytest.raises(Exception, match=r"(?i)pod"):
        run_probe(spec, kube.run, startup_timeout_seconds=2)
    assert probe_pods(kube) == []  # not left to start later on a node back in service
    assert stored(kube, spec)["spec"]["harness_error"]


def test_a_single_node_nccl_exit_code_is_read_by_the_printed_version() -> None:
    from kubernetes.client import models as k8s

    from fleetval_airflow.probe_pod import harness_failure

    def pod(code: int) -> k8s.V1Pod:
        terminated = k8s.V1ContainerStateTerminated(exit_code=code)
        status = k8s.V1ContainerStatus(
            name="base", image="i", image_id="", ready=False, restart_count=0,
            state=k8s.V1ContainerState(terminated=terminated),
        )  # fmt: skip
        return k8s.V1Pod(status=k8s.V1PodStatus(phase="Failed", container_statuses=[status]))

    spec = nccl_probe(["r01-n01"], gpus_per_node=8, repeat=0, run_key="k")
    raw = "# nccl-tests version 2.20.0 (b4d5bee) nccl-headers=22105 nccl-library=22105\n"
    assert harness_failure(pod(7), spec, raw) is None  # wrong results in 2.20.0: the output decides
    usage = harness_failure(pod(6), spec, raw)
    assert usage is not None and "testInvalidUsage" in usage
    assert harness_failure(pod(6), spec, "# nThread 1 nGpus 8\n") is None  # no version: v2.17.3's 6
    assert harness_failure(pod(6), spec) is None  # no output to read: the declared codes decide
    assert harness_failure(pod(2), spec, raw) is not None
