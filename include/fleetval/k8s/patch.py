"""JSON patch, JSON merge patch and Kubernetes strategic merge patch, as the API server applies them.

The simulated API server answers PATCH requests with these. Clients rely on the server's exact
behaviour: the kubernetes client sends a dict body as a strategic merge patch (the
KubernetesPodOperator labels pods that way), kubelets and controllers patch node and pod status
conditions, and `kubectl taint` replaces the whole taint list. So:

- json_patch follows evanphx/json-patch v4, the library the API server uses, where it departs from
  RFC 6902: "replace" of a missing object member adds it, "test" of a missing member against null
  passes, "copy" from a missing member copies null, and negative array indices count from the end.
- merge_patch follows the same library's RFC 7386 merge (nulls inside added objects are pruned).
- strategic_merge_patch follows k8s.io/apimachinery/pkg/util/strategicpatch with the
  patchStrategy/patchMergeKey tags of k8s.io/api core/v1 for Pod, Node and Event; other kinds get
  a merge patch (the API server refuses strategic merge for custom resources with 415, see
  STRATEGIC_KINDS).

Every function returns a new object and never mutates its arguments. A PatchError carries the HTTP
status the API server answers with in `code` and its message.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.k8s.selectors import canonical_kind


class PatchError(ValueError):
    """A patch the API server rejects: `code` 400 (malformed body), 422 (does not apply) or 500
    (what the API server reports as an internal error, e.g. a merge-list item without its key)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _bad_request(message: str) -> PatchError:
    return PatchError(message, 400)


def _unprocessable(message: str) -> PatchError:
    return PatchError(message, 422)


def _internal(message: str) -> PatchError:
    return PatchError(message, 500)


def _go_json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number"


