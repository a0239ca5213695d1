"""Objects are accepted or refused as the Kubernetes API server does: the same HTTP code, the same
Status body, the same message text (decoder 400s, semantic 422s, unknown fields per
fieldValidation), and custom objects against the upstream CRDs with structural-schema pruning."""

from __future__ import annotations

import copy
import re
from typing import Any, Final

import pytest

from fleetval.k8s.validation import (
    KUBERNETES_VERSION,
    ApiError,
    Crd,
    check_custom,
    go_float,
    load_crds,
    parse_quantity,
    status_body,
    validate_core,
    validate_custom,
)
from fleetval.nccl.mpijob import mpijob_manifest
from fleetval.nccl.probe import nccl_probe

SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
    "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def pod(**spec_extra: Any) -> dict[str, Any]:
    container = {
        "name": "probe",
        "image": "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
        "command": ["/bin/bash", "-c"],
        "args": ["exec dcgmi diag -r 1 -j"],
        "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8", "cpu": "1"}},
    }
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never", **spec_extra}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "labels": {"app": "t"}},
        "spec": spec,
    }


def refused(obj: dict[str, Any], **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        validate_core(obj, **kwargs)
    return caught.value


@pytest.fixture(scope="module")
def mpijob_crd() -> Crd:
    return load_crds()[("kubeflow.org", "mpijobs")]


def mpijob() -> dict[str, Any]:
    return mpijob_manifest(nccl_probe(["r01-n01", "r01-n02"], gpus_per_node=8, repeat=0, run_key="k"))


# --- Status bodies ------------------------------------------------------------------------------


def test_kubernetes_version_is_the_newest_schema_the_client_speaks() -> None:
    assert KUBERNETES_VERSION == "1.36"


def test_status_body_is_the_servers_status_with_empty_details_left_out() -> None:
    body = status_body(404, "NotFound", 'pods "x" not found', kind="pods", name="x")
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "x" not found',
        "reason": "NotFound",
        "details": {"name": "x", "kind": "pods"},
        "code": 404,
    }
    assert list(body) == ["kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code"]
    assert "details" not in status_body(400, "BadRequest", "bad")
    error = ApiError(409, status_body(409, "Conflict", "x"))
    assert (error.code, error.body["reason"], str(error)) == (409, "Conflict", "x")


# --- built-in objects: decoding -----------------------------------------------------------------


def test_a_valid_probe_pod_passes_unchanged() -> None:
    obj = pod(activeDeadlineSeconds=1200)
    kept, warnings = validate_core(copy.deepcopy(obj), field_validation="Strict")
    assert kept == obj and warnings == []


def test_unknown_field_is_a_strict_400_a_warning_by_default_and_silent_when_ignored() -> None:
    obj = pod()
    obj["spec"]["foo"] = 1
    obj["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    error = refused(obj, field_validation="Strict")
    assert error.code == 400
    assert error.body["reason"] == "BadRequest" and "details" not in error.body
    # In document order, as the decoder meets them ("foo" was added after "containers").
    assert error.body["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].imagePullPolicyy", unknown field "spec.foo"'
    )
    kept, warnings = validate_core(copy.deepcopy(obj))  # Warn is the server's default
    assert warnings == ['unknown field "spec.containers[0].imagePullPolicyy"', 'unknown field "spec.foo"']
    assert "foo" not in kept["spec"] and "imagePullPolicyy" not in kept["spec"]["containers"][0]
    kept, warnings = validate_core(copy.deepcopy(obj), field_validation="Ignore")
    assert warnings == [] and "foo" not in kept["spec"]


def test_an_unsupported_field_validation_value_is_refused_like_the_servers_options_check() -> None:
    error = refused(pod(), field_validation="Loose")
    assert error.code == 422
    assert error.body["message"] == (
        'CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Loose": '
        'supported values: "", "Ignore", "Strict", "Warn"'
    )


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            ("spec", "activeDeadlineSeconds"),
            "600",
            "json: cannot unmarshal string into Go struct field PodSpec.spec.activeDeadlineSeconds "
            "of type int64",
        ),
        (
            ("spec", "containers", 0, "command"),
            ["sleep", 1200],
            "json: cannot unmarshal number into Go struct field Container.spec.containers.command "
            "of type string",
        ),
        (
            ("spec", "containers", 0, "command"),
            "sleep 1200",
            "json: cannot unmarshal string into Go struct field Container.spec.containers.command "
            "of type []string",
        ),
        (
            ("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"),
            True,
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        (("spec",), [], "json: cannot unmarshal array into Go struct field Pod.spec of type v1.PodSpec"),
    ],
)
def test_a_wrong_json_type_fails_the_decoder_with_400(
    path: tuple[Any, ...], value: Any, message: str
) -> None:
    obj = pod()
    target: Any = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    error = refused(obj)
    assert error.code == 400 and error.body["reason"] == "BadRequest"
    assert error.body["message"] == f'Pod in version "v1" cannot be handled as a Pod: {message}'


