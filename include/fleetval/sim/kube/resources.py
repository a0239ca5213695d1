"""The API resources the simulated server serves: core v1 kinds, batch/v1 Jobs (the mpi-operator's
launcher is one), apps/v1 Deployments (stored, not run) and the custom resources of the upstream
CRDs fleetval uses (MPIJob, Kueue, ClusterPolicy, NVIDIADriver)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Final


@dataclass(frozen=True, slots=True)
class Resource:
    group: str  # "" for core
    version: str
    plural: str
    kind: str
    namespaced: bool
    strategic: bool = False  # core kinds accept strategic-merge patches; custom resources answer 415

    @property
    def key(self) -> str:
        """How objects of this resource are keyed in the store: "v1/pods", "kubeflow.org/v2beta1/mpijobs"."""
        return f"{self.group + '/' if self.group else ''}{self.version}/{self.plural}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def group_resource(self) -> str:
        """How the API server names the resource in messages: `pods`, `mpijobs.kubeflow.org`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def is_core(self) -> bool:
        return self.group == ""

    @property
    def builtin(self) -> bool:
        """Validated against the Kubernetes OpenAPI schema (core and batch), not a CRD."""
        return self.group in ("", "batch", "apps")


CORE: Final = (
    Resource("", "v1", "pods", "Pod", True, strategic=True),
    Resource("", "v1", "events", "Event", True, strategic=True),
    Resource("", "v1", "nodes", "Node", False, strategic=True),
    Resource("", "v1", "namespaces", "Namespace", False, strategic=True),
    Resource("", "v1", "configmaps", "ConfigMap", True, strategic=True),
    Resource("", "v1", "secrets", "Secret", True, strategic=True),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True, strategic=True),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, strategic=True),
    Resource("batch", "v1", "jobs", "Job", True, strategic=True),
    # Stored only (no controller runs them): Kueue's own, so a client can read the version it claims.
    Resource("apps", "v1", "deployments", "Deployment", True, strategic=True),
)


@cache
def all_resources() -> tuple[Resource, ...]:
    from fleetval.k8s.validation import load_crds

    custom = [
        Resource(crd.group, version, crd.plural, crd.kind, crd.namespaced)
        for crd in load_crds().values()
        for version in crd.served_versions
    ]
    return CORE + tuple(custom)


def find(group: str, version: str, plural: str) -> Resource | None:
    for res in all_resources():
        if (res.group, res.version, res.plural) == (group, version, plural):
            return res
    return None


def by_kind(kind: str) -> Resource:
    for res in all_resources():
        if res.kind == kind:
            return res
    raise KeyError(kind)
