"""The shipped RBAC (deploy/rbac.yaml) as the API server's authorizer reads it, and the calls the
product made against the simulated clusters of this test session.

A call is granted when a rule of the runner's Role (its namespace only) or ClusterRole (every
namespace and cluster-scoped objects) names its API group, resource (`pods/log` for a subresource)
and verb. Calls from the tests' own clients (User-Agent `fleetval-tests`) are not the product's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, NamedTuple

import yaml

from fleetval.sim.kube.server import ApiCall
from tests.paths import ROOT

RBAC = ROOT / "deploy" / "rbac.yaml"
RUNNER = ("fleetval", "fleetval-runner")  # namespace, service account
TEST_AGENT = "fleetval-tests"
PRODUCT_CALLS: Counter[ApiCall] = Counter()


class Grant(NamedTuple):
    scope: str  # the Role's namespace, or "" for a ClusterRole
    group: str
    resource: str  # "pods" or "pods/log"
    verb: str


def runner_grants(docs: Iterable[dict[str, Any]] | None = None) -> set[Grant]:
    """Every (scope, group, resource, verb) the runner service account is bound to."""
    docs = list(docs if docs is not None else yaml.safe_load_all(RBAC.read_text()))
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs if d}
    grants: set[Grant] = set()
    for d in docs:
        if not d or d["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            (s.get("namespace"), s["name"]) == RUNNER for s in d["subjects"] if s["kind"] == "ServiceAccount"
        ):
            continue
        ref = d["roleRef"]
        namespace = d["metadata"].get("namespace", "")
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])]
        scope = namespace if d["kind"] == "RoleBinding" else ""
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants.add(Grant(scope, group, resource, verb))
    return grants


def grant_for(call: ApiCall, grants: set[Grant]) -> Grant | None:
    resource = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
    # The narrowest grant first: a Role's grant is the one a namespaced call uses.
    for scope in (call.namespace, "") if call.namespace else ("",):
        grant = Grant(scope or "", call.group, resource, call.verb)
        if grant in grants:
            return grant
    return None


def product_calls(calls: Counter[ApiCall]) -> Counter[ApiCall]:
    return Counter({c: n for c, n in calls.items() if c.agent != TEST_AGENT})


def check_server(calls: Counter[ApiCall]) -> None:
    """Every call the product made to one simulated cluster is granted; remember them all."""
    mine = product_calls(calls)
    PRODUCT_CALLS.update(mine)
    grants = runner_grants()
    denied = sorted({c._replace(agent="") for c in mine if grant_for(c, grants) is None})
    assert not denied, f"deploy/rbac.yaml does not grant calls the product made: {denied}"


def unused_grants(calls: Iterable[ApiCall]) -> list[Grant]:
    grants = runner_grants()
    used = {grant_for(c, grants) for c in calls}
    return sorted(grants - used)