def test_quantities_are_kept_in_canonical_form() -> None:
    obj = pod()
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = 1.5
    obj["spec"]["containers"][0]["resources"]["requests"]["memory"] = "2048Mi"
    kept, _ = validate_core(obj)
    assert kept["spec"]["containers"][0]["resources"]["requests"] == {
        "nvidia.com/gpu": "8",
        "cpu": "1500m",
        "memory": "2Gi",
    }
    assert str(parse_quantity("0.5")) == "500m" and str(parse_quantity(2000)) == "2k"
    assert go_float(1e6) == "1e+06" and go_float(100000.0) == "100000" and go_float(1.5) == "1.5"


# --- built-in objects: semantic validation (422) -------------------------------------------------


def test_a_container_without_image_is_invalid_with_one_cause() -> None:
    obj = pod()
    del obj["spec"]["containers"][0]["image"]
    error = refused(obj)
    assert error.code == 422
    assert error.body == status_body(
        422,
        "Invalid",
        'Pod "probe" is invalid: spec.containers[0].image: Required value',
        kind="Pod",
        name="probe",
        causes=[
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"}
        ],
    )


def test_several_errors_aggregate_in_brackets_in_validation_order() -> None:
    obj = pod(activeDeadlineSeconds=0)
    obj["metadata"] = {"name": "Probe_1"}
    obj["spec"]["containers"].append({"name": "probe", "image": "x"})
    error = refused(obj)
    assert error.body["message"] == (
        f'Pod "Probe_1" is invalid: [metadata.name: Invalid value: "Probe_1": {SUBDOMAIN_MESSAGE}, '
        'spec.containers[1].name: Duplicate value: "probe", '
        "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive]"
    )
    reasons = [c["reason"] for c in error.body["details"]["causes"]]
    assert reasons == ["FieldValueInvalid", "FieldValueDuplicate", "FieldValueInvalid"]


def test_name_rules() -> None:
    obj = pod()
    obj["metadata"] = {}
    error = refused(obj)
    assert (
        error.body["message"]
        == 'Pod "" is invalid: metadata.name: Required value: name or generateName is required'
    )
    obj["metadata"] = {"generateName": "probe-"}  # a trailing dash is fine in a prefix
    validate_core(obj)
    obj["metadata"] = {"name": "p"}
    obj["spec"]["containers"][0]["name"] = "Probe.One"
    assert refused(obj).body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "Probe.One": ' + LABEL_MESSAGE,
            "field": "spec.containers[0].name",
        }
    ]
    obj["spec"]["containers"] = []
    assert refused(obj).body["message"] == 'Pod "p" is invalid: spec.containers: Required value'
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}}
    assert "must not contain dots" in refused(namespace).body["message"]


def test_label_keys_and_values() -> None:
    obj = pod()
    obj["metadata"]["labels"] = {"bad key": "ok", "fleetval.io/tool": "not ok!"}
    causes = refused(obj).body["details"]["causes"]
    assert [(c["field"], c["message"].split(":")[1].strip()) for c in causes] == [
        ("metadata.labels", '"bad key"'),
        ("metadata.labels", '"not ok!"'),
    ]
    assert causes[0]["message"].startswith(
        "Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', "
    )
    assert causes[1]["message"].startswith('Invalid value: "not ok!": a valid label must be an empty string')


