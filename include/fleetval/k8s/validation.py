"""Validate objects the way the Kubernetes API server does on create/update (pure; no HTTP).

The simulated API server answers the real `kubernetes` client and KubernetesPodOperator, so a
manifest fleetval renders wrong must fail here as it fails on a cluster: same HTTP code, same
`Status` body, same message text. Wordings are the API server's own (apimachinery
`pkg/util/validation`, `pkg/util/validation/field/errors.go`, `pkg/api/errors`, apiserver
`endpoints/handlers/rest.go`, `pkg/apis/core/validation`, apiextensions-apiserver and
kube-openapi `pkg/validation`).

Built-in objects (Pod, Node, Namespace, ConfigMap, Secret, ServiceAccount, Event, Service) go
through two stages, as on the server:

1. Decoding against the Kubernetes OpenAPI schema (the schema files `kubernetes_validate` ships
   for `KUBERNETES_VERSION`). A JSON value of the wrong type fails the Go decoder: 400
   BadRequest, `Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string
   into Go struct field PodSpec.spec.activeDeadlineSeconds of type int64` (the first such
   error in document order). Unknown fields follow `fieldValidation`: `Ignore` drops them,
   `Warn` (the server default) drops them and returns `unknown field "spec.foo"` warnings,
   `Strict` fails with 400 `... strict decoding error: unknown field "spec.foo"`.
2. Semantic validation (a subset of `pkg/apis/core/validation`): 422 Invalid with one cause
   per error, the message `Pod "x" is invalid: [a, b]` as `errors.NewInvalid` aggregates it.

Custom objects are checked against the served version's `openAPIV3Schema` of the upstream CRDs
in `crds/` with structural-schema semantics: unknown fields pruned (reported per
`fieldValidation` like built-ins) unless `x-kubernetes-preserve-unknown-fields`; `null` dropped
unless `nullable`; `default`s applied; `x-kubernetes-int-or-string`; embedded resources keep
apiVersion/kind/metadata. Value constraints are checked with `jsonschema` and reported the way
apiextensions converts kube-openapi's results: `MPIJob.kubeflow.org "x" is invalid:
spec.runPolicy.backoffLimit: Invalid value: "string": spec.runPolicy.backoffLimit in body must
be of type integer: "string"`. CEL rules (`x-kubernetes-validations`) and string `format`s are
not evaluated.

Not modelled: defaulting of built-in objects (the caller defaults), namespace checks (the
server fills and checks the namespace from the URL), update-only rules (immutability), and the
long tail of Pod rules (probes, security contexts, ports, env sources...).
"""

from __future__ import annotations

import copy
import importlib.resources
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import Any, Final

import jsonschema
import yaml
from kubernetes_validate import utils as kv_utils

from fleetval.k8s.names import NameSyntax
from fleetval.k8s.quantity import FORMAT_ERROR as _QUANTITY_FORMAT_ERROR
from fleetval.k8s.quantity import Quantity, QuantityError

# The newest Kubernetes schema kubernetes_validate ships that the kubernetes client (36.x, i.e.
# Kubernetes 1.36) speaks; every schema lookup in this module uses it.
KUBERNETES_VERSION: Final = "1.36"
FIELD_VALIDATION_MODES: Final = ("Ignore", "Warn", "Strict")

# `metav1.StatusCause` types (`field.ErrorType`), and the text `ErrorType.String()` gives them.
_TYPE_TEXT: Final[dict[str, str]] = {
    "FieldValueNotFound": "Not found",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "FieldValueTooFew": "Too few",
    "InternalError": "Internal error",
    "FieldValueTypeInvalid": "Invalid value",
    "FieldValueTooShort": "Too short",
}
# ErrorBody prints no bad value for these.
_NO_VALUE: Final = frozenset(
    {"FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong", "FieldValueTooShort", "InternalError"}
)


class _Omit:
    """The bad value of an error that prints none (`field.OmitValueType`)."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT: Final = _Omit()


# ---------------------------------------------------------------------------------------------
# Status bodies and errors


class ApiError(Exception):
    """An API server refusal: `code` is the HTTP status, `body` the `Status` object to send."""

    def __init__(self, code: int, body: Mapping[str, Any]) -> None:
        super().__init__(str(body.get("message", "")))
        self.code = code
        self.body: dict[str, Any] = dict(body)


def status_body(
    code: int,
    reason: str,
    message: str,
    *,
    kind: str | None = None,
    name: str | None = None,
    group: str | None = None,
    causes: Iterable[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A `metav1.Status` failure as the server serialises it: fields in Go struct order, empty
    `details` members left out (they are `omitempty`), no `details` when it would be empty."""
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    cause_list = []
    for cause in causes:
        entry = {k: str(cause[k]) for k in ("reason", "message", "field") if cause.get(k)}
        cause_list.append(entry)
    if cause_list:
        details["causes"] = cause_list
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details:
        body["details"] = details
    body["code"] = code
    return body


def bad_request(message: str) -> ApiError:
    """`errors.NewBadRequest`: 400, reason BadRequest, no details."""
    return ApiError(400, status_body(400, "BadRequest", message))


@dataclass(frozen=True, slots=True)
class FieldError:
    """One `field.Error`: `type` is its cause type (`FieldValueRequired`...)."""

    type: str
    field: str
    bad_value: Any = OMIT
    detail: str = ""

    def body(self) -> str:
        """`Error.ErrorBody()`: the message without the field name."""
        text = _TYPE_TEXT[self.type]
        if self.type not in _NO_VALUE and self.bad_value is not OMIT:
            text = f"{text}: {go_value(self.bad_value)}"
        if self.detail:
            text = f"{text}: {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> dict[str, str]:
        return {"reason": self.type, "message": self.body(), "field": self.field}


