"""Tasks of `checkpoint_resume_drill`: plan, interrupt, judge. The runs themselves are pod tasks
(`ProbePodOperator`, and `InterruptedRunOperator` for the two runs the drill interrupts).

fleetval is imported inside the tasks: the DAG processor parses this module on every cycle.
"""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk import get_current_context, task
from kubernetes.client.exceptions import ApiException

from fleetval.store.engine import outage_is_one_line
from fleetval_airflow.context import run_key as _run_key
from fleetval_airflow.probe_pod import ProbePodOperator

LOG_CHUNK = 4096
POD_APPEAR_S = 600.0  # the run pod's task starts beside the interrupter; scheduling may take a while


def _core() -> Any:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from kubernetes import client

    from fleetval_airflow import config

    return client.CoreV1Api(KubernetesHook(conn_id=config.KUBE_CONN_ID).api_client)


# What differs between drill pods; the rest of the pod (tolerations, security, cleanup) is common.
_PER_POD_FIELDS = (
    "name",
    "image",
    "cmds",
    "arguments",
    "env_vars",
    "labels",
    "annotations",
    "affinity",  # the node, by name (fleetval.probes.pod.node_affinity)
    "container_resources",
    "volumes",
    "volume_mounts",
    "active_deadline_seconds",
    "security_context",
)


class DrillPodOperator(ProbePodOperator):
    """One pod of the drill (`run`, a name from fleetval.ckpt.probe.run_names). Its node, claim and
    directory are chosen by the `plan` task, so the pod is built from the plan's XCom when the task
    runs; everything else is a probe pod like any other (raw output stored on completion)."""

    def __init__(self, *, run: str, **kwargs: Any) -> None:
        from fleetval.ckpt.contract import DRILL_IMAGE
        from fleetval.probes.pod import ProbeSpec

        placeholder = ProbeSpec(probe_key=run, tool="ckpt", node="planned", image=DRILL_IMAGE, command=())
        kwargs.setdefault("deferrable", False)  # short pods that report in their log
        super().__init__(probe=placeholder.to_json(), fv_run=0, **kwargs)
        self.run = run

    def execute(self, context: Any) -> Any:
        from fleetval.probes.pod import ProbeSpec, kpo_kwargs

        planned = context["ti"].xcom_pull(task_ids="plan")
        self.spec = ProbeSpec.from_json(planned["pods"][self.run])
        self.probe, self.fv_run = self.spec.to_json(), int(planned["fv_run"])
        built = kpo_kwargs(self.spec)
        for name in _PER_POD_FIELDS:
            setattr(self, name, built.get(name) or ({} if name in ("security_context", "labels") else None))
        return super().execute(context)


class InterruptedRunOperator(DrillPodOperator):
    """A training run the drill interrupts on purpose: its pod is deleted while it runs.

    The interrupter task beside it follows the pod's log and keeps it, so this task stores
    nothing, and the pod's disappearance is the plan, not a failure. Anything else (the pod never
    started, an API error before the pod ran) still fails it."""

    ui_color = "#f2e2d9"

    def store_output(self, raw: str, *, exit_code: int | None, error: str | None) -> None:
        self._stored = True  # the interrupter stores this run's log

    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except Exception as exc:
            if not self._deleted_by_drill():
                raise
            self.log.info("the drill deleted the pod, as planned (%s)", type(exc).__name__)
            return None

    def _deleted_by_drill(self) -> bool:
        pod = getattr(self, "pod", None)
        if pod is None or pod.metadata is None:
            return False  # no pod was ever created: a real failure
        try:
            remote = self.hook.get_pod(pod.metadata.name, pod.metadata.namespace)
        except ApiException as api_exc:
            return bool(api_exc.status == 404)
        return remote.metadata.deletion_timestamp is not None


