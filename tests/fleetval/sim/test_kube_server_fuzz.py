"""Hostile requests to the simulated API server: mutated pods, MPIJobs and nodes, malformed
patches, selectors and paging. Every answer is a well-formed response with the API server's
4xx codes (or success): never a dropped connection, never a 5xx, never a hang."""

from __future__ import annotations

import copy
import json
import random
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.paths import DEMO_FLEET
from tests.rbac import TEST_AGENT
from tests.simkube import SimKube

CASES = 400
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "labels": {"app": "x"}},
    "spec": {
        "nodeSelector": {"kubernetes.io/hostname": "r01-n01"},
        "restartPolicy": "Never",
        "activeDeadlineSeconds": 60,
        "containers": [
            {
                "name": "base",
                "image": "busybox:1.36",
                "command": ["/bin/sh", "-c"],
                "args": ["echo hi"],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ],
    },
}
MPIJOB: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "metadata": {"name": "j"},
    "spec": {"slotsPerWorker": 1, "runPolicy": {"backoffLimit": 0}, "mpiReplicaSpecs": {}},
}
ODD_VALUES: list[Any] = [
    None,
    "",
    "x" * 5000,
    -1,
    2**70,
    1.5,
    True,
    [],
    {},
    ["a", 1],
    {"$patch": "delete"},
    "٣",
    "\x00",
]


def mutate(doc: Any, rng: random.Random) -> Any:
    """Replace, delete or add one value somewhere in `doc`."""
    doc = copy.deepcopy(doc)
    paths: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append((node, k))
                walk(v)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                paths.append((node, i))
                walk(v)

    walk(doc)
    parent, key = rng.choice(paths)
    action = rng.random()
    if action < 0.2 and isinstance(parent, dict):
        del parent[key]
    elif action < 0.3 and isinstance(parent, dict):
        parent[f"extra{rng.randint(0, 9)}"] = rng.choice(ODD_VALUES)
    else:
        parent[key] = rng.choice(ODD_VALUES)
    return doc


def send(kube: SimKube, method: str, path: str, body: bytes | None, content_type: str) -> tuple[int, Any]:
    request = urllib.request.Request(kube.server.url + path, data=body, method=method)
    request.add_header("Authorization", f"Bearer {kube.server.token}")
    request.add_header("Content-Type", content_type)
    request.add_header("User-Agent", TEST_AGENT)  # hostile test traffic, not the product's calls
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def kube(sim_kube: Any) -> SimKube:
    return sim_kube(DEMO_FLEET)  # type: ignore[no-any-return]


def test_hostile_requests_get_api_answers(kube: SimKube) -> None:
    rng = random.Random(20261130)
    seen: dict[int, int] = {}
    for i in range(CASES):
        kind = rng.choice(["pod", "mpijob", "patch", "jsonpatch", "list", "raw"])
        if kind == "pod":
            body = mutate({**POD, "metadata": {**POD["metadata"], "name": f"p{i}"}}, rng)
            code, raw = send(
                kube,
                "POST",
                "/api/v1/namespaces/fleetval/pods",
                json.dumps(body).encode(),
                "application/json",
            )
        elif kind == "mpijob":
            body = mutate({**MPIJOB, "metadata": {"name": f"j{i}"}}, rng)
            path = "/apis/kubeflow.org/v2beta1/namespaces/fleetval/mpijobs"
            code, raw = send(kube, "POST", path, json.dumps(body).encode(), "application/json")
        elif kind == "patch":
            body = mutate(
                {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
                },
                rng,
            )
            ctype = rng.choice(
                ["application/strategic-merge-patch+json", "application/merge-patch+json", "text/plain"]
            )
            code, raw = send(kube, "PATCH", "/api/v1/nodes/r01-n02", json.dumps(body).encode(), ctype)
        elif kind == "jsonpatch":
            op = mutate([{"op": "add", "path": "/metadata/labels/z", "value": "1"}], rng)
            code, raw = send(
                kube, "PATCH", "/api/v1/nodes/r01-n03", json.dumps(op).encode(), "application/json-patch+json"
            )
        elif kind == "list":
            query = rng.choice(
                [
                    "labelSelector=a%20in%20(",
                    "fieldSelector=spec.bogus%3Dx",
                    "limit=-3",
                    "limit=abc",
                    "continue=%00%01",
                    "labelSelector=" + "a" * 300 + "%3Db",
                    "watch=true&timeoutSeconds=1",
                    "fieldSelector=status.phase!%3DRunning,spec.nodeName%3D",
                ]
            )
            code, raw = send(
                kube, "GET", f"/api/v1/namespaces/fleetval/pods?{query}", None, "application/json"
            )
        else:
            junk = rng.choice([b"{", b"[1,2", b"\xff\xfe", b"null", b"42", b'"text"', b"a: [b"])
            code, raw = send(kube, "POST", "/api/v1/namespaces/fleetval/pods", junk, "application/json")
        seen[code] = seen.get(code, 0) + 1
        assert code < 500, (kind, code, raw[:300])
        if code >= 400:
            status = json.loads(raw)
            assert status["kind"] == "Status" and status["code"] == code, raw[:300]
    assert {200, 201} & set(seen) and {400, 422} <= set(seen), seen
