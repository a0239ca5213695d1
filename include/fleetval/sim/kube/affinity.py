"""kube-scheduler's InterPodAffinity filter, the one the scheduling filters in `fleetval.k8s.scheduling`
leave out: an MPIJob's workers spread one per node by required pod anti-affinity on
`kubernetes.io/hostname`.

As the plugin's Filter does (kube-scheduler `framework/plugins/interpodaffinity/filtering.go`), in
its order: the pod's required affinity terms (each needs a matching pod in the node's topology
domain, unless no pod anywhere matches and the pod matches its own term: the first pod of a
group), the pod's required anti-affinity terms (no matching pod in the domain), then the required
anti-affinity terms of the pods already placed (the incoming pod must not match one whose domain
is the node's). A node without the term's topology key is no domain: affinity fails there,
anti-affinity holds. Term namespaces: `namespaces` plus those `namespaceSelector` selects (`{}`
all), the pod's own when both are empty. Preferred terms only score, so they are not modelled;
neither are `matchLabelKeys` / `mismatchLabelKeys`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from fleetval.k8s.selectors import LabelSelector, Operator, Requirement

AFFINITY_MISMATCH: Final = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_MISMATCH: Final = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_MISMATCH: Final = "node(s) didn't satisfy existing pods anti-affinity rules"

_OPERATORS: Final = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}


def label_selector(selector: Mapping[str, Any] | None) -> LabelSelector | None:
    """metav1.LabelSelectorAsSelector: None (nothing) for a null selector, everything for `{}`."""
    if selector is None:
        return None
    requirements = [
        Requirement(str(k), Operator.EQUALS, (str(v),))
        for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or []:
        operator = _OPERATORS.get(str(expression.get("operator")))
        if operator is None:
            return None  # an invalid selector selects nothing
        values = tuple(str(v) for v in expression.get("values") or ())
        requirements.append(Requirement(str(expression.get("key", "")), operator, values))
    return LabelSelector(tuple(requirements))


def _required(pod: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    return [t for t in terms if isinstance(t, Mapping)]


def has_required_anti_affinity(pod: Mapping[str, Any]) -> bool:
    return bool(_required(pod, "podAntiAffinity"))


class _Term:
    def __init__(
        self,
        owner: Mapping[str, Any],
        term: Mapping[str, Any],
        namespace_labels: Mapping[str, Mapping[str, str]],
    ) -> None:
        self.topology_key = str(term.get("topologyKey") or "")
        self.selector = label_selector(term.get("labelSelector"))
        names = {str(n) for n in term.get("namespaces") or []}
        ns_selector = term.get("namespaceSelector")
        self.all_namespaces = False
        if ns_selector is not None:
            chosen = label_selector(ns_selector)
            if chosen is not None and chosen.empty:
                self.all_namespaces = True
            elif chosen is not None:
                names |= {ns for ns, labels in namespace_labels.items() if chosen.matches(labels)}
        elif not names:
            names = {str((owner.get("metadata") or {}).get("namespace") or "")}
        self.namespaces = names

    def matches(self, pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        if not self.all_namespaces and str(meta.get("namespace") or "") not in self.namespaces:
            return False
        return self.selector is not None and self.selector.matches(meta.get("labels"))


def _domain(node: Mapping[str, Any], key: str) -> str | None:
    return ((node.get("metadata") or {}).get("labels") or {}).get(key)


def inter_pod_affinity_reason(
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    nodes: Mapping[str, Mapping[str, Any]],
    pods_by_node: Mapping[str, Sequence[Mapping[str, Any]]],
    namespace_labels: Mapping[str, Mapping[str, str]],
    anti_affinity_pods: Iterable[tuple[str, Mapping[str, Any]]] = (),
) -> str | None:
    """None when the InterPodAffinity filter passes `pod` on `node`, else its reason.

    `pods_by_node` holds the placed (non-terminal) pods by node name; `anti_affinity_pods` is
    `(node name, pod)` for the placed pods that have required anti-affinity terms (the caller
    keeps that short list, so pods without such terms cost nothing)."""

    def in_domain(key: str) -> Iterable[Mapping[str, Any]]:
        value = _domain(node, key)
        if value is None:
            return
        for name, placed in pods_by_node.items():
            other = nodes.get(name)
            if other is not None and _domain(other, key) == value:
                yield from placed

    affinity = [_Term(pod, t, namespace_labels) for t in _required(pod, "podAffinity")]
    if affinity:
        if any(_domain(node, t.topology_key) is None for t in affinity):
            return AFFINITY_MISMATCH
        if not all(any(t.matches(p) for p in in_domain(t.topology_key)) for t in affinity):
            anywhere = any(t.matches(p) for t in affinity for placed in pods_by_node.values() for p in placed)
            if anywhere or not all(t.matches(pod) for t in affinity):
                return AFFINITY_MISMATCH
    for term in (_Term(pod, t, namespace_labels) for t in _required(pod, "podAntiAffinity")):
        if any(term.matches(p) for p in in_domain(term.topology_key)):
            return ANTI_AFFINITY_MISMATCH
    for name, placed in anti_affinity_pods:
        other = nodes.get(name)
        if other is None:
            continue
        for raw in _required(placed, "podAntiAffinity"):
            term = _Term(placed, raw, namespace_labels)
            value = _domain(other, term.topology_key)
            if value is not None and _domain(node, term.topology_key) == value and term.matches(pod):
                return EXISTING_ANTI_AFFINITY_MISMATCH
    return None