def _go_format(value: Any) -> str:
    """Go's %v for decoded JSON, for error messages."""
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{_go_format(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_format(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _same_scalar(a: Any, b: Any) -> bool:
    # Go compares decoded JSON scalars by type and value: 1 != 1.0 != true.
    return type(a) is type(b) and bool(a == b)


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return _same_scalar(a, b)


# --- JSON patch (RFC 6902) --------------------------------------------------------------------------

_MISSING: Final = "missing value"
_INVALID_INDEX: Final = "invalid index referenced"
_ATOI = re.compile(r"[+-]?[0-9]+")
_ABSENT: Final = object()


def _atoi(key: str) -> int:
    if not _ATOI.fullmatch(key):
        raise _unprocessable(f'strconv.Atoi: parsing "{key}": invalid syntax')
    number = int(key)
    if not -(2**63) <= number < 2**63:
        raise _unprocessable(f'strconv.Atoi: parsing "{key}": value out of range')
    return number


def _decode_token(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _find_container(doc: Any, path: str) -> tuple[dict[str, Any] | list[Any], str] | None:
    """The object or array holding the last token of `path`, and that (decoded) token."""
    if not path.startswith("/"):
        return None
    tokens = path.split("/")[1:]
    container: Any = doc
    for raw in tokens[:-1]:
        token = _decode_token(raw)
        if isinstance(container, dict):
            container = container.get(token)
        elif isinstance(container, list):
            try:
                index = _array_index(container, token, for_insert=False)
            except PatchError:
                return None
            container = container[index]
        if not isinstance(container, dict | list):
            return None
    return container, _decode_token(tokens[-1])


def _array_index(array: list[Any], token: str, *, for_insert: bool) -> int:
    index = _atoi(token)
    size = len(array) + 1 if for_insert else len(array)
    if index >= size or index < -size:
        raise _unprocessable(f"Unable to access invalid index: {index}: {_INVALID_INDEX}")
    return index + size if index < 0 else index


def _get(container: dict[str, Any] | list[Any], key: str) -> Any:
    """The member, _ABSENT for a missing object member; an out-of-range array index raises."""
    if isinstance(container, dict):
        return container.get(key, _ABSENT)
    return container[_array_index(container, key, for_insert=False)]


def _add(container: dict[str, Any] | list[Any], key: str, value: Any) -> None:
    if isinstance(container, dict):
        container[key] = value
    elif key == "-":
        container.append(value)
    else:
        if not _ATOI.fullmatch(key):
            atoi_error = f'strconv.Atoi: parsing "{key}": invalid syntax'
            raise _unprocessable(f"value was not a proper array index: '{key}': {atoi_error}")
        container.insert(_array_index(container, key, for_insert=True), value)


def _remove(container: dict[str, Any] | list[Any], key: str) -> Any:
    if isinstance(container, dict):
        if key not in container:
            raise _unprocessable(f"Unable to remove nonexistent key: {key}: {_MISSING}")
        return container.pop(key)
    return container.pop(_array_index(container, key, for_insert=False))


def _wrap(prefix: str, action: Callable[[], Any]) -> Any:
    try:
        return action()
    except PatchError as error:
        raise _unprocessable(f"{prefix}: {error}") from None


def _string_member(op: Mapping[str, Any], name: str) -> str | None:
    value = op.get(name)
    return value if isinstance(value, str) else None


def _missing_path(kind: str) -> PatchError:
    # The library words a missing "path" member differently per operation.
    detail = "operation missing path field: " if kind in ("replace", "move", "test") else ""
    return _unprocessable(f"{kind} operation failed to decode path: {detail}{_MISSING}")


def _move_or_copy(doc: dict[str, Any], op: Mapping[str, Any], kind: str) -> None:
    source = _string_member(op, "from")
    if source is None:
        raise _unprocessable(
            f"{kind} operation failed to decode from: operation, missing from field: {_MISSING}"
        )
    found = _find_container(doc, source)
    if found is None:
        raise _unprocessable(
            f"{kind} operation does not apply: doc is missing from path: {source}: {_MISSING}"
        )
    container, key = found
    if kind == "move":
        value = _wrap(f"error in move for path: '{key}'", lambda: _remove(container, key))
    else:
        member = _wrap(f"error in copy for from: '{source}'", lambda: _get(container, key))
        value = None if member is _ABSENT else copy.deepcopy(member)
    path = _string_member(op, "path")
    if path is None:
        raise _missing_path(kind)
    target = _find_container(doc, path)
    if target is None:
        raise _unprocessable(
            f"{kind} operation does not apply: doc is missing destination path: {path}: {_MISSING}"
        )
    prefix = f"error in move for path: '{path}'" if kind == "move" else "error while adding value during copy"
    _wrap(prefix, lambda: _add(target[0], target[1], value))


def _test(doc: dict[str, Any], op: Mapping[str, Any], path: str) -> None:
    failed = _unprocessable(f"testing value {path} failed: test failed")
    if path == "":
        if not _json_equal(doc, op.get("value")):
            raise failed
        return
    found = _find_container(doc, path)
    if found is None:
        raise _unprocessable(f"test operation does not apply: is missing path: {path}: {_MISSING}")
    current = _wrap(f"error in test for path: '{path}'", lambda: _get(found[0], found[1]))
    if current is _ABSENT or current is None:
        # A missing member and a null one both equal a null (or absent) "value".
        if op.get("value") is not None:
            raise failed
    elif "value" not in op or not _json_equal(current, op["value"]):
        raise failed


def _apply_operation(doc: dict[str, Any], op: Mapping[str, Any] | None) -> dict[str, Any]:
    op = op or {}
    kind = op["op"] if isinstance(op.get("op"), str) else "unknown"
    if kind not in ("add", "remove", "replace", "move", "copy", "test"):
        raise _unprocessable(f"Unexpected kind: {kind}")
    if kind in ("move", "copy"):
        _move_or_copy(doc, op, kind)
        return doc
    path = _string_member(op, "path")
    if path is None:
        raise _missing_path(kind)
    if kind == "test":
        _test(doc, op, path)
        return doc
    value = copy.deepcopy(op.get("value"))
    if kind == "replace" and path == "":
        if not isinstance(value, dict):
            raise _unprocessable("replace operation value must be object or array")
        return value
    found = _find_container(doc, path)
    if found is None:
        quoted = f'"{path}"' if kind != "replace" else path
        raise _unprocessable(f"{kind} operation does not apply: doc is missing path: {quoted}: {_MISSING}")
    container, key = found
    if kind == "add":
        _wrap(f"error in add for path: '{path}'", lambda: _add(container, key, value))
    elif kind == "remove":
        _wrap(f"error in remove for path: '{path}'", lambda: _remove(container, key))
    elif isinstance(container, list):
        try:
            container[_array_index(container, key, for_insert=False)] = value
        except PatchError:
            raise _unprocessable(
                f"replace operation does not apply: doc is missing key: {path}: {_MISSING}"
            ) from None
    else:
        # A missing member is added: the API server's JSON patch library does not check.
        container[key] = value
    return doc


def json_patch(doc: Mapping[str, Any], ops: Any) -> dict[str, Any]:
    """Apply an RFC 6902 JSON patch (`ops`, the decoded request body) to a copy of `doc`.

    A body that is not a list of objects is a 400; an operation that does not apply (missing path,
    bad index, failed "test", unknown "op") is a 422, worded as the API server words it.
    """
    if ops is None:
        return copy.deepcopy(dict(doc))
    if not isinstance(ops, list):
        raise _bad_request(
            f"json: cannot unmarshal {_go_json_type(ops)} into Go value of type jsonpatch.Patch"
        )
    for op in ops:
        if op is not None and not isinstance(op, dict):
            raise _bad_request(
                f"json: cannot unmarshal {_go_json_type(op)} into Go value of type jsonpatch.Operation"
            )
    result: dict[str, Any] = copy.deepcopy(dict(doc))
    for op in ops:
        result = _apply_operation(result, op)
    return result


# --- JSON merge patch (RFC 7386) --------------------------------------------------------------------


def _prune_nulls(value: Any) -> Any:
    # Null members of objects are dropped; null array elements are kept.
    if isinstance(value, dict):
        return {k: _prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [None if v is None else _prune_nulls(v) for v in value]
    return value


def _merge_object(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif not isinstance(target.get(key), dict):
            target[key] = _prune_nulls(value)  # nothing to merge into (absent, null or not an object)
        elif isinstance(value, dict):
            target[key] = _merge_object(target[key], value)
        else:
            target[key] = value
    return target


def merge_patch(doc: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    """Apply an RFC 7386 JSON merge patch: objects merge recursively, null deletes, anything else
    (arrays included) replaces. A patch that is not a JSON object is a 400 ("Invalid JSON Patch")."""
    if not isinstance(patch, dict):
        raise _bad_request("Invalid JSON Patch")
    return _merge_object(copy.deepcopy(dict(doc)), copy.deepcopy(patch))


# --- strategic merge patch --------------------------------------------------------------------------

_DIRECTIVE: Final = "$patch"
_RETAIN_KEYS: Final = "$retainKeys"
_DELETE_FROM_PRIMITIVE_LIST: Final = "$deleteFromPrimitiveList"
_SET_ELEMENT_ORDER: Final = "$setElementOrder"
_ERR_PRIMITIVE_LIST: Final = "invalid patch format of primitive list"
_ERR_RETAIN_KEYS: Final = "invalid patch format of retainKeys"
_ERR_SET_ELEMENT_ORDER: Final = "invalid patch format of setElementOrder list"


@dataclass(frozen=True, slots=True)
class FieldPatchMeta:
    """A field's struct tags: `strategy` as in patchStrategy ("merge", "retainKeys",
    "merge,retainKeys", "replace" or ""), `merge_key` as in patchMergeKey, and `fields`, the
    tags inside the field's value (or, for a list, inside its items)."""

    strategy: str = ""
    merge_key: str = ""
    fields: Mapping[str, FieldPatchMeta] = field(default_factory=dict)

    @property
    def list_strategy(self) -> str:
        """The strategy without retainKeys (which only governs the $retainKeys directive)."""
        return ",".join(s for s in self.strategy.split(",") if s and s != "retainKeys")


_NO_META: Final = FieldPatchMeta()
Schema = Mapping[str, FieldPatchMeta]


def _merge_list(key: str, fields: Schema | None = None) -> FieldPatchMeta:
    return FieldPatchMeta("merge", key, fields or {})


# Tags from k8s.io/api core/v1 (types.go) and k8s.io/apimachinery meta/v1 (ObjectMeta); a field
# not listed here has no patchStrategy: maps merge key by key, lists are replaced whole.
_OBJECT_META: Final = FieldPatchMeta(
    fields={"ownerReferences": _merge_list("uid"), "finalizers": FieldPatchMeta("merge")}
)
_CONTAINER: Final[Schema] = {
    "ports": _merge_list("containerPort"),
    "env": _merge_list("name"),
    "volumeMounts": _merge_list("mountPath"),
    "volumeDevices": _merge_list("devicePath"),
}
_VOLUME: Final[Schema] = {
    "ephemeral": FieldPatchMeta(
        fields={"volumeClaimTemplate": FieldPatchMeta(fields={"metadata": _OBJECT_META})}
    )
}
_POD: Final[Schema] = {
    "metadata": _OBJECT_META,
    "spec": FieldPatchMeta(
        fields={
            "volumes": FieldPatchMeta("merge,retainKeys", "name", _VOLUME),
            "initContainers": _merge_list("name", _CONTAINER),
            "containers": _merge_list("name", _CONTAINER),
            "ephemeralContainers": _merge_list("name", _CONTAINER),
            "imagePullSecrets": _merge_list("name"),
            "hostAliases": _merge_list("ip"),
            "topologySpreadConstraints": _merge_list("topologyKey"),
            "schedulingGates": _merge_list("name"),
            "resourceClaims": FieldPatchMeta("merge,retainKeys", "name"),
            "evictionResponders": _merge_list("name"),
        }
    ),
    "status": FieldPatchMeta(
        fields={
            "conditions": _merge_list("type"),
            "hostIPs": _merge_list("ip"),
            "podIPs": _merge_list("ip"),
            "resourceClaimStatuses": FieldPatchMeta("merge,retainKeys", "name"),
            "nodeAllocatableResourceClaimStatuses": _merge_list(
                "resourceClaimName", {"mapping": _merge_list("name"), "overhead": _merge_list("name")}
            ),
        }
    ),
}
_NODE: Final[Schema] = {
    "metadata": _OBJECT_META,
    "spec": FieldPatchMeta(fields={"podCIDRs": FieldPatchMeta("merge")}),
    "status": FieldPatchMeta(fields={"conditions": _merge_list("type"), "addresses": _merge_list("type")}),
}
_EVENT: Final[Schema] = {"metadata": _OBJECT_META}

STRATEGIC_SCHEMAS: Final[Mapping[str, Schema]] = {"Pod": _POD, "Node": _NODE, "Event": _EVENT}
# Kinds the simulator applies a strategic merge patch to; the API server answers 415 Unsupported
# Media Type to a strategic merge patch of a custom resource.
STRATEGIC_KINDS: Final = frozenset(STRATEGIC_SCHEMAS)


class _Dropped:
    """Marks a value removed by a `$patch` directive."""


_DROPPED: Final = _Dropped()


def _remove_directives(value: Any) -> Any:
    """The value with every map carrying `$patch` removed (_DROPPED if `value` is one)."""
    if isinstance(value, dict):
        if _DIRECTIVE in value:
            return _DROPPED
        kept = {k: _remove_directives(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not _DROPPED}
    if isinstance(value, list):
        return [v for v in (_remove_directives(v) for v in value) if v is not _DROPPED]
    return value


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _without_directive_keys(value: Any) -> Any:
    # Typed decoding drops these unknown members; a stored object never has them.
    if isinstance(value, dict):
        return {
            k: _without_directive_keys(v)
            for k, v in value.items()
            if k != _RETAIN_KEYS and not k.startswith((_SET_ELEMENT_ORDER, _DELETE_FROM_PRIMITIVE_LIST))
        }
    if isinstance(value, list):
        return [_without_directive_keys(v) for v in value]
    return value


def _new_value(value: Any) -> Any:
    """A patch value with nothing to merge into, as it ends up in the stored object."""
    return _without_directive_keys(_remove_directives(_without_nulls(value)))


def _category(value: Any) -> str:
    return "map" if isinstance(value, dict) else "list" if isinstance(value, list) else "scalar"


def _extract_key(key: str, prefix: str, error: str) -> str:
    head, slash, rest = key.partition("/")
    if head != prefix or not slash:
        raise _bad_request(error)
    return rest


def _element_category(*lists: list[Any]) -> str:
    """sliceElementType: every element must share one JSON type, and lists of lists are refused."""
    first: Any = _ABSENT
    for items in lists:
        for item in items:
            if first is _ABSENT:
                first = item
                if isinstance(item, list):
                    raise _unprocessable("lists of lists are not supported")
            elif type(item) is not type(first):
                shown = " ".join(_go_format(list(items)) for items in lists)
                raise _internal(f"list element types are not identical: [{shown}]")
    if first is _ABSENT:
        raise _internal("no elements in any of the given slices")
    return _category(first)


def _merge_key_value(item: Any, merge_key: str) -> Any:
    # For ordering an item without the key counts as null, as in the Go implementation.
    return item.get(merge_key, None) if isinstance(item, dict) else None


def _find_by_merge_key(items: list[Any], merge_key: str, value: Any) -> int:
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _internal(f"value for key {i} is not a map")
        if merge_key in item and _same_scalar(item[merge_key], value):
            return i
    return -1


def _index_of(items: list[Any], wanted: Any, merge_key: str, by_key: bool) -> int:
    probe = _merge_key_value(wanted, merge_key) if by_key else wanted
    for i, item in enumerate(items):
        if _same_scalar(_merge_key_value(item, merge_key) if by_key else item, probe):
            return i
    return -1


def _require_maps(items: list[Any]) -> None:
    for item in items:
        if not isinstance(item, dict):
            raise _internal(f"expected a map[string]interface {{}}, but received a {_go_json_type(item)}")


def _require_merge_key(items: list[Any], merge_key: str) -> None:
    _require_maps(items)
    for item in items:
        if merge_key not in item:
            raise _internal(f"map: {_go_format(item)} does not contain declared merge key: {merge_key}")


def _sort_by(items: list[Any], order: list[Any], merge_key: str, by_key: bool) -> list[Any]:
    if by_key:
        _require_merge_key(items, merge_key)
        _require_merge_key(order, merge_key)
    position = {id(item): _index_of(order, item, merge_key, by_key) for item in items}
    return sorted(items, key=lambda item: position[id(item)])


def _interleave(
    server_only: list[Any], patched: list[Any], server_order: list[Any], merge_key: str, by_key: bool
) -> list[Any]:
    """mergeSortedSlice: both lists keep their order; a server-only item goes before a patch item
    only when both are in the live list and it comes first there."""
    result: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patched):
        if j >= len(patched):
            result.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            result.append(patched[j])
            j += 1
        else:
            left = _index_of(server_order, server_only[i], merge_key, by_key)
            right = _index_of(server_order, patched[j], merge_key, by_key)
            if left >= 0 and right >= 0 and left < right:
                result.append(server_only[i])
                i += 1
            else:
                result.append(patched[j])
                j += 1
    return result


def _order(
    merged: list[Any], patch_order: list[Any], server_order: list[Any], merge_key: str, by_key: bool
) -> list[Any]:
    """normalizeElementOrder: items named by the patch in the patch's order, the others in the live
    order, interleaved by their live positions."""
    patched = [item for item in merged if _index_of(patch_order, item, merge_key, by_key) >= 0]
    server_only = [item for item in merged if _index_of(patch_order, item, merge_key, by_key) < 0]
    return _interleave(
        _sort_by(server_only, server_order, merge_key, by_key),
        _sort_by(patched, patch_order, merge_key, by_key),
        server_order,
        merge_key,
        by_key,
    )


def _dedupe(items: list[Any]) -> list[Any]:
    unique: list[Any] = []
    for item in items:
        if _index_of(unique, item, "", by_key=False) < 0:
            unique.append(item)
    return unique


class _StaleLiveList:
    """The live list as the Go implementation still sees it while ordering a `$setElementOrder`
    list: that code keeps the list's original header while merging edits the shared array in
    place (a deletion shifts the tail left, an append fills the capacity freed by deletions), and
    the result's order depends on those stale contents. The API server builds the live list with
    capacity == length."""

    def __init__(self, items: list[Any]) -> None:
        self.items = list(items)
        self._length = len(items)
        self._shared = True

    def delete(self, index: int) -> None:
        if self._shared:
            self.items[index : self._length - 1] = self.items[index + 1 : self._length]
            self._length -= 1

    def append(self, item: Any) -> None:
        if self._shared and self._length < len(self.items):
            self.items[self._length] = item
            self._length += 1
        else:
            self._shared = False  # Go reallocates; the stale header keeps the old array

    def detach(self) -> None:
        self._shared = False


def _apply_list_directives(
    original: list[Any], patch: list[Any], merge_key: str, stale: _StaleLiveList | None
) -> tuple[list[Any], list[Any]]:
    """`$patch: delete` items remove every live item with their merge key, `$patch: replace`
    replaces the live list with the patch's other items."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        if _DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[_DIRECTIVE]
        if directive == "delete":
            if merge_key not in item:
                raise _internal(f"map: {_go_format(item)} does not contain declared merge key: {merge_key}")
            while (index := _find_by_merge_key(original, merge_key, item[merge_key])) >= 0:
                original = original[:index] + original[index + 1 :]
                if stale:
                    stale.delete(index)
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise _internal("merging lists cannot yet be specified in the patch")
        else:
            raise _internal(f"unknown patch type: {_go_format(directive)} in map: {_go_format(item)}")
    if replace:
        if stale:
            stale.detach()
        return plain, []
    return original, plain


def _merge_list_items(
    original: list[Any], patch: list[Any], meta: FieldPatchMeta, stale: _StaleLiveList | None
) -> list[Any]:
    merged = list(original)
    for item in patch:
        if meta.merge_key not in item:
            raise _internal(f"map: {_go_format(item)} does not contain declared merge key: {meta.merge_key}")
        index = _find_by_merge_key(merged, meta.merge_key, item[meta.merge_key])
        if index >= 0:
            merged[index] = _merge_map(merged[index], item, meta.fields)
        else:
            merged.append(_new_value(item))
            if stale:
                stale.append(item)
    return merged


def _merge_lists(
    original: list[Any],
    patch: list[Any],
    meta: FieldPatchMeta,
    delete_from: bool,
    stale: _StaleLiveList | None = None,
) -> list[Any]:
    if not original and not patch:
        return original
    category = _element_category(original, patch)
    if category != "map":
        if delete_from:
            return [item for item in original if _index_of(patch, item, "", by_key=False) < 0]
        merged = _dedupe(original + patch)
        return _order(merged, patch, original, "", by_key=False)
    if not meta.merge_key:
        raise _internal("cannot merge lists without merge key")
    original, patch = _apply_list_directives(original, patch, meta.merge_key, stale)
    merged = _merge_list_items(original, patch, meta, stale)
    return _order(merged, patch, original, meta.merge_key, by_key=True)


def _merge_field_list(
    original: list[Any],
    patch: list[Any],
    meta: FieldPatchMeta,
    delete_from: bool,
    stale: _StaleLiveList | None = None,
) -> list[Any]:
    if meta.list_strategy == "merge" or delete_from:
        return _merge_lists(original, patch, meta, delete_from, stale)
    return patch


def _apply_retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    if _RETAIN_KEYS not in patch:
        return
    retained = patch.pop(_RETAIN_KEYS)
    if not isinstance(retained, list):
        raise _bad_request(_ERR_RETAIN_KEYS)
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_FROM_PRIMITIVE_LIST, _SET_ELEMENT_ORDER)):
            continue
        if key not in retained:
            raise _bad_request(_ERR_RETAIN_KEYS)
    for key in [k for k in original if k not in retained]:
        del original[key]


def _apply_set_element_order(original: dict[str, Any], patch: dict[str, Any], schema: Schema) -> None:
    """`$setElementOrder/<list>` fixes the order of the merged list: the listed items in that
    order, the others where they were."""
    for directive_key in [k for k in patch if k.startswith(_SET_ELEMENT_ORDER)]:
        order = patch.pop(directive_key)
        if not isinstance(order, list):
            raise _internal(f"expected a []interface {{}}, but received a {_go_json_type(order)}")
        key = _extract_key(directive_key, _SET_ELEMENT_ORDER, _ERR_SET_ELEMENT_ORDER)
        meta = schema.get(key, _NO_META)
        live = original.get(key, _ABSENT)
        patched = patch.get(key, _ABSENT)
        for value in (live, patched):
            if value is not _ABSENT and not isinstance(value, list):
                raise _internal(f"expected a []interface {{}}, but received a {_go_json_type(value)}")
        live_list: list[Any] = [] if live is _ABSENT else live
        patch_list: list[Any] = [] if patched is _ABSENT else patched
        _check_order_matches_patch(patch_list, order, meta.merge_key)
        if live is _ABSENT and patched is _ABSENT:
            continue
        stale = _StaleLiveList(live_list)
        if patched is _ABSENT:
            merged = live_list
        elif live is _ABSENT:
            merged = _new_value(patch_list)
        else:
            merged = _merge_field_list(live_list, patch_list, meta, delete_from=False, stale=stale)
        by_key = _element_category(live_list, patch_list) == "map"
        original[key] = _order(merged, order, stale.items, meta.merge_key, by_key)
        patch.pop(key, None)


def _check_order_matches_patch(patch_list: list[Any], order: list[Any], merge_key: str) -> None:
    """Every item of the patch list must appear in the $setElementOrder list, in the same order."""
    if not patch_list or not order:
        return
    items = patch_list
    if merge_key:
        _require_maps(patch_list)
        items = [item for item in patch_list if item.get(_DIRECTIVE) != "delete"]
    in_patch = in_order = 0
    while in_patch < len(items) and in_order < len(order):
        item = items[in_patch]
        if isinstance(item, dict) and _DIRECTIVE in item:
            in_patch += 1
            continue
        if merge_key:
            _require_merge_key([item, order[in_order]], merge_key)
            equal = _same_scalar(item[merge_key], order[in_order][merge_key])
        else:
            equal = _same_scalar(item, order[in_order])
        if equal:
            in_patch += 1
        in_order += 1
    if in_patch < len(items):
        raise _internal(
            f"The order in patch list:\n{_go_format(patch_list)}\n doesn't match "
            f"{_SET_ELEMENT_ORDER} list:\n{_go_format(order)}\n"
        )


def _merge_map(original: Any, patch: dict[str, Any], schema: Schema) -> dict[str, Any]:
    if _DIRECTIVE in patch:
        directive = patch[_DIRECTIVE]
        if directive == "replace":
            return {k: v for k, v in patch.items() if k != _DIRECTIVE}
        if directive == "delete":
            return {}
        raise _internal(f"unknown patch type: {_go_format(directive)} in map: {_go_format(patch)}")
    result: dict[str, Any] = original if isinstance(original, dict) else {}
    _apply_retain_keys(result, patch)
    _apply_set_element_order(result, patch, schema)
    for patch_key, value in patch.items():
        key, delete_from = patch_key, False
        if patch_key.startswith(_DELETE_FROM_PRIMITIVE_LIST):
            key = _extract_key(patch_key, _DELETE_FROM_PRIMITIVE_LIST, _ERR_PRIMITIVE_LIST)
            delete_from = True
        if value is None:
            result.pop(key, None)
            continue
        live = result.get(key, _ABSENT)
        if live is _ABSENT or _category(live) != _category(value) or live is None:
            if not delete_from:
                cleaned = _new_value(value)
                if cleaned is _DROPPED:
                    result.pop(key, None)
                else:
                    result[key] = cleaned
            continue
        meta = schema.get(key, _NO_META)
        if isinstance(value, dict):
            result[key] = value if meta.list_strategy == "replace" else _merge_map(live, value, meta.fields)
        elif isinstance(value, list):
            result[key] = _merge_field_list(live, value, meta, delete_from)
        else:
            result[key] = value
    return result


def strategic_merge_patch_with_schema(doc: Mapping[str, Any], patch: Any, schema: Schema) -> dict[str, Any]:
    """Apply a strategic merge patch under the given field tags (see FieldPatchMeta)."""
    if not isinstance(patch, dict):
        raise _bad_request(
            f"json: cannot unmarshal {_go_json_type(patch)} into Go value of type map[string]interface {{}}"
        )
    return _merge_map(copy.deepcopy(dict(doc)), copy.deepcopy(patch), schema)


def strategic_merge_patch(doc: Mapping[str, Any], patch: Any, kind: str) -> dict[str, Any]:
    """Apply a Kubernetes strategic merge patch to a copy of `doc`, an object of `kind`.

    Maps merge key by key and null deletes a key. Lists replace the live list unless their field is
    tagged patchStrategy "merge": lists of scalars then become a set union (e.g. finalizers), lists
    of objects merge item by item on patchMergeKey (containers by name, conditions by type). The
    directives `$patch: replace|delete` (in maps and list items), `$retainKeys`,
    `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` are honoured. Kinds outside
    STRATEGIC_KINDS get a JSON merge patch.
    """
    schema = STRATEGIC_SCHEMAS.get(canonical_kind(kind))
    if schema is None:
        return merge_patch(doc, patch)
    return strategic_merge_patch_with_schema(doc, patch, schema)
