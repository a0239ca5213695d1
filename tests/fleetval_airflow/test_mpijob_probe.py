"""Multi-node probes as MPIJobs against the simulated cluster (`fleetval sim serve`: the
mpi-operator's controller, Kueue admission), through the real kubernetes client and the provider's
hook: the pair probe operator on the worker and deferred (its trigger run with asyncio, as the
triggerer would), a reported NCCL failure, a job Kueue never admits, an mpirun that cannot start
nccl-tests, reattaching on a retry, bounded forensics, and the isolation operator deferring once
per round until it has located the bad node. The trigger's waiting rules run against a fake API."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from fleetval.nccl import judge_stored as nccl_judge
from fleetval.nccl import mpijob
from fleetval.nccl import plan as nccl_plan
from fleetval.nccl.probe import nccl_probe
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result
from fleetval_airflow.mpijobs import NOT_ADMITTED, OVERDUE, JobRef, MPIJobRunner, backoff, outcome, poll
from tests.nccl_lab import NETLAB, Lab

NS = "fleetval"
PAIR = ["r01-n01", "r02-n01"]


def context(task_id: str, try_number: int = 1) -> dict[str, Any]:
    ti = SimpleNamespace(
        dag_id="probe_test",
        task_id=task_id,
        map_index=-1,
        try_number=try_number,
        start_date=dt.datetime.now(dt.UTC),
        xcom_push=lambda **_: None,
    )
    return {"ti": ti, "run_id": "manual__probe_test", "dag": SimpleNamespace()}


def pair(nodes: list[str] | None = None, repeat: int = 0, **overrides: Any) -> ProbeSpec:
    spec = nccl_probe(
        nodes or PAIR,
        gpus_per_node=8,
        repeat=repeat,
        run_key="t",
        profile="p",
        scope="inter-2x8",
        fabric="ib",
    )
    return ProbeSpec.from_json({**spec.to_json(), **overrides})


def operator(spec: ProbeSpec, fv_run: int, **kwargs: Any) -> Any:
    from fleetval_airflow.mpijob_probe import MPIJobProbeOperator

    kwargs.setdefault("deferrable", False)
    return MPIJobProbeOperator(task_id="nccl_pair", probe=spec.to_json(), fv_run=fv_run, **kwargs)


def first_event(trigger: Any) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        gen = trigger.run()
        try:
            return (await asyncio.wait_for(gen.__anext__(), timeout=60)).payload  # type: ignore[no-any-return]
        finally:
            await gen.aclose()

    return asyncio.run(run())


@pytest.fixture
def kube(sim_kube: Any) -> Any:
    kube = sim_kube(NETLAB)
    kube.run = kube.store.ensure_run("mpijob-test", suite=nccl_plan.SUITE, backend="kubernetes")
    return kube


def stored(kube: Any, spec: ProbeSpec) -> dict[str, Any]:
    [probe] = kube.store.probes(kube.run, [spec.probe_key])
    return probe  # type: ignore[no-any-return]


def jobs(kube: Any) -> list[dict[str, Any]]:
    return list(kube.custom.list_namespaced_custom_object("kubeflow.org", "v2beta1", NS, "mpijobs")["items"])


def test_a_pair_probe_is_a_kueue_admitted_mpijob_whose_launcher_log_is_stored(kube: Any) -> None:
    spec = pair()
    result = operator(spec, kube.run).execute(context("nccl_pair"))
    assert result["outcome"] == "Succeeded" and result["exit_code"] == 0
    probe = stored(kube, spec)
    assert probe["spec"]["harness_error"] is None and probe["exit_code"] == 0
    assert probe["nodes"] == PAIR and probe["spec"]["mpijob"] == result["mpijob"]
    assert result["mpijob"] == f"{mpijob.mpijob_name(spec)}-t1"
    # the raw output is the launcher's: nccl-tests over both nodes, decoded as text
    assert "Avg bus bandwidth" in probe["raw"] and "b'" not in probe["raw"][:5]
    run = nccl_judge.repeat_from_probe(probe).run
    assert run is not None and run.nnodes == 2
    assert jobs(kube) == []  # a succeeded job is deleted
    events = kube.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={result['mpijob']}")
    assert any("Admitted" in (e.message or "") for e in events.items)  # Kueue let the gang in


def test_deferred_the_trigger_waits_and_the_task_resumes(kube: Any) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    from fleetval_airflow.triggers.mpijob import CLASSPATH, MPIJobTrigger

    spec = pair(["r01-n02", "r02-n02"])
    op = operator(spec, kube.run, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context("nccl_pair"))
    trigger = deferred.value.trigger
    assert deferred.value.method_name == "execute_complete"
    classpath, kwargs = trigger.serialize()
    assert classpath == CLASSPATH
    again = MPIJobTrigger(**kwargs)  # what the triggerer rebuilds from the metadata DB
    assert again.serialize() == (classpath, kwargs)
    event = first_event(again)
    assert event["status"] == "done" and list(event["outcomes"].values()) == ["Succeeded"]
    result = op.execute_complete(context("nccl_pair"), event)
    assert result["outcome"] == "Succeeded"
    assert "Avg bus bandwidth" in stored(kube, spec)["raw"] and jobs(kube) == []


def test_a_reported_nccl_failure_is_output_and_the_job_is_kept(kube: Any) -> None:
    spec = pair(["r01-n01", "r02-n07"])  # r02-n07: wrong results (nccl-tests 2.20.0 exits 7)
    result = operator(spec, kube.run).execute(context("nccl_pair"))
    assert result["outcome"] == "Failed" and result["exit_code"] == 7
    probe = stored(kube, spec)
    assert probe["spec"]["harness_error"] is None and "Out of bounds values" in probe["raw"]
    [job] = jobs(kube)  # kept for forensics
    assert job["metadata"]["name"] == result["mpijob"] and mpijob.job_state(job) == "Failed"


def test_mpirun_that_cannot_start_nccl_tests_is_a_harness_failure(kube: Any) -> None:
    from airflow.sdk.exceptions import AirflowException

    spec = pair()
    broken = ProbeSpec.from_json(
        {**spec.to_json(), "params": {**spec.params, "argv": ["all_reduce_prf", *spec.params["argv"][1:]]}}
    )
    with pytest.raises(AirflowException, match="before nccl-tests ran"):
        operator(broken, kube.run).execute(context("nccl_pair"))
    probe = stored(kube, broken)
    assert probe["exit_code"] == 1 and "before nccl-tests ran" in probe["spec"]["harness_error"]
    assert "unable to find the specified executable" in probe["raw"]  # the launcher's log is kept


def test_a_job_kueue_never_admits_is_withdrawn_and_an_error(
    kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowException

    monkeypatch.setenv("FLEETVAL_KUEUE_QUEUE", "no-such-queue")
    spec = pair()
    with pytest.raises(AirflowException, match="not admitted by Kueue"):
        operator(spec, kube.run, admission_timeout_s=1, poll_interval=0.2).execute(context("nccl_pair"))
    assert "not admitted by Kueue (queue no-such-queue)" in stored(kube, spec)["spec"]["harness_error"]
    assert jobs(kube) == []  # it cannot start later on nodes that have moved on


def test_a_retry_reattaches_to_a_queued_job_and_replaces_a_failed_one(kube: Any) -> None:
    runner = MPIJobRunner(kube.custom, kube.core, namespace=NS, queue="no-such-queue")
    spec = pair()
    first = runner.submit(spec, attempt=1)
    assert runner.submit(spec, attempt=2).name == first.name  # still queued: the same job
    runner.delete(first)
    wrong = pair(["r01-n01", "r02-n07"])
    ok = MPIJobRunner(kube.custom, kube.core, namespace=NS, queue="fleetval-validation")
    failed = ok.submit(wrong, attempt=1)
    assert ok.wait([failed], poll_interval=0.2) == {failed.name: "Failed"}
    retried = ok.submit(wrong, attempt=2)  # a failed job is kept beside its retry's
    assert retried.name == f"{mpijob.mpijob_name(wrong)}-t2" != failed.name
    assert ok.wait([retried], poll_interval=0.2) == {retried.name: "Failed"}
    assert len(jobs(kube)) == 2
    assert ok.prune_failed(keep=1) == [failed.name]  # forensics, bounded: the newest stays
    assert [j["metadata"]["name"] for j in jobs(kube)] == [retried.name]


def test_the_isolation_task_defers_once_per_round_until_it_locates_the_bad_node(kube: Any) -> None:
    """The sweep's pairs ran (here through the suite's steps); the isolation operator runs its
    group probes as MPIJobs on the simulated cluster, deferred, round after round."""
    from airflow.sdk.exceptions import TaskDeferred

    from fleetval_airflow.nccl_isolation import NcclIsolationOperator

    store, lab = kube.store, Lab()
    nodes = ["r01-n01", "r01-n03", "r01-n05", "r02-n02", "r02-n03", "r02-n04"]  # r02-n03: IB errors
    run_key = "post_upgrade_nccl_sweep/manual__iso"
    fv_run = store.ensure_run(run_key, suite=nccl_plan.SUITE, backend="kubernetes")
    plan = nccl_plan.plan_sweep(lab.list_nodes(), only=nodes)
    store.update_run_meta(fv_run, plan=plan.to_json(), run_key=run_key)
    for kind in nccl_plan.KINDS:
        for wave in range(len(plan.waves(kind))):
            lab.run(store, fv_run, nccl_plan.wave_specs(plan, kind, wave, run_key=run_key))
    specs = nccl_plan.sweep_specs(plan, run_key=run_key)
    nccl_judge.judge_sweep(store, fv_run, specs, lookup=nccl_judge.promoted_lookup(store))

    op = NcclIsolationOperator(task_id="isolate", fv_run=fv_run, deferrable=True, poll_interval=0.5)

    def attempt(call: Any) -> tuple[Any, Any]:
        try:
            return call(), None
        except TaskDeferred as deferred:
            return None, deferred

    result, deferred = attempt(lambda: op.execute(context("isolate")))
    deferrals = 0
    while deferred is not None:
        deferrals += 1
        assert deferred.method_name == "resume" and deferrals < 30
        event = first_event(deferred.trigger)
        result, deferred = attempt(lambda event=event: op.resume(context("isolate"), event))
    assert result["bad"] == ["r02-n03"] and result["undetermined"] == []
    assert deferrals == result["rounds"] < 3 * result["probes_used"]  # one repeat of a round's pairs each
    isolation = store.run_meta(fv_run)["isolation"]
    assert isolation["bad"] == ["r02-n03"]
    group_probes = [p for p in store.probes(fv_run, with_raw=False) if "/isolate/" in p["probe_key"]]
    assert len(group_probes) == 3 * result["probes_used"] and all(p["spec"]["mpijob"] for p in group_probes)
    located = [r for r in store.verdicts(fv_run) if r["rule_id"] == "nccl.isolation.located"]
    assert [(r["subject"], r["evidence"]["failed_criteria"]) for r in located] == [
        ("r02-n03", ["D-NET-NCCL-03"])
    ]


# --- waiting rules, without a cluster --------------------------------------------------------


def ref(**kw: Any) -> JobRef:
    return JobRef(
        **{"name": "j", "namespace": NS, "probe": pair().to_json(), "admit_by": 100.0, "end_by": 200.0, **kw}
    )


def job(*conditions: str, suspend: bool = False) -> dict[str, Any]:
    return {
        "spec": {"runPolicy": {"suspend": suspend}},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


@pytest.mark.parametrize(
    ("found", "now", "expected"),
    [
        (job("Created", "Suspended", suspend=True), 50.0, None),  # queued: wait
        (job("Created", "Suspended", suspend=True), 150.0, NOT_ADMITTED),  # Kueue never admitted it
        (job("Created"), 150.0, None),  # admitted, workers starting: wait for its run deadline
        (job("Created", "Running"), 250.0, OVERDUE),
        (job("Created", "Succeeded"), 999.0, "Succeeded"),
        (job("Created", "Failed"), 10.0, "Failed"),
        (None, 10.0, "Gone"),
    ],
)
def test_when_a_wait_ends(found: dict[str, Any] | None, now: float, expected: str | None) -> None:
    assert outcome(found, ref(), now) == expected


class FakeCustom:
    def __init__(self, states: dict[str, Any]) -> None:
        self.states = states

    def get_namespaced_custom_object(self, *, name: str, **api: Any) -> dict[str, Any]:
        found = self.states[name]
        if isinstance(found, Exception):
            raise found
        return found  # type: ignore[no-any-return]


def test_poll_answers_once_every_job_is_done() -> None:
    a, b = ref(name="a"), ref(name="b")
    custom = FakeCustom({"a": job("Succeeded"), "b": job("Running")})
    assert poll(custom, [a, b], 10.0) is None
    custom.states["b"] = ApiException(status=404)
    assert poll(custom, [a, b], 10.0) == {"a": "Succeeded", "b": "Gone"}
    custom.states["b"] = ApiException(status=500)
    with pytest.raises(ApiException):
        poll(custom, [a, b], 10.0)
    assert [backoff(i) for i in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_an_api_error_while_deferred_fails_the_wait_not_the_triggerer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fleetval_airflow.triggers.mpijob import MPIJobTrigger

    trigger = MPIJobTrigger([ref().to_json()], poll_interval=0.01)
    monkeypatch.setattr(
        trigger, "_custom", lambda: FakeCustom({"j": ApiException(status=503, reason="down")})
    )
    event = first_event(trigger)
    assert event["status"] == "error" and "503" in event["message"] and event["jobs"] == [ref().to_json()]
    with pytest.raises(ValueError, match="at least one job"):
        MPIJobTrigger([])


# --- the preflight and the versioned exit codes ---------------------------------------------------

NCCL_2_20 = "# nccl-tests version 2.20.0 (b4d5bee) nccl-headers=22105 nccl-library=22105\n"


def worker_container(job: dict[str, Any]) -> dict[str, Any]:
    [container] = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def test_workers_request_the_rdma_device_their_nodes_advertise(kube: Any) -> None:
    """The simulated nodes advertise the RDMA shared device plugin's pool: each worker requests
    one (found in the nodes' allocatable); a configured resource wins."""
    runner = MPIJobRunner(kube.custom, kube.core, namespace=NS, queue="no-such-queue")
    runner.submit(pair(), attempt=1)
    [job] = jobs(kube)
    resources = worker_container(job)["resources"]
    assert resources["requests"]["rdma/rdma_shared_device_a"] == "1"
    assert resources["limits"]["rdma/rdma_shared_device_a"] == "1"
    runner.delete(runner._ref(pair(), job))
    configured = MPIJobRunner(
        kube.custom, kube.core, namespace=NS, queue="no-such-queue", worker_devices=[("rdma/ib", "1")]
    )
    configured.submit(pair(["r01-n02", "r02-n02"]), attempt=1)
    [job] = jobs(kube)
    assert worker_container(job)["resources"]["limits"].get("rdma/ib") == "1"
    assert "rdma/rdma_shared_device_a" not in worker_container(job)["resources"]["limits"]


def test_a_cluster_without_fleetvals_mpijob_api_fails_the_task_without_retry(
    kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from fleetval.nccl import preflight

    monkeypatch.setattr(preflight, "served_kubeflow_versions", lambda custom: {"v1": ["mpijobs"]})
    spec = pair()
    with pytest.raises(AirflowFailException, match="training-operator"):
        operator(spec, kube.run).execute(context("nccl_pair"))
    error = stored(kube, spec)["spec"]["harness_error"]
    assert error.startswith("ProbeConfigError: ") and "mpi-operator >= v0.4" in error
    assert jobs(kube) == []  # stopped before any MPIJob API call


def test_nodes_without_an_rdma_device_are_a_configuration_error(
    kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from fleetval.nccl import preflight

    monkeypatch.setattr(
        preflight, "node_allocatable", lambda core, nodes: {n: {"nvidia.com/gpu": "8"} for n in nodes}
    )
    spec = pair()
    with pytest.raises(AirflowFailException, match="FLEETVAL_RDMA_RESOURCE is not set"):
        operator(spec, kube.run).execute(context("nccl_pair"))
    assert "fall back to TCP sockets" in stored(kube, spec)["spec"]["harness_error"]
    assert jobs(kube) == []


def test_the_job_is_created_with_strict_field_validation(kube: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulated API server rejects an unknown field under fieldValidation=Strict: the refusal
    is the task's error, never a job created without the field."""
    manifest = mpijob.mpijob_manifest

    def with_unknown_field(*args: Any, **kwargs: Any) -> dict[str, Any]:
        body = manifest(*args, **kwargs)
        body["spec"]["noSuchField"] = True
        return body

    monkeypatch.setattr(mpijob, "mpijob_manifest", with_unknown_field)
    runner = MPIJobRunner(kube.custom, kube.core, namespace=NS, queue="no-such-queue")
    with pytest.raises(ApiException) as rejected:
        runner.submit(pair(), attempt=1)
    assert "noSuchField" in str(rejected.value.body) and jobs(kube) == []
    assert runner.mpi_operator == mpijob.MPI_OPERATOR_V05  # not mistaken for v0.4


class V04Custom:
    """A CustomObjectsApi of an mpi-operator v0.4 cluster: creates are validated against v0.4.0's
    real CRD by the project's validator and refused with the API server's 400 `Status` body."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.refused = 0

    def list_namespaced_custom_object(self, **_: Any) -> dict[str, Any]:
        return {"items": []}

    def create_namespaced_custom_object(
        self, *, body: dict[str, Any], field_validation: str, **_: Any
    ) -> Any:
        from fleetval.k8s.validation import ApiError, check_custom, load_crd_release

        crd = load_crd_release("kubeflow.org", "mpijobs", "v0.4.0")
        try:
            kept, _ = check_custom(copy.deepcopy(body), crd, "v2beta1", field_validation=field_validation)
        except ApiError as refused:
            self.refused += 1
            exc = ApiException(status=refused.code, reason="Bad Request")
            exc.body = json.dumps(refused.body)
            raise exc from None
        self.created.append(kept)
        return kept


def test_on_mpi_operator_v04_the_job_is_recreated_in_its_form(monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetval.nccl import preflight

    monkeypatch.setattr(preflight, "served_kubeflow_versions", lambda custom: {"v2beta1": ["mpijobs"]})
    custom = V04Custom()
    runner = MPIJobRunner(custom, None, namespace=NS, queue="q", worker_devices=[("rdma/ib", "1")])
    ref = runner.submit(pair(), attempt=1)
    assert (custom.refused, runner.mpi_operator) == (1, mpijob.MPI_OPERATOR_V04)
    [job] = custom.created
    assert job["metadata"]["name"] == ref.name == f"{mpijob.mpijob_name(pair())}-t1"
    assert "launcherCreationPolicy" not in job["spec"]
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert [c["name"] for c in launcher["initContainers"]] == [mpijob.WAIT_FOR_WORKERS]
    # The runner remembers: the next probe goes straight to the v0.4 form.
    runner.submit(pair(["r01-n02", "r02-n02"]), attempt=1)
    assert custom.refused == 1 and len(custom.created) == 2


def test_on_a_v04_simulator_a_healthy_pair_passes(
    sim_kube: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """netlab on the simulated mpi-operator v0.4: the create falls back to the v0.4 form, the
    launcher is created with the workers (its init container waits for them; the simulated
    kubelet does not run init containers) and the probe's output judges the pair a pass."""
    fleet = tmp_path / "netlab-mpi-v04.yaml"
    fleet.write_text(NETLAB.read_text() + "mpi_operator: v0.4\n")
    kube = sim_kube(fleet)
    built: list[str] = []
    manifest = mpijob.mpijob_manifest

    def recorded(*args: Any, **kwargs: Any) -> dict[str, Any]:
        built.append(kwargs["mpi_operator"])
        return manifest(*args, **kwargs)

    monkeypatch.setattr(mpijob, "mpijob_manifest", recorded)
    fv_run = kube.store.ensure_run("mpijob-v04", suite=nccl_plan.SUITE, backend="kubernetes")
    spec = pair()
    result = operator(spec, fv_run).execute(context("nccl_pair"))
    assert result["outcome"] == "Succeeded" and result["exit_code"] == 0
    assert built == [mpijob.MPI_OPERATOR_V05, mpijob.MPI_OPERATOR_V04]  # refused, then v0.4's form
    [probe] = kube.store.probes(fv_run, [spec.probe_key])
    assert probe["spec"]["harness_error"] is None
    events = kube.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={result['mpijob']}")
    assert any("Admitted" in (e.message or "") for e in events.items)
    [outcome] = nccl_judge.judge_stored_nccl(
        kube.store, fv_run, [spec.probe_key], lookup=lambda p, s: nccl_judge.BaselineRef(p, s)
    )
    # One repeat and no promoted baseline: bandwidth and stability are inconclusive; every
    # criterion a single run decides (transport, errors, correctness...) passes.
    results = {v.criterion: v.result for v in outcome.verdicts}
    assert {results[c] for c in nccl_judge.SINGLE_RUN_CRITERIA} == {Result.PASS}, results
    assert outcome.result is Result.INCONCLUSIVE and not outcome.failed


def test_the_launchers_exit_code_is_read_by_the_printed_nccl_tests_version() -> None:
    from fleetval_airflow.mpijobs import launcher_failure

    spec = pair()
    table = NCCL_2_20 + "# nThread 1 nGpus 8 minBytes 8\n# Out of bounds values : 3 FAILED\n"
    assert launcher_failure(7, spec, "Failed", "job", table) is None  # wrong results: the output decides
    usage = launcher_failure(6, spec, "Failed", "job", table)
    assert usage is not None and "testInvalidUsage" in usage  # 6 from v2.17.7 on: the harness
    internal = launcher_failure(1, spec, "Failed", "job", table)
    assert internal is not None and "testInternalError" in internal
    old = "# nThread 1 nGpus 8 minBytes 8\n# Out of bounds values : 3 FAILED\n"  # no version line
    assert launcher_failure(1, spec, "Failed", "job", old) is None


def test_a_v04_launcher_whose_workers_never_answered_is_a_harness_error() -> None:
    """Its `wait-for-workers` init container timed out: the job failed with no launcher exit code,
    and the error is the wait's own message, never a verdict about the nodes."""
    from kubernetes.client import models as k8s

    message = "fleetval: MPIJob worker j-worker-1.j-worker.fleetval.svc not reachable on port 22 within 600s"
    waited = k8s.V1ContainerState(terminated=k8s.V1ContainerStateTerminated(exit_code=1, message=message))
    launcher = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="j-launcher-abcde", namespace=NS),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="launcher")]),
        status=k8s.V1PodStatus(
            phase="Failed",
            init_container_statuses=[
                k8s.V1ContainerStatus(
                    name=mpijob.WAIT_FOR_WORKERS,
                    state=waited,
                    image="i",
                    image_id="",
                    ready=False,
                    restart_count=0,
                )
            ],
            container_statuses=[
                k8s.V1ContainerStatus(
                    name="launcher",
                    state=k8s.V1ContainerState(waiting=k8s.V1ContainerStateWaiting(reason="PodInitializing")),
                    image="i",
                    image_id="",
                    ready=False,
                    restart_count=0,
                )
            ],
        ),
    )

    class Core:
        def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
            return SimpleNamespace(items=[launcher])

        def read_namespaced_pod_log(self, *args: Any, **kwargs: Any) -> Any:
            raise ApiException(status=400, reason="container is waiting to start: PodInitializing")

    runner = MPIJobRunner(None, Core(), namespace=NS, queue="q", clock=lambda: 0.0)
    output = runner.collect(JobRef("j", NS, pair().to_json(), admit_by=1.0, end_by=2.0), "Failed")
    assert output.exit_code is None and output.raw == ""
    assert output.error == f"the MPIJob launcher's wait for its workers failed: {message}"