def required(path: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", path, "", detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path, value, detail)


def type_invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueTypeInvalid", path, value, detail)


def not_supported(path: str, value: Any, supported: Sequence[str]) -> FieldError:
    detail = "supported values: " + ", ".join(go_quote(v) for v in supported) if supported else ""
    return FieldError("FieldValueNotSupported", path, value, detail)


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", path, value)


def not_found(path: str, value: Any, detail: str = "") -> FieldError:
    return FieldError("FieldValueNotFound", path, value, detail)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", path, "", detail)


def too_long(path: str, max_bytes: int) -> FieldError:
    unit = "byte" if max_bytes == 1 else "bytes"
    return FieldError(
        "FieldValueTooLong", path, "<value omitted>", f"may not be more than {max_bytes} {unit}"
    )


def too_many(path: str, actual: int, maximum: int) -> FieldError:
    unit = "item" if maximum == 1 else "items"
    return FieldError("FieldValueTooMany", path, actual, f"must have at most {maximum} {unit}")


def aggregate(errors: Sequence[FieldError]) -> str:
    """`utilerrors.NewAggregate(errs).Error()`: one message alone, several as `[a, b]`, duplicate
    messages once."""
    messages: list[str] = []
    for error in errors:
        text = str(error)
        if text not in messages:
            messages.append(text)
    if len(messages) == 1:
        return messages[0]
    return "[" + ", ".join(messages) + "]"


def invalid_error(kind: str, name: str, errors: Sequence[FieldError], *, group: str = "") -> ApiError:
    """`errors.NewInvalid`: 422 Invalid, `<Kind>[.<group>] "<name>" is invalid: <errors>`."""
    qualified = f"{kind}.{group}" if group else kind
    message = f"{qualified} {go_quote(name)} is invalid: {aggregate(errors)}"
    body = status_body(
        422,
        "Invalid",
        message,
        kind=kind,
        name=name,
        group=group,
        causes=[e.cause() for e in errors],
    )
    return ApiError(422, body)


# ---------------------------------------------------------------------------------------------
# Go formatting (fmt %v / %q, encoding/json), as the server prints bad values


def go_quote(text: str) -> str:
    """`strconv.Quote`: printable runes kept, the usual escapes, other control characters as \\x."""
    out = ['"']
    escapes = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in escapes:
            out.append(escapes[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif not ch.isprintable() and ch != " ":
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_float(value: float) -> str:
    """Go's `%v` for a float64 (`strconv.FormatFloat(v, 'g', -1, 64)`): the shortest digits, in
    exponent form when the decimal exponent is below -4 or at least 6 (`1e+06`, `1.5e-05`)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    point = len(text) + exponent  # position of the decimal point in the digit string
    exp10 = point - 1
    prefix = "-" if sign else ""
    if exp10 < -4 or exp10 >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{text}"
    if point >= len(text):
        return prefix + text + "0" * (point - len(text))
    return f"{prefix}{text[:point]}.{text[point:]}"


def go_json(value: Any) -> str:
    """`json.Marshal`: compact, map keys sorted, `<`, `>` and `&` escaped for HTML."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_value(value: Any) -> str:
    """How `ErrorBody` prints a bad value: %v for numbers and booleans, %q for strings, JSON else."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, Quantity):
        return go_quote(str(value))
    return go_json(value)


# ---------------------------------------------------------------------------------------------
# resource.Quantity


def parse_quantity(raw: str | int | float) -> Quantity:
    """`resource.ParseQuantity` of what `Quantity.UnmarshalJSON` hands it: the text trimmed of white
    space. Raises QuantityError."""
    return Quantity.parse(raw.strip() if isinstance(raw, str) else raw)


# ---------------------------------------------------------------------------------------------
# Name, label and key syntax (apimachinery pkg/util/validation, pkg/api/validate/content)

# Length limits here are counted and worded in characters (selectors counts bytes; see NameSyntax).
_NAMES: Final = NameSyntax("characters")
dns1123_label: Final = _NAMES.dns1123_label
dns1123_subdomain: Final = _NAMES.dns1123_subdomain
dns1035_label: Final = _NAMES.dns1035_label
qualified_name: Final = _NAMES.qualified_name
label_value: Final = _NAMES.label_value
config_map_key: Final = _NAMES.config_map_key


def _mask_trailing_dash(name: str) -> str:
    # A generateName prefix may end in '-': the generated suffix follows it.
    return name[:-1] + "a" if len(name) > 1 and name.endswith("-") else name


NameCheck = Callable[[str], list[str]]
# Which name rule each kind uses (ValidateObjectMeta's nameFn): DNS subdomain unless stated.
_NAME_RULES: Final[dict[str, NameCheck]] = {
    "Namespace": dns1123_label,
    "Service": dns1035_label,
}
_ANNOTATIONS_MAX_BYTES: Final = 256 * 1024


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def validate_object_meta(
    meta: Mapping[str, Any], name_rule: NameCheck, path: str = "metadata"
) -> list[FieldError]:
    """`ValidateObjectMeta` on create, without the namespace checks the server does from the URL."""
    errs: list[FieldError] = []
    generate_name = meta.get("generateName") or ""
    name = meta.get("name") or ""
    if generate_name:
        errs.extend(
            invalid(_child(path, "generateName"), generate_name, m)
            for m in name_rule(_mask_trailing_dash(generate_name))
        )
    if not name:
        if not generate_name:
            errs.append(required(_child(path, "name"), "name or generateName is required"))
    else:
        errs.extend(invalid(_child(path, "name"), name, m) for m in name_rule(name))
    generation = meta.get("generation")
    if isinstance(generation, int) and generation < 0:
        errs.append(invalid(_child(path, "generation"), generation, "must be greater than or equal to 0"))
    errs.extend(validate_labels(meta.get("labels") or {}, _child(path, "labels")))
    annotations = meta.get("annotations") or {}
    for key in annotations:
        errs.extend(invalid(_child(path, "annotations"), key, m) for m in qualified_name(key.lower()))
    size = sum(len(k) + len(str(v or "")) for k, v in annotations.items())
    if size > _ANNOTATIONS_MAX_BYTES:
        errs.append(too_long(_child(path, "annotations"), _ANNOTATIONS_MAX_BYTES))
    return errs


def validate_labels(labels: Mapping[str, Any], path: str) -> list[FieldError]:
    """`ValidateLabels`: the field is the map itself, the bad value the key or the value."""
    errs: list[FieldError] = []
    for key, value in labels.items():
        errs.extend(invalid(path, key, m) for m in qualified_name(key))
        errs.extend(invalid(path, value, m) for m in label_value(str(value if value is not None else "")))
    return errs


# ---------------------------------------------------------------------------------------------
# Pod semantics (pkg/apis/core/validation: ValidatePodSpec and what it calls, a subset)

_RESTART_POLICIES: Final = ("Always", "OnFailure", "Never")
_PULL_POLICIES: Final = ("Always", "IfNotPresent", "Never")
_TOLERATION_OPERATORS: Final = ("Equal", "Exists")
_TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_MAX_INT32: Final = 2**31 - 1
_NOT_INTEGER: Final = "must be an integer"


def _is_native_resource(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _is_hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def _is_extended_resource(name: str) -> bool:
    return not _is_native_resource(name) and not name.startswith("requests.")


def _overcommit_allowed(name: str) -> bool:
    return _is_native_resource(name) and not _is_hugepages(name)


def _is_integer_resource(name: str) -> bool:
    # Extended resources are counted in whole units (helper.IsIntegerResourceName).
    return _is_extended_resource(name)


def _validate_quantity(resource: str, quantity: Quantity, path: str) -> list[FieldError]:
    errs = []
    if quantity.value < 0:
        errs.append(invalid(path, quantity, "must be greater than or equal to 0"))
    if _is_integer_resource(resource) and not quantity.is_integer:
        errs.append(invalid(path, quantity, _NOT_INTEGER))
    return errs


def _quantities(section: Any) -> dict[str, Quantity]:
    out: dict[str, Quantity] = {}
    if isinstance(section, Mapping):
        for name, raw in section.items():
            if isinstance(raw, Quantity):
                out[str(name)] = raw
            elif raw is not None:
                out[str(name)] = parse_quantity(raw)
    return out


def validate_resources(resources: Mapping[str, Any], path: str) -> list[FieldError]:
    """`ValidateResourceRequirements`: whole units for extended resources, and for resources that
    cannot be overcommitted (extended, hugepages) a request equal to the limit, and a limit."""
    errs: list[FieldError] = []
    lim_path, req_path = _child(path, "limits"), _child(path, "requests")
    limits = _quantities(resources.get("limits"))
    requests = _quantities(resources.get("requests"))
    for name in sorted(limits):
        errs.extend(_validate_quantity(name, limits[name], f"{lim_path}[{name}]"))
    for name in sorted(requests):
        quantity = requests[name]
        errs.extend(_validate_quantity(name, quantity, f"{req_path}[{name}]"))
        limit = limits.get(name)
        if limit is not None:
            if quantity.value != limit.value and not _overcommit_allowed(name):
                errs.append(invalid(req_path, str(quantity), f"must be equal to {name} limit of {limit}"))
            elif quantity.value > limit.value:
                errs.append(
                    invalid(req_path, str(quantity), f"must be less than or equal to {name} limit of {limit}")
                )
        elif not _overcommit_allowed(name):
            errs.append(required(lim_path, "Limit must be set for non overcommitable resources"))
    return errs


def _validate_container(
    container: Mapping[str, Any], path: str, names: set[str], volumes: set[str]
) -> list[FieldError]:
    errs: list[FieldError] = []
    name = container.get("name") or ""
    name_path = _child(path, "name")
    if not name:
        errs.append(required(name_path))
    else:
        errs.extend(invalid(name_path, name, m) for m in dns1123_label(name))
        if name in names:
            errs.append(duplicate(name_path, name))
        names.add(name)
    if not container.get("image"):
        errs.append(required(_child(path, "image")))
    policy = container.get("imagePullPolicy")
    if policy and policy not in _PULL_POLICIES:
        errs.append(not_supported(_child(path, "imagePullPolicy"), policy, _PULL_POLICIES))
    for i, mount in enumerate(container.get("volumeMounts") or []):
        mount_path = f"{path}.volumeMounts[{i}]"
        mount_name = mount.get("name") or ""
        if not mount_name:
            errs.append(required(_child(mount_path, "name")))
        elif mount_name not in volumes:
            errs.append(not_found(_child(mount_path, "name"), mount_name))
        if not mount.get("mountPath"):
            errs.append(required(_child(mount_path, "mountPath")))
    errs.extend(validate_resources(container.get("resources") or {}, _child(path, "resources")))
    return errs


def _validate_volumes(volumes: Sequence[Mapping[str, Any]], path: str) -> tuple[set[str], list[FieldError]]:
    errs: list[FieldError] = []
    names: set[str] = set()
    for i, volume in enumerate(volumes):
        vol_path = f"{path}[{i}]"
        name = volume.get("name") or ""
        if not name:
            errs.append(required(_child(vol_path, "name")))
        else:
            errs.extend(invalid(_child(vol_path, "name"), name, m) for m in dns1123_label(name))
            if name in names:
                errs.append(duplicate(_child(vol_path, "name"), name))
            names.add(name)
        sources = [k for k in volume if k != "name"]
        if not sources:
            errs.append(required(vol_path, "must specify a volume type"))
        elif len(sources) > 1:
            errs.append(forbidden(_child(vol_path, sources[1]), "may not specify more than 1 volume type"))
    return names, errs


def _validate_tolerations(tolerations: Sequence[Mapping[str, Any]], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, toleration in enumerate(tolerations):
        tol_path = f"{path}[{i}]"
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or ""
        if key:
            errs.extend(invalid(_child(tol_path, "key"), key, m) for m in qualified_name(key))
        elif operator != "Exists":
            errs.append(
                invalid(
                    _child(tol_path, "operator"),
                    operator,
                    "operator must be Exists when `key` is empty, which means "
                    '"match all values and all keys"',
                )
            )
        value = toleration.get("value") or ""
        if operator in ("Equal", ""):
            messages = label_value(value)
            if messages:
                errs.append(invalid(_child(tol_path, "operator"), value, ";".join(messages)))
        elif operator == "Exists":
            if value:
                errs.append(
                    invalid(
                        _child(tol_path, "operator"),
                        dict(toleration),
                        "value must be empty when `operator` is 'Exists'",
                    )
                )
        else:
            errs.append(not_supported(_child(tol_path, "operator"), operator, _TOLERATION_OPERATORS))
        effect = toleration.get("effect")
        if effect and effect not in _TAINT_EFFECTS:
            errs.append(not_supported(_child(tol_path, "effect"), effect, _TAINT_EFFECTS))
    return errs


def _validate_node_selector_requirement(req: Mapping[str, Any], path: str) -> list[FieldError]:
    """`ValidateNodeSelectorRequirement` (matchExpressions, on node labels)."""
    errs: list[FieldError] = []
    operator, values = req.get("operator") or "", list(req.get("values") or [])
    if operator in ("In", "NotIn"):
        if not values:
            errs.append(
                required(_child(path, "values"), "must be specified when `operator` is 'In' or 'NotIn'")
            )
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            errs.append(
                forbidden(
                    _child(path, "values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
    elif operator in ("Gt", "Lt"):
        if len(values) != 1:
            errs.append(
                required(
                    _child(path, "values"), "must be specified single value when `operator` is 'Lt' or 'Gt'"
                )
            )
    else:
        errs.append(invalid(_child(path, "operator"), operator, "not a valid selector operator"))
    key = str(req.get("key") or "")
    errs.extend(invalid(_child(path, "key"), key, m) for m in qualified_name(key))
    for i, value in enumerate(values):
        errs.extend(invalid(f"{path}.values[{i}]", value, m) for m in label_value(str(value)))
    return errs


def _validate_node_field_selector_requirement(req: Mapping[str, Any], path: str) -> list[FieldError]:
    """`ValidateNodeFieldSelectorRequirement` (matchFields): In or NotIn with exactly one value, and
    `metadata.name`, a DNS subdomain, the only key (`nodeFieldSelectorValidators`)."""
    errs: list[FieldError] = []
    operator, values = req.get("operator") or "", list(req.get("values") or [])
    if operator in ("In", "NotIn"):
        if len(values) != 1:
            errs.append(
                required(
                    _child(path, "values"),
                    "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                )
            )
    else:
        errs.append(invalid(_child(path, "operator"), operator, "not a valid selector operator"))
    key = str(req.get("key") or "")
    if key != "metadata.name":
        errs.append(invalid(_child(path, "key"), key, "not a valid field selector key"))
    else:
        for i, value in enumerate(values):
            errs.extend(invalid(f"{path}.values[{i}]", value, m) for m in dns1123_subdomain(str(value)))
    return errs


def _validate_affinity(affinity: Mapping[str, Any], path: str) -> list[FieldError]:
    """`validateAffinity`, its required node affinity only (`ValidateNodeSelector`)."""
    node_affinity = affinity.get("nodeAffinity") or {}
    selector = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if selector is None:
        return []
    sel_path = _child(_child(path, "nodeAffinity"), "requiredDuringSchedulingIgnoredDuringExecution")
    terms_path = _child(sel_path, "nodeSelectorTerms")
    terms = selector.get("nodeSelectorTerms") or []
    if not terms:
        return [required(terms_path, "must have at least one node selector term")]
    errs: list[FieldError] = []
    for i, term in enumerate(terms):
        term_path = f"{terms_path}[{i}]"
        for j, req in enumerate((term or {}).get("matchExpressions") or []):
            errs.extend(_validate_node_selector_requirement(req, f"{term_path}.matchExpressions[{j}]"))
        for j, req in enumerate((term or {}).get("matchFields") or []):
            errs.extend(_validate_node_field_selector_requirement(req, f"{term_path}.matchFields[{j}]"))
    return errs


def validate_pod_spec(spec: Mapping[str, Any], path: str = "spec") -> list[FieldError]:
    """The Pod rules the simulator enforces, in `ValidatePodSpec`'s order."""
    volumes, errs = _validate_volumes(spec.get("volumes") or [], _child(path, "volumes"))
    containers = spec.get("containers") or []
    names: set[str] = set()
    if not containers:
        errs.append(required(_child(path, "containers")))
    for i, container in enumerate(containers):
        errs.extend(_validate_container(container, f"{path}.containers[{i}]", names, volumes))
    for i, container in enumerate(spec.get("initContainers") or []):
        errs.extend(_validate_container(container, f"{path}.initContainers[{i}]", names, volumes))
    restart = spec.get("restartPolicy")
    if restart and restart not in _RESTART_POLICIES:
        errs.append(not_supported(_child(path, "restartPolicy"), restart, _RESTART_POLICIES))
    errs.extend(validate_labels(spec.get("nodeSelector") or {}, _child(path, "nodeSelector")))
    errs.extend(_validate_affinity(spec.get("affinity") or {}, _child(path, "affinity")))
    account = spec.get("serviceAccountName")
    if account:
        errs.extend(
            invalid(_child(path, "serviceAccountName"), account, m) for m in dns1123_subdomain(account)
        )
    node = spec.get("nodeName")
    if node:
        errs.extend(invalid(_child(path, "nodeName"), node, m) for m in dns1123_subdomain(node))
    deadline = spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and not 1 <= deadline <= _MAX_INT32:
        errs.append(
            invalid(
                _child(path, "activeDeadlineSeconds"),
                deadline,
                f"must be between 1 and {_MAX_INT32}, inclusive",
            )
        )
    errs.extend(_validate_tolerations(spec.get("tolerations") or [], _child(path, "tolerations")))
    return errs


def _validate_data_keys(obj: Mapping[str, Any], section: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for key in obj.get(section) or {}:
        errs.extend(invalid(f"{section}[{key}]", key, m) for m in config_map_key(key))
    return errs


def _semantic_errors(kind: str, obj: Mapping[str, Any]) -> list[FieldError]:
    errs = validate_object_meta(obj.get("metadata") or {}, _NAME_RULES.get(kind, dns1123_subdomain))
    if kind == "Pod":
        errs.extend(validate_pod_spec(obj.get("spec") or {}))
    elif kind in ("ConfigMap", "Secret"):
        errs.extend(_validate_data_keys(obj, "data"))
        if kind == "ConfigMap":
            errs.extend(_validate_data_keys(obj, "binaryData"))
        else:
            errs.extend(_validate_data_keys(obj, "stringData"))
    return errs


# ---------------------------------------------------------------------------------------------
# Decoding built-in objects against the Kubernetes OpenAPI schema (the Go JSON decoder's view)

_SCHEMA_DIR: Final = f"kubernetes-json-schema/v{KUBERNETES_VERSION}.0-local-strict"
# Go types of named string fields (their schema says only "string").
_NAMED_STRINGS: Final[dict[str, str]] = {
    "restartPolicy": "v1.RestartPolicy",
    "imagePullPolicy": "v1.PullPolicy",
    "dnsPolicy": "v1.DNSPolicy",
    "terminationMessagePolicy": "v1.TerminationMessagePolicy",
    "preemptionPolicy": "v1.PreemptionPolicy",
    "operator": "v1.TolerationOperator",
    "effect": "v1.TaintEffect",
    "protocol": "v1.Protocol",
    "phase": "v1.PodPhase",
}
_RFC3339_STEPS: Final = (
    ("2006", r"\d{4}"),
    ("-", "-"),
    ("01", r"\d{2}"),
    ("-", "-"),
    ("02", r"\d{2}"),
    ("T", "T"),
    ("15", r"\d{2}"),
    (":", ":"),
    ("04", r"\d{2}"),
    (":", ":"),
    ("05", r"\d{2}(\.\d+)?"),
    ("Z07:00", r"Z|[+-]\d{2}:\d{2}"),
)
_RFC3339: Final = "2006-01-02T15:04:05Z07:00"


class _DecodeFailure(Exception):
    """The decoder's first error, as `json.Unmarshal` (or a type's UnmarshalJSON) words it."""


@cache
def _definitions() -> dict[str, Any]:
    defs: dict[str, Any] = kv_utils.schema_contents(f"{_SCHEMA_DIR}/_definitions.json", KUBERNETES_VERSION)[
        "$defs"
    ]
    return defs


def _schema_file(kind: str, api_version: str) -> str:
    # kubernetes_validate's file naming: rbac.authorization.k8s.io/v1 -> rbac-v1.
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{_SCHEMA_DIR}/{kind.lower()}-{api}.json"


@cache
def _root_schema(kind: str, api_version: str) -> dict[str, Any] | None:
    try:
        schema: dict[str, Any] = kv_utils.schema_contents(_schema_file(kind, api_version), KUBERNETES_VERSION)
    except FileNotFoundError:
        return None
    return schema


def _ref_name(schema: Mapping[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return str(ref).rsplit("/", 1)[-1] if ref else None


def _types(schema: Mapping[str, Any]) -> list[str]:
    raw = schema.get("type")
    if raw is None:
        return []
    values = [raw] if isinstance(raw, str) else list(raw)
    return [t for t in values if t != "null"]


def _go_type(schema: Mapping[str, Any], prop: str) -> str:
    """The Go type behind a property schema, as `reflect.Type.String()` names it."""
    ref = _ref_name(schema)
    if ref is not None:
        package, _, name = ref.rpartition(".")
        return f"{package.rsplit('.', 1)[-1]}.{name}"
    types = _types(schema)
    kind = types[0] if types else ""
    if kind == "array":
        return "[]" + _go_type(schema.get("items") or {}, prop)
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            if _ref_name(extra) == "io.k8s.apimachinery.pkg.api.resource.Quantity":
                return "v1.ResourceList"
            return "map[string]" + _go_type(extra, prop)
        return "map[string]interface {}"
    if kind == "string":
        if schema.get("format") == "byte":
            return "[]uint8"
        return _NAMED_STRINGS.get(prop, "string")
    if kind == "integer":
        return str(schema.get("format") or "int")
    if kind == "number":
        return "float64"
    if kind == "boolean":
        return "bool"
    return "interface {}"


def _json_kind(value: Any) -> str:
    """The JSON kind `UnmarshalTypeError.Value` names."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _number_literal(value: int | float) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _time_error(value: str) -> str | None:
    """`time.Parse(time.RFC3339, value)`'s error, or None when it parses."""
    rest = value
    for element, pattern in _RFC3339_STEPS:
        match = re.match(pattern, rest)
        if match is None:
            return (
                f"parsing time {go_quote(value)} as {go_quote(_RFC3339)}: "
                f"cannot parse {go_quote(rest)} as {go_quote(element)}"
            )
        rest = rest[match.end() :]
    if rest:
        return f"parsing time {go_quote(value)}: extra text: {go_quote(rest)}"
    return None


def _base64_error(value: str) -> str | None:
    """`base64.StdEncoding.DecodeString`'s error for a `[]byte` field, or None."""
    alphabet = re.compile(r"[A-Za-z0-9+/]")
    body = value.rstrip("=")
    for i, ch in enumerate(body):
        if not alphabet.match(ch):
            return f"illegal base64 data at input byte {i}"
    if len(value) % 4 or len(value) - len(body) > 2 or len(body) % 4 == 1:
        return f"illegal base64 data at input byte {len(body) if len(body) % 4 != 1 else len(body) - 1}"
    return None


class _CoreDecoder:
    """Walks an object as the apiserver's JSON decoder does: the first type error aborts, unknown
    struct fields are collected (`spec.containers[0].foo`) and dropped."""

    def __init__(self) -> None:
        self.defs = _definitions()
        self.unknown: list[str] = []

    def struct(
        self, value: Any, properties: Mapping[str, Any], struct: str, fpath: str, gpath: str
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, item in value.items():
            child_f = _child(fpath, key)
            prop = properties.get(key)
            if prop is None:
                self.unknown.append(child_f)
                continue
            if item is None:
                continue  # JSON null leaves the Go field at its zero value: nothing is stored
            out[key] = self.value(item, prop, key, struct, child_f, _child(gpath, key))
        return out

    def fail_type(self, value: Any, struct: str, gpath: str, go_type: str) -> _DecodeFailure:
        kind = _json_kind(value)
        return _DecodeFailure(
            f"json: cannot unmarshal {kind} into Go struct field {struct}.{gpath} of type {go_type}"
        )

    def value(
        self, value: Any, schema: Mapping[str, Any], prop: str, struct: str, fpath: str, gpath: str
    ) -> Any:
        ref = _ref_name(schema)
        if ref is not None:
            return self.named(value, ref, prop, struct, fpath, gpath)
        types = _types(schema)
        kind = types[0] if types else ""
        go_type = _go_type(schema, prop)
        if kind == "object":
            if not isinstance(value, dict):
                raise self.fail_type(value, struct, gpath, go_type)
            extra = schema.get("additionalProperties")
            if isinstance(extra, Mapping):
                return {
                    k: (None if v is None else self.value(v, extra, prop, struct, f"{fpath}[{k}]", gpath))
                    for k, v in value.items()
                }
            return copy.deepcopy(value)
        if kind == "array":
            if not isinstance(value, list):
                raise self.fail_type(value, struct, gpath, go_type)
            items = schema.get("items") or {}
            return [
                None if v is None else self.value(v, items, prop, struct, f"{fpath}[{i}]", gpath)
                for i, v in enumerate(value)
            ]
        if kind == "string":
            if not isinstance(value, str):
                raise self.fail_type(value, struct, gpath, go_type)
            if schema.get("format") == "byte" and (message := _base64_error(value)) is not None:
                raise _DecodeFailure(message)
            return value
        if kind == "integer":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self.fail_type(value, struct, gpath, go_type)
            bits = 32 if schema.get("format") == "int32" else 64
            if isinstance(value, float) or not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
                raise _DecodeFailure(
                    f"json: cannot unmarshal number {_number_literal(value)} into Go struct field "
                    f"{struct}.{gpath} of type {go_type}"
                )
            return value
        if kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self.fail_type(value, struct, gpath, go_type)
            return value
        if kind == "boolean":
            if not isinstance(value, bool):
                raise self.fail_type(value, struct, gpath, go_type)
            return value
        return copy.deepcopy(value)

    def named(self, value: Any, ref: str, prop: str, struct: str, fpath: str, gpath: str) -> Any:
        short = ref.rsplit(".", 1)[-1]
        if short == "Quantity":
            # Quantity.UnmarshalJSON hands strings and bare numbers to ParseQuantity; the server
            # keeps the canonical form (`1.5` -> "1500m").
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise _DecodeFailure(_QUANTITY_FORMAT_ERROR)
            try:
                return str(parse_quantity(value))
            except QuantityError as exc:
                raise _DecodeFailure(str(exc)) from None
        if short == "IntOrString":
            if isinstance(value, str):
                return value
            if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31:
                return value
            shown = (
                f"number {_number_literal(value)}"
                if isinstance(value, int | float) and not isinstance(value, bool)
                else _json_kind(value)
            )
            raise _DecodeFailure(f"json: cannot unmarshal {shown} into Go value of type int32")
        if short in ("Time", "MicroTime"):
            if not isinstance(value, str):
                raise _DecodeFailure(
                    f"json: cannot unmarshal {_json_kind(value)} into Go value of type string"
                )
            if (message := _time_error(value)) is not None:
                raise _DecodeFailure(message)
            return value
        if short in ("RawExtension", "FieldsV1", "JSON"):
            return copy.deepcopy(value)
        definition = self.defs.get(ref)
        if definition is None:
            return copy.deepcopy(value)
        if "properties" not in definition:
            return self.value(value, definition, prop, struct, fpath, gpath)
        if not isinstance(value, dict):
            raise self.fail_type(value, struct, gpath, _go_type({"$ref": ref}, prop))
        return self.struct(value, definition["properties"], short, fpath, gpath)


def _field_validation(mode: str) -> str:
    """The `fieldValidation` query parameter; an unknown value fails as the server's option
    validation does."""
    if mode == "":
        return "Warn"
    if mode not in FIELD_VALIDATION_MODES:
        error = not_supported("fieldValidation", mode, ["", "Ignore", "Strict", "Warn"])
        raise invalid_error("CreateOptions", "", [error], group="meta.k8s.io")
    return mode


def _version_of(api_version: str) -> str:
    return api_version.rsplit("/", 1)[-1]


def _strict_error(kind: str, api_version: str, unknown: Sequence[str]) -> ApiError:
    fields = ", ".join(f"unknown field {go_quote(p)}" for p in unknown)
    return bad_request(
        f"{kind} in version {go_quote(_version_of(api_version))} cannot be handled as a {kind}: "
        f"strict decoding error: {fields}"
    )


def _unknown_outcome(kind: str, api_version: str, unknown: Sequence[str], mode: str) -> list[str]:
    if not unknown or mode == "Ignore":
        return []
    if mode == "Strict":
        raise _strict_error(kind, api_version, unknown)
    return [f"unknown field {go_quote(p)}" for p in unknown]


def validate_core(obj: dict[str, Any], *, field_validation: str = "Warn") -> tuple[dict[str, Any], list[str]]:
    """Validate a built-in object for create: returns the object as the server keeps it (unknown
    fields and nulls dropped, quantities canonical) and the warnings to send, or raises
    `ApiError` (400 for what the decoder rejects, 422 for semantic errors)."""
    mode = _field_validation(field_validation)
    kind, api_version = str(obj.get("kind") or ""), str(obj.get("apiVersion") or "")
    root = _root_schema(kind, api_version) if kind and api_version else None
    if root is None:
        raise bad_request(
            f"no kind {go_quote(kind)} is registered for version {go_quote(api_version)} "
            'in scheme "pkg/api/legacyscheme/scheme.go:30"'
        )
    decoder = _CoreDecoder()
    try:
        decoded = decoder.struct(obj, root["properties"], kind, "", "")
    except _DecodeFailure as failure:
        raise bad_request(
            f"{kind} in version {go_quote(_version_of(api_version))} cannot be handled as a {kind}: {failure}"
        ) from None
    warnings = _unknown_outcome(kind, api_version, decoder.unknown, mode)
    errors = _semantic_errors(kind, decoded)
    if errors:
        group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
        raise invalid_error(kind, str((decoded.get("metadata") or {}).get("name") or ""), errors, group=group)
    return decoded, warnings


# ---------------------------------------------------------------------------------------------
# Custom resources


@dataclass(frozen=True, slots=True)
class Crd:
    """What the API server serves for one CustomResourceDefinition."""

    group: str
    plural: str
    singular: str
    kind: str
    list_kind: str
    namespaced: bool
    served_versions: tuple[str, ...]
    storage_version: str
    short_names: tuple[str, ...]
    schemas: Mapping[str, Mapping[str, Any]]  # version -> openAPIV3Schema
    subresources: Mapping[str, Mapping[str, Any]]  # version -> subresources (status, scale)


# The C loader when PyYAML has it: the Kueue Workload CRD alone is 1.4 MB of YAML.
_YAML_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# An older upstream release of a CRD kept beside the one in use, `<group>_<plural>.<tag>.yaml`
# (`kubeflow.org_mpijobs.v0.4.0.yaml`): what a cluster on that release serves, loaded only when
# asked for by `load_crd_release`, so the default set stays one CRD per resource.
_RELEASE_FILE: Final = re.compile(r"[^/]+_[^/]+\.(v\d+\.\d+\.\d+)\.yaml")


def _parse_crds(text: str) -> list[Crd]:
    crds: list[Crd] = []
    for doc in yaml.load_all(text, Loader=_YAML_LOADER):
        if not doc or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        names = spec["names"]
        versions = spec["versions"]
        served = tuple(v["name"] for v in versions if v.get("served"))
        crds.append(
            Crd(
                group=spec["group"],
                plural=names["plural"],
                singular=names.get("singular") or names["kind"].lower(),
                kind=names["kind"],
                list_kind=names.get("listKind") or names["kind"] + "List",
                namespaced=spec["scope"] == "Namespaced",
                served_versions=served,
                storage_version=next(v["name"] for v in versions if v.get("storage")),
                short_names=tuple(names.get("shortNames") or ()),
                schemas={v["name"]: v["schema"]["openAPIV3Schema"] for v in versions if v.get("served")},
                subresources={v["name"]: v.get("subresources") or {} for v in versions if v.get("served")},
            )
        )
    return crds


def _crd_folder() -> Any:
    return importlib.resources.files("fleetval.k8s").joinpath("crds")


@cache
def _crds() -> dict[tuple[str, str], Crd]:
    crds: dict[tuple[str, str], Crd] = {}
    for entry in sorted(_crd_folder().iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml") or _RELEASE_FILE.fullmatch(entry.name):
            continue
        for crd in _parse_crds(entry.read_text()):
            crds[(crd.group, crd.plural)] = crd
    return crds


def load_crds() -> dict[tuple[str, str], Crd]:
    """The CRDs fleetval serves, keyed by (group, plural)."""
    return dict(_crds())


@cache
def load_crd_release(group: str, plural: str, tag: str) -> Crd:
    """The CRD of (group, plural) as upstream release `tag` ships it (`crds/<group>_<plural>.<tag>.yaml`)."""
    entry = _crd_folder().joinpath(f"{group}_{plural}.{tag}.yaml")
    found = [c for c in _parse_crds(entry.read_text()) if (c.group, c.plural) == (group, plural)]
    if len(found) != 1:
        raise ValueError(f"{entry.name} holds no single CRD for {plural}.{group}")
    return found[0]


_META_KEYS: Final = ("apiVersion", "kind", "metadata")


class _Structural:
    """Pruning, null removal, defaulting and the structural checks (required, list types) of one
    custom object, in apiextensions' order."""

    def __init__(self) -> None:
        self.unknown: list[str] = []
        self.errors: list[FieldError] = []
        self.meta_decoder = _CoreDecoder()

    def metadata(self, value: Any, fpath: str) -> Any:
        if not isinstance(value, dict):
            return value
        meta_def = self.meta_decoder.defs["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
        self.meta_decoder.unknown = []
        out = self.meta_decoder.struct(value, meta_def["properties"], "ObjectMeta", fpath, fpath)
        self.unknown.extend(self.meta_decoder.unknown)
        return out

    def walk(self, value: Any, schema: Mapping[str, Any], path: str, *, root: bool = False) -> Any:
        if isinstance(value, dict) and (
            schema.get("type") == "object" or "properties" in schema or "additionalProperties" in schema
        ):
            return self.obj(value, schema, path, root=root)
        if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
            items = [self.walk(v, schema["items"], f"{path}[{i}]") for i, v in enumerate(value)]
            self.list_type(items, schema, path)
            return items
        return copy.deepcopy(value)

    def obj(
        self, value: dict[str, Any], schema: Mapping[str, Any], path: str, *, root: bool
    ) -> dict[str, Any]:
        props: Mapping[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        embedded = root or schema.get("x-kubernetes-embedded-resource") is True
        out: dict[str, Any] = {}
        for key, item in value.items():
            child = _child(path, key)
            if embedded and key == "metadata":
                out[key] = self.metadata(item, child)
            elif key in props:
                if item is None and not props[key].get("nullable"):
                    continue  # null for a non-nullable field is pruned, then defaulted
                out[key] = self.walk(item, props[key], child)
            elif isinstance(extra, Mapping):
                if item is None and not extra.get("nullable"):
                    continue
                out[key] = self.walk(item, extra, child)
            elif extra is True or preserve or (embedded and key in _META_KEYS):
                out[key] = copy.deepcopy(item)
            else:
                self.unknown.append(child)
        for key, prop in props.items():
            if key not in out and "default" in prop:
                out[key] = self.walk(copy.deepcopy(prop["default"]), prop, _child(path, key))
        for key in schema.get("required") or ():
            if key not in out:
                self.errors.append(required(_child(path, key)))
        return out

    def list_type(self, items: list[Any], schema: Mapping[str, Any], path: str) -> None:
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            seen: list[Any] = []
            for i, item in enumerate(items):
                if item in seen:
                    self.errors.append(duplicate(f"{path}[{i}]", item))
                seen.append(item)
        elif list_type == "map":
            keys = list(schema.get("x-kubernetes-list-map-keys") or ())
            seen_keys: list[dict[str, Any]] = []
            for i, item in enumerate(items):
                if not isinstance(item, dict):
                    continue
                key = {k: item.get(k) for k in keys if k in item}
                if key in seen_keys:
                    self.errors.append(duplicate(f"{path}[{i}]", key))
                seen_keys.append(key)


_COPIED_KEYWORDS: Final = (
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
)


def _json_schema(schema: Mapping[str, Any], *, root: bool = False) -> dict[str, Any]:
    """A structural schema as a JSON Schema draft 4 document for the value checks (structure,
    `required` and list types are handled while pruning)."""
    out: dict[str, Any] = {}
    if schema.get("x-kubernetes-int-or-string"):
        types = ["integer", "string"]
    elif schema.get("type"):
        types = [str(schema["type"])]
    else:
        types = []
    if types:
        if schema.get("nullable"):
            types.append("null")
        out["type"] = types[0] if len(types) == 1 else types
    for key in _COPIED_KEYWORDS:
        if key in schema:
            out[key] = schema[key]
    if "properties" in schema:
        out["properties"] = {
            k: _json_schema(v) for k, v in schema["properties"].items() if not (root and k in _META_KEYS)
        }
    if isinstance(schema.get("items"), Mapping):
        out["items"] = _json_schema(schema["items"])
    if isinstance(schema.get("additionalProperties"), Mapping):
        out["additionalProperties"] = _json_schema(schema["additionalProperties"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            out[key] = [_json_schema(s) for s in schema[key]]
    if isinstance(schema.get("not"), Mapping):
        out["not"] = _json_schema(schema["not"])
    return out


# Draft 4 for OpenAPI v3.0's boolean exclusiveMinimum/Maximum, with kube-openapi's integers:
# an integral float (1.0) is an integer.
_Draft4IntegralFloats: Final = jsonschema.validators.extend(
    jsonschema.Draft4Validator,
    type_checker=jsonschema.Draft4Validator.TYPE_CHECKER.redefine(
        "integer",
        lambda _checker, v: (
            (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
        ),
    ),
)


_VALIDATORS: dict[int, tuple[Mapping[str, Any], Any]] = {}


def _validator(schema: Mapping[str, Any]) -> Any:
    """The value checker of one CRD version's schema, built once per schema object."""
    entry = _VALIDATORS.get(id(schema))
    if entry is None or entry[0] is not schema:
        entry = (schema, _Draft4IntegralFloats(_json_schema(schema, root=True)))
        _VALIDATORS[id(schema)] = entry
    return entry[1]


def _openapi_type(value: Any) -> str:
    """The JSON type kube-openapi names for an unstructured value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _schema_path(parts: Iterable[str | int]) -> str:
    path = ""
    for part in parts:
        path = f"{path}[{part}]" if isinstance(part, int) else _child(path, str(part))
    return path


def _bound(value: Any) -> str:
    # kube-openapi prints minimum/maximum bounds with %v (float64 bounds print like integers).
    return (
        go_float(float(value))
        if isinstance(value, int | float) and not isinstance(value, bool)
        else str(value)
    )


def _schema_error(error: jsonschema.ValidationError) -> FieldError | None:
    """One jsonschema failure as apiextensions reports the kube-openapi equivalent."""
    path = _schema_path(error.absolute_path)
    value = error.instance
    where = f"{path} in body"
    keyword = error.validator
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if keyword == "type":
        expected = error.validator_value
        names = [expected] if isinstance(expected, str) else [t for t in expected if t != "null"]
        actual = _openapi_type(value)
        return type_invalid(path, actual, f"{where} must be of type {','.join(names)}: {go_quote(actual)}")
    if keyword == "enum":
        supported = [v if isinstance(v, str) else go_json(v) for v in error.validator_value]
        return not_supported(path, value, supported)
    if keyword == "minimum":
        word = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
        return invalid(path, value, f"{where} should be {word} {_bound(error.validator_value)}")
    if keyword == "maximum":
        word = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
        return invalid(path, value, f"{where} should be {word} {_bound(error.validator_value)}")
    if keyword == "multipleOf":
        return invalid(path, value, f"{where} should be a multiple of {_bound(error.validator_value)}")
    if keyword == "minLength":
        return invalid(path, value, f"{where} should be at least {error.validator_value} chars long")
    if keyword == "maxLength":
        return too_long(path, int(error.validator_value))
    if keyword == "pattern":
        return invalid(path, value, f"{where} should match '{error.validator_value}'")
    if keyword == "minItems":
        return invalid(path, len(value), f"{where} should have at least {error.validator_value} items")
    if keyword == "maxItems":
        return too_many(path, len(value), int(error.validator_value))
    if keyword == "uniqueItems":
        return invalid(path, "", f"{where} shouldn't contain duplicates")
    if keyword == "minProperties":
        return invalid(path, len(value), f"{where} should have at least {error.validator_value} properties")
    if keyword == "maxProperties":
        return too_many(path, len(value), int(error.validator_value))
    if keyword == "oneOf":
        return invalid(path, value, f"{where} must validate one and only one schema (oneOf)")
    if keyword == "anyOf":
        return invalid(path, value, f"{where} must validate at least one schema (anyOf)")
    if keyword == "allOf":
        return invalid(path, value, f"{where} must validate all the schemas (allOf)")
    if keyword == "not":
        return invalid(path, value, f"{where} must not validate the schema (not)")
    return invalid(path, value, f"{where} {error.message}")


def check_custom(
    obj: dict[str, Any], crd: Crd, version: str, *, field_validation: str = "Warn"
) -> tuple[dict[str, Any], list[str]]:
    """Validate a custom object for create: returns the object as stored (pruned, defaulted) and
    the unknown-field warnings, or raises `ApiError`."""
    mode = _field_validation(field_validation)
    if version not in crd.served_versions:
        raise ApiError(404, status_body(404, "NotFound", "the server could not find the requested resource"))
    api_version = f"{crd.group}/{version}"
    walker = _Structural()
    try:
        pruned = walker.walk(obj, crd.schemas[version], "", root=True)
    except _DecodeFailure as failure:
        raise bad_request(
            f"{crd.kind} in version {go_quote(version)} cannot be handled as a {crd.kind}: {failure}"
        ) from None
    warnings = _unknown_outcome(crd.kind, api_version, walker.unknown, mode)
    meta = pruned.get("metadata") or {}
    if not isinstance(meta, dict):  # the decoder fails on it before any schema is looked at
        raise bad_request(
            f"{crd.kind} in version {go_quote(version)} cannot be handled as a {crd.kind}: json: cannot "
            f"unmarshal {_json_kind(meta)} into Go struct field {crd.kind}.metadata of type v1.ObjectMeta"
        )
    errors = validate_object_meta(meta, dns1123_subdomain)
    structural = list(walker.errors)
    value_errors = [
        e
        for e in (_schema_error(err) for err in _validator(crd.schemas[version]).iter_errors(pruned))
        if e is not None
    ]
    errors.extend(sorted(structural + value_errors, key=lambda e: e.field))
    if errors:
        raise invalid_error(crd.kind, str(meta.get("name") or ""), errors, group=crd.group)
    return pruned, warnings


def validate_custom(obj: dict[str, Any], crd: Crd, version: str) -> dict[str, Any]:
    """Validate a custom object for create with the server's default `fieldValidation` (Warn):
    the pruned, defaulted object, or `ApiError` (`check_custom` also returns the warnings)."""
    return check_custom(obj, crd, version)[0]