@pytest.mark.parametrize(
    ("resources", "field", "message"),
    [
        (
            {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "2"}},
            "spec.containers[0].resources.requests",
            'Invalid value: "2": must be equal to nvidia.com/gpu limit of 4',
        ),
        (
            {"limits": {"nvidia.com/gpu": "500m"}},
            "spec.containers[0].resources.limits[nvidia.com/gpu]",
            'Invalid value: "500m": must be an integer',
        ),
        (
            {"requests": {"nvidia.com/gpu": "1"}},
            "spec.containers[0].resources.limits",
            "Required value: Limit must be set for non overcommitable resources",
        ),
        (
            {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}},
            "spec.containers[0].resources.requests",
            'Invalid value: "2": must be less than or equal to cpu limit of 1',
        ),
    ],
)
def test_extended_resources_are_whole_and_not_overcommitted(
    resources: dict[str, Any], field: str, message: str
) -> None:
    obj = pod()
    obj["spec"]["containers"][0]["resources"] = resources
    error = refused(obj)
    assert error.body["details"]["causes"] == [
        {"reason": error.body["details"]["causes"][0]["reason"], "message": message, "field": field}
    ]
    assert error.body["message"] == f'Pod "probe" is invalid: {field}: {message}'


def test_a_limit_alone_is_enough_and_cpu_may_be_overcommitted() -> None:
    obj = pod()
    obj["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "8", "cpu": "4"},
        "requests": {"cpu": "1"},
    }
    validate_core(obj)


def test_tolerations_and_volume_mounts() -> None:
    obj = pod(
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Maybe"}, {"operator": "Equal", "value": "x"}]
    )
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    causes = refused(obj).body["details"]["causes"]
    assert [(c["field"], c["reason"]) for c in causes] == [
        ("spec.containers[0].volumeMounts[0].name", "FieldValueNotFound"),
        ("spec.tolerations[0].operator", "FieldValueNotSupported"),
        ("spec.tolerations[1].operator", "FieldValueInvalid"),
    ]
    assert causes[1]["message"] == 'Unsupported value: "Maybe": supported values: "Equal", "Exists"'


def test_required_node_affinity_pins_by_metadata_name_only() -> None:
    """matchFields accepts only metadata.name, In/NotIn with one DNS-subdomain value
    (ValidateNodeFieldSelectorRequirement); the probe's pin passes, for every probe node name."""
    from kubernetes.client import ApiClient

    from fleetval.dcgm.probe import dcgm_diag_probe
    from fleetval.k8s.scheduling import node_name_affinity
    from fleetval.probes.pod import kpo_kwargs

    probe = kpo_kwargs(dcgm_diag_probe("ip-10-0-1-3.ec2.internal", level=2, gpus=8, run_key="k"))
    validate_core(pod(affinity=ApiClient().sanitize_for_serialization(probe["affinity"])))
    validate_core(pod(affinity=node_name_affinity("r01-n01", "r01-n02")))

    def field(**requirement: Any) -> dict[str, Any]:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"], **requirement}]}
        return {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }

    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    causes = refused(pod(affinity=field(key="metadata.labels"))).body["details"]["causes"]
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "metadata.labels": not a valid field selector key',
            "field": f"{base}[0].matchFields[0].key",
        }
    ]
    causes = refused(pod(affinity=field(values=["a", "b"]))).body["details"]["causes"]
    assert [(c["field"], c["message"]) for c in causes] == [
        (
            f"{base}[0].matchFields[0].values",
            "Required value: must be only one value when `operator` is 'In' or 'NotIn' "
            "for node field selector",
        )
    ]
    causes = refused(pod(affinity=field(operator="Exists", values=["N_1"]))).body["details"]["causes"]
    assert [(c["field"], c["reason"]) for c in causes] == [
        (f"{base}[0].matchFields[0].operator", "FieldValueInvalid"),
        (f"{base}[0].matchFields[0].values[0]", "FieldValueInvalid"),
    ]
    empty = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
    [cause] = refused(pod(affinity=empty)).body["details"]["causes"]
    assert cause["message"] == "Required value: must have at least one node selector term"
    label = {"key": "kubernetes.io/hostname", "operator": "Exists", "values": ["x"]}
    labels = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [label]}]
            }
        }
    }
    [cause] = refused(pod(affinity=labels)).body["details"]["causes"]
    assert cause["reason"] == "FieldValueForbidden" and cause["field"].endswith("matchExpressions[0].values")


# --- custom resources ----------------------------------------------------------------------------


