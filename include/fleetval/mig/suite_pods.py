"""Pods the suite runs itself, in the run's namespace: the filler on the isolation probes'
neighbours, and the busy test's work (a filler of one instance)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from fleetval.mig import isolation
from fleetval.mig.suite_run import MigRun


def fill_pod(run: MigRun, node: str, profile: str, count: int, *, what: str) -> dict[str, Any]:
    """A filler of `count` instances of `profile` on `node`, named for the run, `what` it is for and
    the node (the same name on a retry, so the retry replaces it)."""
    return isolation.fill_pod(
        node,
        profile,
        count,
        name=_pod_name(run.run_key, what, node),
        namespace=run.pod_namespace,
        image=run.image,
    )


def delete_pod(run: MigRun, name: str) -> None:
    try:
        run.core.delete_namespaced_pod(name, run.pod_namespace, grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:  # gone already is what was wanted
            raise


def _pod_name(run_key: str, what: str, node: str) -> str:
    digest = hashlib.sha256(f"{run_key}/{what}/{node}".encode()).hexdigest()[:8]
    return f"fleetval-mig-{what}-{digest}"


def logs(run: MigRun, name: str) -> str:
    """A pod's log as text (raw: the client's own decoding of a text/plain body is not the bytes)."""
    try:
        response = run.core.read_namespaced_pod_log(
            name, run.pod_namespace, container="fill", _preload_content=False
        )
    except ApiException:
        return ""
    return bytes(response.data).decode("utf-8", errors="replace")


def start_pods(run: MigRun, pods: Mapping[str, dict[str, Any]]) -> dict[str, str]:
    """Create each node's pod and wait (up to the run's `watch_s`) until its log says every device is
    filled; the pods' names."""
    names = {}
    for node, body in pods.items():
        delete_pod(run, body["metadata"]["name"])  # one a killed run left behind goes first
        run.core.create_namespaced_pod(run.pod_namespace, body)
        names[node] = str(body["metadata"]["name"])
    begin = run.clock()
    waiting = set(names)
    while waiting and run.clock() - begin < run.watch_s:
        for node in sorted(waiting):
            if "filled-all" in logs(run, names[node]):
                waiting.discard(node)
        if waiting:
            run.sleep(run.poll_s)
    return names
