"""Label selectors, field selectors and node-selector terms behave and fail as the API server's do."""

from __future__ import annotations

from typing import Any

import pytest

from fleetval.k8s.selectors import (
    Operator,
    SelectorError,
    label_key_errors,
    label_selector_from_set,
    new_requirement,
    node_selector_terms_match,
    parse_field_selector,
    parse_label_selector,
)

# Label values as the provider's make_safe_label_value writes them: run ids lose ':' and '+'
# and, having changed, get a 9-hex-digit hash suffix.
KPO_RUN_ID = "manual__2026-01-01T0000000000-daff4c10d"
KPO_SCHEDULED_RUN_ID = "scheduled__2026-03-04T050607.1234560000-a2130b3a3"
KPO_POD_LABELS = {
    "dag_id": "fleetval_dcgm_diag",
    "task_id": "probe_node.r01-n03",
    "run_id": KPO_RUN_ID,
    "kubernetes_pod_operator": "True",
    "try_number": "1",
}


def kpo_find_pod_selector(labels: dict[str, str]) -> str:
    """What KubernetesPodOperator._build_find_pod_label_selector sends."""
    ti_labels = {k: v for k, v in labels.items() if k != "try_number"}
    pairs = ",".join(f"{k}={v}" for k, v in sorted(ti_labels.items()))
    return f"{pairs},already_checked!=True,!airflow-worker"


LABELS = {"app": "nccl", "tier": "gpu", "gpus": "8", "empty": ""}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("app=nccl", True),
        ("app==nccl", True),
        ("app=dcgm", False),
        ("app!=dcgm", True),
        ("app!=nccl", False),
        ("missing!=x", True),  # != also selects objects without the key
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("app in (dcgm,nccl)", True),
        ("app in (dcgm)", False),
        ("missing in (x)", False),
        ("app notin (dcgm,xid)", True),
        ("app notin (nccl)", False),
        ("missing notin (x)", True),  # notin also selects objects without the key
        ("gpus>4", True),
        ("gpus>8", False),
        ("gpus<9", True),
        ("app>1", False),  # a non-integer label value never compares
        ("missing<100", False),
        ("empty=", True),
        ("empty in (,x)", True),
        ("app in (,nccl)", True),
        ("app=nccl,tier=gpu", True),
        ("app=nccl,tier=cpu", False),
        ("  app = nccl ,\ttier\n==gpu  ", True),
        ("in in (in)", False),  # "in" is a key and a value where a value may stand
    ],
)
def test_label_selector_operators(selector: str, expected: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is expected


def test_the_empty_selector_matches_everything_including_no_labels() -> None:
    assert parse_label_selector("").matches(None)
    assert parse_label_selector("").empty
    assert not parse_label_selector("a").matches(None)
    assert parse_label_selector("!a").matches(None)


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("a=b,", "found '', expected: identifier after ','"),
        (",a", "found ',', expected: !, identifier, or 'end of string'"),
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
        ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
        ("a=(", "unable to parse requirement: found '(', expected: identifier"),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
        ("!!a", "unable to parse requirement: found '!', expected: identifier"),
        ("a!b", "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt"),
        (
            "x>abc",
            'unable to parse requirement: values[0]: Invalid value: "abc": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
    ],
)
def test_label_selector_syntax_errors_are_worded_like_the_api_server(selector: str, message: str) -> None:
    with pytest.raises(SelectorError) as error:
        parse_label_selector(selector)
    assert str(error.value) == message


def test_invalid_keys_and_values_are_rejected_with_the_validation_message() -> None:
    with pytest.raises(SelectorError) as error:
        parse_label_selector("-a=b")
    assert str(error.value) == (
        'unable to parse requirement: <nil>: Invalid value: "-a": name part must consist of alphanumeric '
        "characters, '-', '_' or '.', and must start and end with an alphanumeric character "
        "(e.g. 'MyName',  or 'my.name',  or '123-abc', "
        "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    )
    with pytest.raises(
        SelectorError, match=r"values\[0\]\[a\]: Invalid value: \"b\$\": a valid label must be"
    ):
        parse_label_selector("a=b$")
    with pytest.raises(SelectorError, match="must be no more than 63 bytes"):
        parse_label_selector("a=" + "x" * 64)
    with pytest.raises(SelectorError, match="a valid label key must consist of"):
        parse_label_selector("a/b/c")
    assert parse_label_selector("a=" + "x" * 63).matches({"a": "x" * 63})


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("app", True),
        ("fleetval.io/probe-key", True),
        ("kubernetes.io/hostname", True),
        ("A.b_c-9", True),
        ("x" * 63, True),
        ("x" * 64, False),
        ("Example.com/name", False),  # the prefix is a lowercase DNS subdomain
        ("/name", False),
        ("example.com/", False),
        ("-name", False),
        ("name_", False),
    ],
)
def test_label_key_validation(key: str, valid: bool) -> None:
    assert (label_key_errors(key) == []) is valid