def test_the_crds_fleetval_serves() -> None:
    crds = load_crds()
    assert {(g, p) for g, p in crds} >= {
        ("kubeflow.org", "mpijobs"),
        ("kueue.x-k8s.io", "clusterqueues"),
        ("kueue.x-k8s.io", "localqueues"),
        ("kueue.x-k8s.io", "workloads"),
        ("kueue.x-k8s.io", "resourceflavors"),
        ("nvidia.com", "clusterpolicies"),
        ("nvidia.com", "nvidiadrivers"),
    }
    mpi = crds[("kubeflow.org", "mpijobs")]
    assert (mpi.kind, mpi.list_kind, mpi.singular, mpi.namespaced) == ("MPIJob", "MPIJobList", "mpijob", True)
    assert mpi.served_versions == ("v2beta1",) and "status" in mpi.subresources["v2beta1"]
    queue = crds[("kueue.x-k8s.io", "clusterqueues")]
    assert not queue.namespaced and queue.storage_version == "v1beta2" and "cq" in queue.short_names


def test_fleetvals_mpijob_is_valid_and_gets_the_crds_defaults(mpijob_crd: Crd) -> None:
    kept, warnings = check_custom(mpijob(), mpijob_crd, "v2beta1", field_validation="Strict")
    assert warnings == []
    assert kept["spec"]["slotsPerWorker"] == 1 and kept["spec"]["mpiImplementation"] == "OpenMPI"
    worker = kept["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    # The embedded pod template keeps its metadata and validates as a Pod too.
    assert worker["metadata"]["labels"]["fleetval.io/tool"] == "nccl"
    template_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"}, "spec": worker["spec"]}
    assert validate_core(template_pod, field_validation="Strict")[1] == []


def test_a_wrong_type_in_an_mpijob_is_invalid_as_apiextensions_words_it(mpijob_crd: Crd) -> None:
    job = mpijob()
    job["spec"]["runPolicy"]["backoffLimit"] = "string"
    with pytest.raises(ApiError) as caught:
        validate_custom(job, mpijob_crd, "v2beta1")
    name = job["metadata"]["name"]
    assert caught.value.code == 422
    assert caught.value.body["message"] == (
        f'MPIJob.kubeflow.org "{name}" is invalid: spec.runPolicy.backoffLimit: Invalid value: "string": '
        'spec.runPolicy.backoffLimit in body must be of type integer: "string"'
    )
    assert caught.value.body["details"] == {
        "name": name,
        "group": "kubeflow.org",
        "kind": "MPIJob",
        "causes": [
            {
                "reason": "FieldValueTypeInvalid",
                "message": 'Invalid value: "string": spec.runPolicy.backoffLimit in body must be of type '
                'integer: "string"',
                "field": "spec.runPolicy.backoffLimit",
            }
        ],
    }


def test_enum_required_and_nested_errors_in_an_mpijob(mpijob_crd: Crd) -> None:
    job = mpijob()
    job["spec"]["mpiImplementation"] = "LAM"
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = "2"
    del job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(ApiError) as caught:
        validate_custom(job, mpijob_crd, "v2beta1")
    causes = {c["field"]: (c["reason"], c["message"]) for c in caught.value.body["details"]["causes"]}
    assert causes["spec.mpiImplementation"] == (
        "FieldValueNotSupported",
        'Unsupported value: "LAM": supported values: "OpenMPI", "Intel", "MPICH"',
    )
    assert causes["spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].name"] == (
        "FieldValueRequired",
        "Required value",
    )
    assert causes["spec.mpiReplicaSpecs.Worker.replicas"][0] == "FieldValueTypeInvalid"


def test_unknown_mpijob_fields_are_pruned_or_refused_per_field_validation(mpijob_crd: Crd) -> None:
    job = mpijob()
    job["spec"]["launcherSlots"] = 4
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["gpus"] = 8
    kept = validate_custom(copy.deepcopy(job), mpijob_crd, "v2beta1")
    assert "launcherSlots" not in kept["spec"]
    assert "gpus" not in kept["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    _, warnings = check_custom(copy.deepcopy(job), mpijob_crd, "v2beta1")
    assert warnings == [
        'unknown field "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].gpus"',
        'unknown field "spec.launcherSlots"',
    ]
    with pytest.raises(ApiError) as caught:
        check_custom(job, mpijob_crd, "v2beta1", field_validation="Strict")
    assert caught.value.code == 400
    assert re.fullmatch(
        r'MPIJob in version "v2beta1" cannot be handled as a MPIJob: strict decoding error: '
        r'unknown field ".*\.gpus", unknown field "spec\.launcherSlots"',
        caught.value.body["message"],
    )


STRUCTURAL: Final = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"x-kubernetes-int-or-string": True},
                "note": {"type": "string", "nullable": True},
                "mode": {"type": "string", "default": "fast"},
                "count": {"type": "integer", "minimum": 1, "maximum": 4},
                "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                    },
                },
                "inner": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {"spec": {"type": "object", "properties": {"x": {"type": "integer"}}}},
                },
            },
        },
    },
}
WIDGETS: Final = Crd(
    group="example.com",
    plural="widgets",
    singular="widget",
    kind="Widget",
    list_kind="WidgetList",
    namespaced=True,
    served_versions=("v1",),
    storage_version="v1",
    short_names=(),
    schemas={"v1": STRUCTURAL},
    subresources={"v1": {}},
)