@task
@outage_is_one_line
def plan() -> dict[str, Any]:
    """Check the form, pick the node, make sure the claim exists, open the fleetval run; returns
    the run and each pod's spec by run name (the pod tasks build their pods from it)."""
    from kubernetes import client

    from fleetval.ckpt.drill import DEFAULT_STEPS, DrillPlan
    from fleetval.ckpt.probe import SUITE, DrillTarget, drill_id, drill_specs
    from fleetval_airflow import config

    params = get_current_context()["params"]
    drill_plan = (
        DrillPlan.for_steps(params["steps"], grace_s=float(params["grace_s"]))
        if params["steps"] != DEFAULT_STEPS
        else DrillPlan(grace_s=float(params["grace_s"]))
    )
    kube = config.kube()
    node = params["node"]
    if node:
        if kube.node(node) is None:
            raise ValueError(f"node {node!r} is not in the cluster")
    else:
        candidates = [
            n.name
            for n in kube.list_nodes()
            if not n.unschedulable and (n.is_gpu_node or not params["gpus"]) and not n.taints
        ]
        if not candidates:
            raise ValueError("no schedulable node without taints to run the drill on; name one in `node`")
        node = sorted(candidates)[0]
    namespace = config.settings().namespace
    claim = params["claim"]
    core = _core()
    try:
        core.read_namespaced_persistent_volume_claim(claim, namespace)
        print(f"claim {claim}: exists (kept as it is)")
    except ApiException as exc:
        if exc.status != 404:
            raise
        spec: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": params["claim_size"]}},
        }
        if params["storage_class"]:
            spec["storageClassName"] = params["storage_class"]
        core.create_namespaced_persistent_volume_claim(
            namespace,
            client.V1PersistentVolumeClaim(
                metadata=client.V1ObjectMeta(name=claim, labels={"app.kubernetes.io/part-of": "fleetval"}),
                spec=spec,
            ),
        )
        print(f"claim {claim}: created ({params['storage_class'] or 'the default storage class'})")
    target = DrillTarget(
        node=node,
        claim=claim,
        image=params["image"],
        command=tuple(params["command"] or ()),
        gpus=int(params["gpus"]),
    )
    run_key = _run_key()
    fv_run = config.store().ensure_run(
        run_key,
        suite=SUITE,
        backend="kubernetes",
        meta={
            "run_key": run_key,
            "plan": drill_plan.to_json(),
            "target": target.to_json(),
            "drill": drill_id(run_key),
        },
    )
    specs = drill_specs(run_key, drill_plan, target)
    print(f"drill {drill_id(run_key)} on {node}, claim {claim}: {drill_plan.to_json()}")
    return {"fv_run": fv_run, "pods": {name: spec.to_json() for name, spec in specs.items()}}


def _find_pod(core: Any, namespace: str, probe_key: str, timeout_s: float) -> Any:
    from fleetval.probes.pod import PROBE_LABEL, probe_label

    deadline = time.monotonic() + timeout_s
    selector = f"{PROBE_LABEL}={probe_label(probe_key)}"
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        running = [
            p for p in pods if p.status and p.status.phase == "Running" and not p.metadata.deletion_timestamp
        ]
        if running:
            return running[0]
        time.sleep(0.5)
    return None


def _final_exit_code(
    core: Any, namespace: str, name: str, resource_version: str, timeout_s: float
) -> int | None:
    """The exit code the pod's container ended with, read from the pod's last update or its
    deletion (a pod deleted with a grace period keeps its status until it is gone)."""
    from kubernetes import watch

    code = None
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        namespace,
        field_selector=f"metadata.name={name}",
        resource_version=resource_version,
        timeout_seconds=max(1, int(timeout_s)),
    )
    for event in stream:
        pod = event["object"]
        for status in (pod.status.container_statuses if pod.status else None) or []:
            if status.name == "base" and status.state and status.state.terminated:
                code = int(status.state.terminated.exit_code)
        if event["type"] == "DELETED":
            break
    return code