@pytest.mark.parametrize("run_id", [KPO_RUN_ID, KPO_SCHEDULED_RUN_ID])
def test_the_kubernetes_pod_operators_find_pod_selector_parses_and_selects_its_pod(run_id: str) -> None:
    labels = {**KPO_POD_LABELS, "run_id": run_id}
    selector = parse_label_selector(kpo_find_pod_selector(labels))
    assert selector.matches(labels)
    assert not selector.matches({**labels, "already_checked": "True"})
    assert not selector.matches({**labels, "airflow-worker": "123"})
    assert not selector.matches(
        {**labels, "run_id": KPO_SCHEDULED_RUN_ID if run_id == KPO_RUN_ID else KPO_RUN_ID}
    )
    assert str(selector).startswith("!airflow-worker,already_checked!=True,dag_id=fleetval_dcgm_diag")


def test_the_kubernetes_executors_selectors_parse() -> None:
    assert parse_label_selector("airflow-worker=42,airflow_executor_done!=True").matches(
        {"airflow-worker": "42"}
    )
    assert parse_label_selector("airflow-worker notin (1,2)").matches({"airflow-worker": "3"})


def test_label_selector_from_set_requires_every_pair() -> None:
    selector = label_selector_from_set({"kubernetes.io/hostname": "r01-n03"})
    assert selector.matches({"kubernetes.io/hostname": "r01-n03", "other": "x"})
    assert not selector.matches({"kubernetes.io/hostname": "r01-n04"})
    assert not selector.matches({})
    assert label_selector_from_set(None).matches({})


def test_new_requirement_checks_the_number_of_values() -> None:
    with pytest.raises(SelectorError, match="values set can't be empty"):
        new_requirement("a", Operator.IN, [])
    with pytest.raises(SelectorError, match="exactly one value is required"):
        new_requirement("a", Operator.GREATER_THAN, ["1", "2"])
    with pytest.raises(SelectorError, match="values set must be empty"):
        new_requirement("a", Operator.EXISTS, ["x"])


POD: dict[str, Any] = {
    "metadata": {"name": "probe-1", "namespace": "fleetval"},
    "spec": {"nodeName": "r01-n03", "restartPolicy": "Never", "schedulerName": "default-scheduler"},
    "status": {"phase": "Running", "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}]},
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("metadata.name=probe-1", True),
        ("metadata.name==probe-1", True),
        ("metadata.name!=probe-1", False),
        ("metadata.namespace=fleetval,spec.nodeName=r01-n03", True),
        ("spec.nodeName=r01-n04", False),
        ("spec.nodeName!=", True),  # bound pods: the kubelet's own watch
        ("spec.host=r01-n03", True),  # the old alias of spec.nodeName
        ("status.phase!=Succeeded,status.phase!=Failed", True),  # kube-scheduler's informer
        ("status.podIP=10.0.0.7", True),
        ("status.podIPs=", True),  # accepted, never populated
        ("spec.hostNetwork=false", True),  # absent booleans read as false
        ("spec.hostNetwork=true", False),
        ("spec.serviceAccountName=", True),  # absent strings read as ""
        ("status.nominatedNodeName=x", False),
    ],
)
def test_pod_field_selectors(selector: str, expected: bool) -> None:
    assert parse_field_selector(selector, "pods").matches(POD) is expected


def test_node_field_selectors_compare_booleans_as_strings() -> None:
    node = {"metadata": {"name": "r01-n03"}, "spec": {"unschedulable": True}}
    assert parse_field_selector("spec.unschedulable=true", "Node").matches(node)
    assert not parse_field_selector("spec.unschedulable=false", "nodes").matches(node)
    assert parse_field_selector("spec.unschedulable=false", "Node").matches({"metadata": {"name": "x"}})
    assert parse_field_selector("metadata.name=r01-n03", "node").matches(node)