def widget(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}


def widget_errors(**spec: Any) -> list[tuple[str, str, str]]:
    with pytest.raises(ApiError) as caught:
        validate_custom(widget(**spec), WIDGETS, "v1")
    return [(c["field"], c["reason"], c["message"]) for c in caught.value.body["details"]["causes"]]


def test_structural_semantics_nulls_defaults_int_or_string_preserved_and_embedded() -> None:
    kept, warnings = check_custom(
        widget(
            size="10%",
            note=None,
            count=None,
            free={"anything": {"goes": [1]}},
            inner={
                "apiVersion": "v1",
                "kind": "Thing",
                "metadata": {"name": "i", "bogus": 1},
                "spec": {"x": 2, "y": 3},
            },
            extra=True,
        ),
        WIDGETS,
        "v1",
    )
    spec = kept["spec"]
    assert spec["size"] == "10%" and spec["note"] is None and "count" not in spec and spec["mode"] == "fast"
    assert spec["free"] == {"anything": {"goes": [1]}}
    assert spec["inner"] == {"apiVersion": "v1", "kind": "Thing", "metadata": {"name": "i"}, "spec": {"x": 2}}
    assert warnings == [
        'unknown field "spec.inner.metadata.bogus"',
        'unknown field "spec.inner.spec.y"',
        'unknown field "spec.extra"',
    ]
    assert validate_custom(widget(size=3, count=2.0), WIDGETS, "v1")["spec"]["count"] == 2.0


def test_structural_value_errors_read_like_kube_openapis() -> None:
    errors = widget_errors(
        size=True, count=9, name="Toolong", tags=["a", "a"], ports=[{"name": "p", "port": 1}, {"name": "p"}]
    )
    assert errors == [
        (
            "spec.count",
            "FieldValueInvalid",
            "Invalid value: 9: spec.count in body should be less than or equal to 4",
        ),
        ("spec.name", "FieldValueTooLong", "Too long: may not be more than 5 bytes"),
        (
            "spec.name",
            "FieldValueInvalid",
            "Invalid value: \"Toolong\": spec.name in body should match '^[a-z]+$'",
        ),
        ("spec.ports[1]", "FieldValueDuplicate", 'Duplicate value: {"name":"p"}'),
        (
            "spec.size",
            "FieldValueTypeInvalid",
            'Invalid value: "boolean": spec.size in body must be of type integer,string: "boolean"',
        ),
        ("spec.tags[1]", "FieldValueDuplicate", 'Duplicate value: "a"'),
    ]
    assert widget_errors(count=0) == [
        (
            "spec.count",
            "FieldValueInvalid",
            "Invalid value: 0: spec.count in body should be greater than or equal to 1",
        ),
        ("spec.size", "FieldValueRequired", "Required value"),
    ]


def test_a_kueue_local_queue() -> None:
    queues = load_crds()[("kueue.x-k8s.io", "localqueues")]
    queue: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "fleetval-validation", "namespace": "fleetval"},
        "spec": {"clusterQueue": "fleetval"},
    }
    validate_custom(copy.deepcopy(queue), queues, "v1beta2")
    queue["spec"]["clusterQueue"] = 7
    with pytest.raises(ApiError) as caught:
        validate_custom(queue, queues, "v1beta2")
    assert "spec.clusterQueue in body must be of type string" in caught.value.body["message"]