@task(retries=0)  # a second interrupter would interrupt a run that is not there
@outage_is_one_line
def interrupt(planned: dict[str, Any], run: str, how: str) -> dict[str, Any]:
    """Wait for the run's hook line (`save_paused`: inside a save; `holding`: at a known step),
    then delete its pod: with no grace period (`kill`), or with the drill's (`sigterm`, as a
    preemption would). Follow the log to its end, keep it as the run's raw output, and report when
    the signal went and how the run ended."""
    from fleetval.ckpt.parse import parse_run_log
    from fleetval.probes import outputs as probe_outputs
    from fleetval.probes.pod import ProbeSpec
    from fleetval_airflow import config

    spec = ProbeSpec.from_json(planned["pods"][run])
    fv_run = int(planned["fv_run"])
    namespace = config.settings().namespace
    marker, grace = ("save_paused", 0) if how == "kill" else ("holding", None)
    if grace is None:
        grace = int(config.store().run_meta(fv_run)["plan"]["grace_s"])
    core = _core()
    pod = _find_pod(core, namespace, spec.probe_key, POD_APPEAR_S)
    report: dict[str, Any] = {"landed": False, "grace_s": grace, "how": how}
    if pod is None:
        missing = f"the run's pod was not running within {POD_APPEAR_S:g} s"
        probe_outputs.store_probe_outputs(
            config.store(),
            fv_run,
            [probe_outputs.probe_output(spec, "", exit_code=None, error=missing, finished_at=time.time())],
        )
        return {**report, "error": missing}
    name = pod.metadata.name
    response = core.read_namespaced_pod_log(
        name, namespace, container="base", follow=True, _preload_content=False
    )
    text, sent_at, deleted_rv = "", None, "0"
    for chunk in response.stream(LOG_CHUNK):
        text += chunk.decode("utf-8", errors="replace")
        if sent_at is None and f'"{marker}"' in text:
            found = [e for e in parse_run_log(text).of(marker) if isinstance(e.get("step"), int)]
            if found:
                report["at_step"] = int(found[0]["step"])
                report["landed"] = True
                sent_at = time.monotonic()
                deleted = core.delete_namespaced_pod(name, namespace, grace_period_seconds=grace)
                deleted_rv = str(deleted.metadata.resource_version)
                print(f"{how}: deleted pod {name} (grace {grace} s) at step {report['at_step']}")
    exit_code = None
    if sent_at is not None:
        report["seconds_to_exit"] = round(time.monotonic() - sent_at, 3)
        exit_code = _final_exit_code(core, namespace, name, deleted_rv, grace + 30)
        report["killed_after_grace"] = bool(grace) and report["seconds_to_exit"] >= grace
    report["exit_code"] = exit_code
    error = None if report["landed"] else f"the run ended before its {marker!r} line: nothing was interrupted"
    probe_outputs.store_probe_outputs(
        config.store(),
        fv_run,
        [probe_outputs.probe_output(spec, text, exit_code=exit_code, error=error, finished_at=time.time())],
    )
    print(report)
    return report


@task(trigger_rule="all_done", retries=0)  # judging again gives the same verdicts
@outage_is_one_line
def judge(planned: dict[str, Any], interruptions: dict[str, Any]) -> dict[str, Any]:
    """Judge the drill from the stored pod outputs; store the seven verdicts. The task fails when
    a criterion did not pass, so the run is red with the reasons in this log."""
    from fleetval.ckpt.drill import DrillPlan
    from fleetval.ckpt.judge import judge_drill
    from fleetval.ckpt.probe import DrillTarget, StoredRun, evidence, run_names
    from fleetval_airflow import config

    store = config.store()
    fv_run = int(planned["fv_run"])
    meta = store.run_meta(fv_run)
    run_key = meta["run_key"]
    plan = DrillPlan(**meta["plan"])
    target = DrillTarget(**{**meta["target"], "command": tuple(meta["target"]["command"])})
    keys = {f"{run_key}/{name}": name for name in run_names()}
    stored = {
        keys[row["probe_key"]]: StoredRun(
            row["raw"], row["exit_code"], (row.get("spec") or {}).get("harness_error")
        )
        for row in store.probes(fv_run, list(keys))
    }
    verdicts = judge_drill(evidence(plan, target, stored, interruptions or {}))
    store.add_verdicts(fv_run, verdicts)
    store.finish_run(fv_run)
    lines = [f"{v.result.value:>12}  {v.criterion}: {v.reason}" for v in verdicts]
    print("\n".join(lines))
    bad = [line for line, v in zip(lines, verdicts, strict=True) if v.result.value != "pass"]
    if bad:
        raise RuntimeError(f"{len(bad)} checkpoint criteria did not pass:\n" + "\n".join(bad))
    return {"verdicts": len(verdicts), "not_passed": 0}
