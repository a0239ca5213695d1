"""JSON patch, merge patch and strategic merge patch give the API server's results and errors."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fleetval.k8s.patch import (
    STRATEGIC_KINDS,
    FieldPatchMeta,
    PatchError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
    strategic_merge_patch_with_schema,
)

# --- RFC 6902, appendix A ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "ops", "result"),
    [
        pytest.param(
            {"foo": "bar"},
            [{"op": "add", "path": "/baz", "value": "qux"}],
            {"baz": "qux", "foo": "bar"},
            id="A.1 adding an object member",
        ),
        pytest.param(
            {"foo": ["bar", "baz"]},
            [{"op": "add", "path": "/foo/1", "value": "qux"}],
            {"foo": ["bar", "qux", "baz"]},
            id="A.2 adding an array element",
        ),
        pytest.param(
            {"baz": "qux", "foo": "bar"},
            [{"op": "remove", "path": "/baz"}],
            {"foo": "bar"},
            id="A.3 removing an object member",
        ),
        pytest.param(
            {"foo": ["bar", "qux", "baz"]},
            [{"op": "remove", "path": "/foo/1"}],
            {"foo": ["bar", "baz"]},
            id="A.4 removing an array element",
        ),
        pytest.param(
            {"baz": "qux", "foo": "bar"},
            [{"op": "replace", "path": "/baz", "value": "boo"}],
            {"baz": "boo", "foo": "bar"},
            id="A.5 replacing a value",
        ),
        pytest.param(
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
            id="A.6 moving a value",
        ),
        pytest.param(
            {"foo": ["all", "grass", "cows", "eat"]},
            [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
            {"foo": ["all", "cows", "eat", "grass"]},
            id="A.7 moving an array element",
        ),
        pytest.param(
            {"baz": "qux", "foo": ["a", 2, "c"]},
            [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
            {"baz": "qux", "foo": ["a", 2, "c"]},
            id="A.8 testing a value: success",
        ),
        pytest.param(
            {"foo": "bar"},
            [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
            {"foo": "bar", "child": {"grandchild": {}}},
            id="A.10 adding a nested member object",
        ),
        pytest.param(
            {"foo": "bar"},
            [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
            {"foo": "bar", "baz": "qux"},
            id="A.11 ignoring unrecognized elements",
        ),
        pytest.param(
            {"/": 9, "~1": 10},
            [{"op": "test", "path": "/~01", "value": 10}],
            {"/": 9, "~1": 10},
            id="A.14 ~ escape ordering",
        ),
        pytest.param(
            {"foo": ["bar"]},
            [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
            {"foo": ["bar", ["abc", "def"]]},
            id="A.16 adding an array value",
        ),
    ],
)
def test_rfc6902_appendix_a(doc: dict[str, Any], ops: list[dict[str, Any]], result: dict[str, Any]) -> None:
    before = copy.deepcopy(doc)
    assert json_patch(doc, ops) == result
    assert doc == before  # never mutates its input


@pytest.mark.parametrize(
    ("doc", "ops", "message"),
    [
        pytest.param(
            {"baz": "qux"},
            [{"op": "test", "path": "/baz", "value": "bar"}],
            "testing value /baz failed: test failed",
            id="A.9 testing a value: error",
        ),
        pytest.param(
            {"foo": "bar"},
            [{"op": "add", "path": "/baz/bat", "value": "qux"}],
            'add operation does not apply: doc is missing path: "/baz/bat": missing value',
            id="A.12 adding to a nonexistent target",
        ),
        pytest.param(
            {"/": 9, "~1": 10},
            [{"op": "test", "path": "/~01", "value": "10"}],
            "testing value /~01 failed: test failed",
            id="A.15 comparing strings and numbers",
        ),
    ],
)
def test_rfc6902_appendix_a_errors_are_422(
    doc: dict[str, Any], ops: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(PatchError) as error:
        json_patch(doc, ops)
    assert (error.value.code, str(error.value)) == (422, message)


def test_json_patch_the_way_kubernetes_clients_use_it() -> None:
    pod = {"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"containers": [{"name": "c"}]}}
    patched = json_patch(
        pod,
        [
            {"op": "add", "path": "/metadata/labels/fleetval.io~1probe", "value": "x"},
            {"op": "remove", "path": "/metadata/labels/a"},
            {"op": "add", "path": "/spec/containers/-", "value": {"name": "d"}},
            {"op": "copy", "from": "/metadata/name", "path": "/metadata/generateName"},
        ],
    )
    assert patched["metadata"] == {"name": "p", "generateName": "p", "labels": {"fleetval.io/probe": "x"}}
    assert [c["name"] for c in patched["spec"]["containers"]] == ["c", "d"]


def test_json_patch_follows_the_api_servers_library_where_it_departs_from_the_rfc() -> None:
    doc = {"metadata": {"labels": {}}, "items": [1, 2, 3]}
    # "replace" of a missing member adds it
    assert json_patch(doc, [{"op": "replace", "path": "/metadata/labels/x", "value": "y"}])["metadata"] == {
        "labels": {"x": "y"}
    }
    # a missing member tests equal to null
    assert json_patch(doc, [{"op": "test", "path": "/absent", "value": None}]) == doc
    # negative indices count from the end
    assert json_patch(doc, [{"op": "remove", "path": "/items/-1"}])["items"] == [1, 2]
    assert json_patch(doc, [{"op": "add", "path": "/items/-1", "value": 4}])["items"] == [1, 2, 3, 4]
    # 1 and 1.0 are different JSON texts
    with pytest.raises(PatchError, match="test failed"):
        json_patch(doc, [{"op": "test", "path": "/items/0", "value": 1.0}])


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            [{"op": "remove", "path": "/metadata/labels/x"}],
            "error in remove for path: '/metadata/labels/x': "
            "Unable to remove nonexistent key: x: missing value",
        ),
        (
            [{"op": "replace", "path": "/items/3", "value": 0}],
            "replace operation does not apply: doc is missing key: /items/3: missing value",
        ),
        (
            [{"op": "add", "path": "/items/5", "value": 0}],
            "error in add for path: '/items/5': Unable to access invalid index: 5: invalid index referenced",
        ),
        (
            [{"op": "add", "path": "/items/x", "value": 0}],
            "error in add for path: '/items/x': value was not a "
            "proper array index: 'x': strconv.Atoi: parsing \"x\": invalid syntax",
        ),
        (
            [{"op": "move", "from": "/nope", "path": "/x"}],
            "error in move for path: 'nope': Unable to remove nonexistent key: nope: missing value",
        ),
        ([{"op": "frobnicate", "path": "/x"}], "Unexpected kind: frobnicate"),
        ([{"path": "/x"}], "Unexpected kind: unknown"),
        ([{"op": "add", "value": 1}], "add operation failed to decode path: missing value"),
    ],
)
def test_json_patch_errors_are_422(ops: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(PatchError) as error:
        json_patch({"metadata": {"labels": {}}, "items": [1, 2, 3]}, ops)
    assert (error.value.code, str(error.value)) == (422, message)


def test_a_malformed_json_patch_body_is_400() -> None:
    with pytest.raises(PatchError) as error:
        json_patch({}, {"op": "add"})
    assert (error.value.code, str(error.value)) == (
        400,
        "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
    )
    with pytest.raises(PatchError, match=r"into Go value of type jsonpatch\.Operation") as error:
        json_patch({}, ["add"])
    assert error.value.code == 400


# --- RFC 7386 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "patch", "result"),
    [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_rfc7386_examples(doc: dict[str, Any], patch: dict[str, Any], result: dict[str, Any]) -> None:
    before = copy.deepcopy(doc)
    assert merge_patch(doc, patch) == result
    assert doc == before


def test_a_merge_patch_that_is_not_an_object_is_400() -> None:
    for patch in (None, ["c"], "bar"):
        with pytest.raises(PatchError) as error:
            merge_patch({"a": "b"}, patch)
        assert (error.value.code, str(error.value)) == (400, "Invalid JSON Patch")


# --- strategic merge patch ----------------------------------------------------------------------------


def node() -> dict[str, Any]:
    return {
        "metadata": {"name": "r01-n03", "labels": {"kubernetes.io/hostname": "r01-n03"}},
        "spec": {
            "taints": [
                {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                {"key": "fleetval.io/maintenance", "value": "drain", "effect": "NoExecute"},
            ]
        },
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "DiskPressure", "status": "False"},
            ],
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.3"},
                {"type": "Hostname", "address": "r01-n03"},
            ],
            "allocatable": {"cpu": "64", "nvidia.com/gpu": "8"},
        },
    }


def test_node_taints_have_no_strategy_and_are_replaced_whole() -> None:
    patched = strategic_merge_patch(
        node(), {"spec": {"taints": [{"key": "fleetval.io/quarantine", "effect": "NoSchedule"}]}}, "Node"
    )
    assert patched["spec"]["taints"] == [{"key": "fleetval.io/quarantine", "effect": "NoSchedule"}]
    assert strategic_merge_patch(node(), {"spec": {"taints": None}}, "Node")["spec"] == {}


def test_node_conditions_and_addresses_merge_by_type() -> None:
    patch = {
        "status": {
            "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}],
            "addresses": [{"type": "ExternalIP", "address": "1.2.3.4"}],
            "allocatable": {"nvidia.com/gpu": "7"},
        }
    }
    patched = strategic_merge_patch(node(), patch, "Node")
    assert patched["status"]["conditions"] == [
        {"type": "MemoryPressure", "status": "False"},
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady"},
        {"type": "DiskPressure", "status": "False"},
    ]
    assert [a["type"] for a in patched["status"]["addresses"]] == ["ExternalIP", "InternalIP", "Hostname"]
    assert patched["status"]["allocatable"] == {"cpu": "64", "nvidia.com/gpu": "7"}
    assert patched["spec"] == node()["spec"]


def test_set_element_order_orders_a_merged_list() -> None:
    patch = {
        "status": {
            "$setElementOrder/conditions": [
                {"type": "Ready"},
                {"type": "MemoryPressure"},
                {"type": "DiskPressure"},
            ],
            "conditions": [{"type": "Ready", "status": "Unknown"}],
        }
    }
    conditions = strategic_merge_patch(node(), patch, "Node")["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in conditions] == [
        ("Ready", "Unknown"),
        ("MemoryPressure", "False"),
        ("DiskPressure", "False"),
    ]


def pod() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "probe",
            "labels": {"dag_id": "d", "kubernetes_pod_operator": "True"},
            "finalizers": ["fleetval.io/keep"],
            "ownerReferences": [{"uid": "u1", "kind": "MPIJob", "name": "nccl"}],
        },
        "spec": {
            "containers": [
                {
                    "name": "base",
                    "image": "dcgm:4",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 22, "name": "ssh"}],
                    "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
                },
                {"name": "sidecar", "image": "busybox"},
            ],
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "base", "ready": False}, {"name": "sidecar", "ready": True}],
        },
    }


def test_the_kubernetes_pod_operators_label_patch() -> None:
    before = pod()
    patched = strategic_merge_patch(before, {"metadata": {"labels": {"already_checked": "True"}}}, "Pod")
    assert patched["metadata"]["labels"] == {
        "dag_id": "d",
        "kubernetes_pod_operator": "True",
        "already_checked": "True",
    }
    assert before == pod()
    unlabelled = strategic_merge_patch(patched, {"metadata": {"labels": {"already_checked": None}}}, "pods")
    assert "already_checked" not in unlabelled["metadata"]["labels"]


def test_pod_lists_merge_on_their_keys() -> None:
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "base",
                    "image": "dcgm:5",
                    "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
                    "ports": [{"containerPort": 22, "protocol": "TCP"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "fleetval.io/maintenance", "operator": "Exists"}],
        },
        "metadata": {"ownerReferences": [{"uid": "u2", "kind": "Job", "name": "j"}]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "base", "ready": True}],
        },
    }
    patched = strategic_merge_patch(pod(), patch, "Pod")
    base, sidecar = patched["spec"]["containers"]
    assert (base["image"], sidecar) == ("dcgm:5", {"name": "sidecar", "image": "busybox"})
    assert base["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "two"},
        {"name": "C", "value": "3"},
    ]
    assert base["ports"] == [{"containerPort": 22, "name": "ssh", "protocol": "TCP"}]
    assert [m["mountPath"] for m in base["volumeMounts"]] == ["/data", "/dev/shm"]  # new items lead
    assert [v["name"] for v in patched["spec"]["volumes"]] == ["data", "shm"]
    assert patched["spec"]["tolerations"] == [{"key": "fleetval.io/maintenance", "operator": "Exists"}]
    assert [o["uid"] for o in patched["metadata"]["ownerReferences"]] == ["u2", "u1"]
    assert patched["status"]["conditions"][1] == {"type": "Ready", "status": "True"}
    assert patched["status"]["containerStatuses"] == [{"name": "base", "ready": True}]  # replaced whole


def test_finalizers_merge_as_a_set_and_delete_from_primitive_list() -> None:
    added = strategic_merge_patch(pod(), {"metadata": {"finalizers": ["a", "fleetval.io/keep"]}}, "Pod")
    assert added["metadata"]["finalizers"] == ["a", "fleetval.io/keep"]
    removed = strategic_merge_patch(
        added, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["fleetval.io/keep"]}}, "Pod"
    )
    assert removed["metadata"]["finalizers"] == ["a"]


def test_patch_directives() -> None:
    deleted = strategic_merge_patch(
        pod(), {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}, "Pod"
    )
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["base"]
    replaced = strategic_merge_patch(
        pod(), {"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}}, "Pod"
    )
    assert replaced["spec"]["containers"] == [{"name": "only", "image": "x"}]
    labels = strategic_merge_patch(pod(), {"metadata": {"labels": {"$patch": "replace", "new": "1"}}}, "Pod")
    assert labels["metadata"]["labels"] == {"new": "1"}
    emptied = strategic_merge_patch(pod(), {"metadata": {"labels": {"$patch": "delete"}}}, "Pod")
    assert emptied["metadata"]["labels"] == {}


def test_retain_keys_clears_the_other_members_of_a_volume() -> None:
    patch = {
        "spec": {
            "volumes": [{"name": "shm", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]
        }
    }
    patched = strategic_merge_patch(pod(), patch, "Pod")
    assert patched["spec"]["volumes"] == [{"name": "shm", "hostPath": {"path": "/x"}}]


@pytest.mark.parametrize(
    ("patch", "code", "message"),
    [
        ({"spec": {"containers": [{"image": "x"}]}}, 500, "does not contain declared merge key: name"),
        ({"metadata": {"$deleteFromPrimitiveList": ["x"]}}, 400, "invalid patch format of primitive list"),
        (
            {"spec": {"volumes": [{"name": "shm", "$retainKeys": "name"}]}},
            400,
            "invalid patch format of retainKeys",
        ),
        ({"metadata": {"$setElementOrder": []}}, 400, "invalid patch format of setElementOrder list"),
        ({"metadata": {"finalizers": [1]}}, 500, "list element types are not identical"),
        (
            {"spec": {"containers": [{"name": "x", "$patch": "merge"}]}},
            500,
            "merging lists cannot yet be specified",
        ),
        ({"metadata": {"labels": {"$patch": "nope"}}}, 500, "unknown patch type: nope in map"),
    ],
)
def test_strategic_merge_patch_errors(patch: dict[str, Any], code: int, message: str) -> None:
    with pytest.raises(PatchError, match=message) as error:
        strategic_merge_patch(pod(), patch, "Pod")
    assert error.value.code == code


def test_lists_of_lists_are_422() -> None:
    live = {**pod(), "metadata": {"finalizers": []}}
    with pytest.raises(PatchError, match="lists of lists are not supported") as error:
        strategic_merge_patch(live, {"metadata": {"finalizers": [["x"]]}}, "Pod")
    assert error.value.code == 422


def test_a_strategic_merge_patch_body_must_be_an_object() -> None:
    with pytest.raises(PatchError) as error:
        strategic_merge_patch(pod(), [{"op": "add"}], "Pod")
    assert error.value.code == 400


def test_other_kinds_get_a_merge_patch() -> None:
    assert {"Pod", "Node", "Event"} == STRATEGIC_KINDS
    mpijob = {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}}, "metadata": {"finalizers": ["a"]}}
    patched = strategic_merge_patch(
        mpijob, {"metadata": {"finalizers": ["b"]}, "spec": {"runPolicy": {"suspend": False}}}, "MPIJob"
    )
    assert patched["metadata"]["finalizers"] == ["b"]  # no set merge outside the strategic kinds
    assert patched["spec"] == {
        "mpiReplicaSpecs": {"Worker": {"replicas": 2}},
        "runPolicy": {"suspend": False},
    }


def test_upstream_case_delete_and_add_under_set_element_order() -> None:
    # apimachinery's "add map and delete map from merging list" (three-way): the server's order
    # comes from the live list as the Go code still sees it after deleting in place.
    schema: dict[str, FieldPatchMeta] = {}
    schema["mergingList"] = FieldPatchMeta("merge", "name", schema)
    current = {"mergingList": [{"name": 1}, {"name": 2, "other": "b"}, {"name": 4, "other": "c"}]}
    patch = {
        "$setElementOrder/mergingList": [{"name": 2}, {"name": 3}],
        "mergingList": [{"name": 3}, {"name": 1, "$patch": "delete"}],
    }
    assert strategic_merge_patch_with_schema(current, patch, schema) == {
        "mergingList": [{"name": 2, "other": "b"}, {"name": 4, "other": "c"}, {"name": 3}]
    }