def test_event_field_selectors_as_the_kubernetes_pod_operator_uses_them() -> None:
    event = {
        "metadata": {"name": "probe-1.17a", "namespace": "fleetval"},
        "involvedObject": {"kind": "Pod", "name": "probe-1", "namespace": "fleetval", "uid": "u-1"},
        "reason": "FailedScheduling",
        "type": "Warning",
        "reportingComponent": "default-scheduler",
    }
    assert parse_field_selector("involvedObject.name=probe-1", "events").matches(event)
    assert not parse_field_selector("involvedObject.name=probe-2", "events").matches(event)
    selector = "involvedObject.kind=Pod,involvedObject.uid=u-1,reason=FailedScheduling,type=Warning"
    assert parse_field_selector(selector, "Event").matches(event)
    # "source" falls back to the reporting component when source.component is empty.
    assert parse_field_selector("source=default-scheduler", "Event").matches(event)
    assert parse_field_selector("reportingComponent=default-scheduler", "Event").matches(event)


def test_unsupported_fields_are_rejected_per_kind() -> None:
    with pytest.raises(SelectorError) as error:
        parse_field_selector("spec.foo=bar", "pods")
    assert str(error.value) == "field label not supported: spec.foo"
    with pytest.raises(SelectorError, match=r"field label not supported: metadata\.namespace"):
        parse_field_selector("metadata.namespace=x", "Node")
    with pytest.raises(SelectorError, match=r"field label not supported: status\.phase"):
        parse_field_selector("status.phase=Running", "MPIJob")
    with pytest.raises(SelectorError, match=r"field label not supported: metadata\.namespace"):
        parse_field_selector("metadata.namespace=x", "ClusterQueue", namespaced=False)
    mpijob = {"metadata": {"name": "nccl-1", "namespace": "fleetval"}}
    assert parse_field_selector("metadata.name=nccl-1,metadata.namespace=fleetval", "MPIJob").matches(mpijob)


def test_field_selector_syntax_and_escaping() -> None:
    with pytest.raises(SelectorError) as error:
        parse_field_selector("metadata.name", "pods")
    assert str(error.value) == "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
    with pytest.raises(SelectorError, match=r"invalid escape sequence: \\x"):
        parse_field_selector(r"metadata.name=a\x", "pods")
    with pytest.raises(SelectorError, match="unescaped character in value: 61"):
        parse_field_selector("metadata.name=a=b", "pods")
    escaped = parse_field_selector(r"metadata.name=a\,b\=c\\d", "pods")
    assert escaped.matches({"metadata": {"name": r"a,b=c\d"}})
    assert str(escaped) == r"metadata.name=a\,b\=c\\d"


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}}


def _expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ([{"matchExpressions": [_expression("gpu.product", "In", "H100", "H200")]}], True),
        ([{"matchExpressions": [_expression("gpu.product", "In", "A100")]}], False),
        ([{"matchExpressions": [_expression("gpu.product", "NotIn", "A100")]}], True),
        ([{"matchExpressions": [_expression("absent", "NotIn", "A100")]}], True),
        ([{"matchExpressions": [_expression("gpu.count", "Exists")]}], True),
        ([{"matchExpressions": [_expression("absent", "DoesNotExist")]}], True),
        ([{"matchExpressions": [_expression("gpu.count", "Gt", "7")]}], True),
        ([{"matchExpressions": [_expression("gpu.count", "Lt", "8")]}], False),
        ([{"matchExpressions": [_expression("gpu.count", "Gt", "seven")]}], False),  # does not parse
        ([{"matchExpressions": [_expression("gpu.count", "Exists", "8")]}], False),  # does not parse
        ([{"matchExpressions": [_expression("gpu.count", "Like", "8")]}], False),  # unknown operator
        ([{"matchFields": [_expression("metadata.name", "In", "r01-n03")]}], True),
        ([{"matchFields": [_expression("metadata.name", "NotIn", "r01-n03")]}], False),
        ([{"matchFields": [_expression("metadata.name", "In", "r01-n03", "r01-n04")]}], False),
        # within a term everything is ANDed
        (
            [
                {
                    "matchExpressions": [_expression("gpu.product", "In", "H100")],
                    "matchFields": [_expression("metadata.name", "In", "r01-n04")],
                }
            ],
            False,
        ),
        # terms are ORed; an empty term matches nothing
        ([{}, {"matchExpressions": [_expression("gpu.product", "In", "H100")]}], True),
        ([{}], False),
        ([], False),
    ],
)
def test_node_selector_terms(terms: list[dict[str, Any]], expected: bool) -> None:
    node = _node("r01-n03", **{"gpu.product": "H100", "gpu.count": "8"})
    assert node_selector_terms_match(terms, node) is expected
