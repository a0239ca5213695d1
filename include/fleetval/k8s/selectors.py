"""Label selectors, field selectors and node-selector terms with the Kubernetes API server's semantics.

The simulated API server filters list and watch results with these, and the scheduler simulation
matches node affinity with them. Clients (the kubernetes client, the KubernetesPodOperator) only
behave as they do against a real cluster if the simulator accepts, rejects and matches exactly what
a real API server does, so the grammar, validation, matching rules and error wording follow
k8s.io/apimachinery (labels.Parse, fields.ParseSelector) and the field-label conversions registered
for each kind. A SelectorError's message is what the API server puts in its 400 BadRequest.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fleetval.k8s.names import NameSyntax


class SelectorError(ValueError):
    """A selector the API server rejects (HTTP 400 BadRequest); the message is the server's."""


# --- label keys and values (k8s.io/apimachinery/pkg/api/validate/content) ---------------------------

# content.IsLabelKey and IsLabelValue count length limits in bytes, as Go's len() does, and say so.
_NAMES: Final = NameSyntax("bytes")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_DECIMAL_INT = re.compile(r"[+-]?[0-9]+")


def label_key_errors(key: str) -> list[str]:
    """Why `key` is not a valid label key (`[prefix/]name`); empty when it is valid."""
    return _NAMES.qualified_name(key)


def label_value_errors(value: str) -> list[str]:
    """Why `value` is not a valid label value; empty when it is valid (the empty string is valid)."""
    return _NAMES.label_value(value)


def _quote(value: str) -> str:
    # Go's %q for the common case: printable text, double quotes and backslashes escaped.
    return json.dumps(value, ensure_ascii=False)


def _invalid(path: str, value: str, details: Sequence[str]) -> str:
    """field.Invalid(...).Error(): the field path is "<nil>" when the parser has none."""
    return f"{path}: Invalid value: {_quote(value)}: {'; '.join(details)}"


def _aggregate(messages: Sequence[str]) -> str:
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def _parse_int64(text: str) -> int | None:
    if not _DECIMAL_INT.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


# --- label selectors (k8s.io/apimachinery/pkg/labels) -----------------------------------------------


class Operator(enum.Enum):
    """selection.Operator: the string is what Requirement.String() and error messages print."""

    IN = "in"
    NOT_IN = "notin"
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    GREATER_THAN = "gt"
    LESS_THAN = "lt"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


_BINARY_OPERATORS: Final = "in, notin, =, ==, !=, gt, lt"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ANDed term of a label selector: `key <operator> values`."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        match self.operator:
            case Operator.IN | Operator.EQUALS | Operator.DOUBLE_EQUALS:
                return present and value in self.values
            case Operator.NOT_IN | Operator.NOT_EQUALS:
                return not present or value not in self.values
            case Operator.EXISTS:
                return present
            case Operator.DOES_NOT_EXIST:
                return not present
            case Operator.GREATER_THAN | Operator.LESS_THAN:
                label_number = _parse_int64(value) if present else None
                bound = _parse_int64(self.values[0]) if len(self.values) == 1 else None
                if label_number is None or bound is None:
                    return False
                if self.operator is Operator.GREATER_THAN:
                    return label_number > bound
                return label_number < bound

    def __str__(self) -> str:
        symbol = {Operator.IN: " in ", Operator.NOT_IN: " notin ", Operator.GREATER_THAN: ">"}
        symbol |= {Operator.LESS_THAN: "<"}
        if self.operator is Operator.EXISTS:
            return self.key
        if self.operator is Operator.DOES_NOT_EXIST:
            return "!" + self.key
        values = ",".join(sorted(self.values))
        if self.operator in (Operator.IN, Operator.NOT_IN):
            values = f"({values})"
        return self.key + symbol.get(self.operator, str(self.operator.value)) + values


def new_requirement(key: str, operator: Operator, values: Iterable[str], path: str = "") -> Requirement:
    """labels.NewRequirement: validate the key, the number of values and each value.

    `path` is the field path the API server reports errors under ("" when parsing a selector string).
    """
    values = tuple(values)
    value_path = f"{path}.values" if path else "values"
    shown = json.dumps(list(values), separators=(",", ":"))
    errors = []

    def bad_values(detail: str) -> None:
        errors.append(f"{value_path}: Invalid value: {shown}: {detail}")

    key_errors = label_key_errors(key)
    if key_errors:
        errors.append(_invalid(f"{path}.key" if path else "key", key, key_errors))
    if operator in (Operator.IN, Operator.NOT_IN) and not values:
        bad_values("for 'in', 'notin' operators, values set can't be empty")
    if operator in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.NOT_EQUALS) and len(values) != 1:
        bad_values("exact-match compatibility requires one single value")
    if operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
        bad_values("values set must be empty for exists and does not exist")
    if operator in (Operator.GREATER_THAN, Operator.LESS_THAN):
        if len(values) != 1:
            bad_values("for 'Gt', 'Lt' operators, exactly one value is required")
        not_integer = ["for 'Gt', 'Lt' operators, the value must be an integer"]
        errors.extend(
            _invalid(f"{value_path}[{i}]", v, not_integer)
            for i, v in enumerate(values)
            if _parse_int64(v) is None
        )
    for i, value in enumerate(values):
        value_errors = label_value_errors(value)
        if value_errors:
            errors.append(_invalid(f"{value_path}[{i}][{key}]", value, value_errors))
    if errors:
        raise SelectorError(_aggregate(errors))
    return Requirement(key, operator, values)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """ANDed requirements; no requirements selects everything."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


class _Token(enum.Enum):
    ERROR = enum.auto()
    END = enum.auto()
    CLOSE_PAREN = enum.auto()
    COMMA = enum.auto()
    NOT = enum.auto()
    DOUBLE_EQUALS = enum.auto()
    EQUALS = enum.auto()
    GREATER_THAN = enum.auto()
    IDENTIFIER = enum.auto()
    IN = enum.auto()
    LESS_THAN = enum.auto()
    NOT_EQUALS = enum.auto()
    NOT_IN = enum.auto()
    OPEN_PAREN = enum.auto()


_LITERALS: Final = {
    ")": _Token.CLOSE_PAREN,
    ",": _Token.COMMA,
    "!": _Token.NOT,
    "==": _Token.DOUBLE_EQUALS,
    "=": _Token.EQUALS,
    ">": _Token.GREATER_THAN,
    "in": _Token.IN,
    "<": _Token.LESS_THAN,
    "!=": _Token.NOT_EQUALS,
    "notin": _Token.NOT_IN,
    "(": _Token.OPEN_PAREN,
}
_SPECIAL: Final = frozenset("=!(),><")
_WHITESPACE: Final = frozenset(" \t\r\n")
_OPERATOR_TOKENS: Final = {
    _Token.IN: Operator.IN,
    _Token.EQUALS: Operator.EQUALS,
    _Token.DOUBLE_EQUALS: Operator.DOUBLE_EQUALS,
    _Token.GREATER_THAN: Operator.GREATER_THAN,
    _Token.LESS_THAN: Operator.LESS_THAN,
    _Token.NOT_IN: Operator.NOT_IN,
    _Token.NOT_EQUALS: Operator.NOT_EQUALS,
}


def _lex(text: str) -> list[tuple[_Token, str]]:
    tokens: list[tuple[_Token, str]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= len(text):
            tokens.append((_Token.END, ""))
            return tokens
        if text[pos] in _SPECIAL:
            # Longest run of symbols that still spells an operator ("!=" but "=" then "!" for "=!").
            buffer, last = "", None
            while pos < len(text) and text[pos] in _SPECIAL:
                if buffer + text[pos] in _LITERALS:
                    buffer += text[pos]
                    last = (_LITERALS[buffer], buffer)
                    pos += 1
                elif last is not None:
                    break
                else:
                    buffer += text[pos]
                    pos += 1
            tokens.append(last or (_Token.ERROR, f"error expected: keyword found '{buffer}'"))
        else:
            start = pos
            while pos < len(text) and text[pos] not in _SPECIAL and text[pos] not in _WHITESPACE:
                pos += 1
            word = text[start:pos]
            tokens.append((_LITERALS.get(word, _Token.IDENTIFIER), word))


class _LabelParser:
    """The recursive-descent parser of labels.Parse, token for token (error wording included)."""

    def __init__(self, text: str) -> None:
        self._tokens = _lex(text)
        self._position = 0

    def _lookahead(self, values: bool = True) -> tuple[_Token, str]:
        return self._as_value(self._tokens[self._position], values)

    def _consume(self, values: bool = True) -> tuple[_Token, str]:
        token = self._tokens[self._position]
        self._position += 1
        return self._as_value(token, values)

    @staticmethod
    def _as_value(token: tuple[_Token, str], values: bool) -> tuple[_Token, str]:
        # Where a value may stand, "in" and "notin" are plain identifiers.
        if values and token[0] in (_Token.IN, _Token.NOT_IN):
            return _Token.IDENTIFIER, token[1]
        return token

    def parse(self) -> list[Requirement]:
        requirements = []
        while True:
            token, literal = self._lookahead()
            if token in (_Token.IDENTIFIER, _Token.NOT):
                try:
                    requirements.append(self._requirement())
                except SelectorError as error:
                    raise SelectorError(f"unable to parse requirement: {error}") from None
                token, literal = self._consume()
                if token is _Token.END:
                    return requirements
                if token is not _Token.COMMA:
                    raise SelectorError(f"found '{literal}', expected: ',' or 'end of string'")
                following, following_literal = self._lookahead()
                if following not in (_Token.IDENTIFIER, _Token.NOT):
                    raise SelectorError(f"found '{following_literal}', expected: identifier after ','")
            elif token is _Token.END:
                return requirements
            else:
                raise SelectorError(f"found '{literal}', expected: !, identifier, or 'end of string'")

    def _requirement(self) -> Requirement:
        operator: Operator | None = None
        token, literal = self._consume()
        if token is _Token.NOT:
            operator = Operator.DOES_NOT_EXIST
            token, literal = self._consume()
        if token is not _Token.IDENTIFIER:
            raise SelectorError(f"found '{literal}', expected: identifier")
        key_errors = label_key_errors(literal)
        if key_errors:
            raise SelectorError(_invalid("<nil>", literal, key_errors))
        if self._lookahead()[0] in (_Token.END, _Token.COMMA) and operator is None:
            operator = Operator.EXISTS
        if operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
            return new_requirement(literal, operator, ())
        token, op_literal = self._consume(values=False)
        if token not in _OPERATOR_TOKENS:
            raise SelectorError(f"found '{op_literal}', expected: {_BINARY_OPERATORS}")
        operator = _OPERATOR_TOKENS[token]
        values = self._value_set() if operator in (Operator.IN, Operator.NOT_IN) else self._exact_value()
        return new_requirement(literal, operator, sorted(values))

    def _value_set(self) -> set[str]:
        token, literal = self._consume()
        if token is not _Token.OPEN_PAREN:
            raise SelectorError(f"found '{literal}' expected: '('")
        token, literal = self._lookahead()
        if token in (_Token.IDENTIFIER, _Token.COMMA):
            values = self._identifier_list()
            if self._consume()[0] is not _Token.CLOSE_PAREN:
                raise SelectorError(f"found '{literal}', expected: ')'")
            return values
        if token is _Token.CLOSE_PAREN:
            self._consume()
            return {""}
        raise SelectorError(f"found '{literal}', expected: ',', ')' or identifier")

    def _identifier_list(self) -> set[str]:
        # Empty entries ("a,,b", "(,a)", "(a,)") stand for the empty value.
        values: set[str] = set()
        while True:
            token, literal = self._consume()
            if token is _Token.IDENTIFIER:
                values.add(literal)
                following, following_literal = self._lookahead()
                if following is _Token.CLOSE_PAREN:
                    return values
                if following is not _Token.COMMA:
                    raise SelectorError(f"found '{following_literal}', expected: ',' or ')'")
            elif token is _Token.COMMA:
                if not values:
                    values.add("")
                following = self._lookahead()[0]
                if following is _Token.CLOSE_PAREN:
                    values.add("")
                    return values
                if following is _Token.COMMA:
                    values.add("")
            else:
                raise SelectorError(f"found '{literal}', expected: ',', or identifier")

    def _exact_value(self) -> set[str]:
        if self._lookahead()[0] in (_Token.END, _Token.COMMA):
            return {""}
        token, literal = self._consume()
        if token is _Token.IDENTIFIER:
            return {literal}
        raise SelectorError(f"found '{literal}', expected: identifier")


def parse_label_selector(text: str) -> LabelSelector:
    """labels.Parse: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, `k>1`, `k<1`,
    comma-separated and ANDed; the empty string selects everything. Raises SelectorError."""
    requirements = _LabelParser(text).parse()
    return LabelSelector(tuple(sorted(requirements, key=lambda r: r.key)))


def label_selector_from_set(labels: Mapping[str, str] | None) -> LabelSelector:
    """labels.SelectorFromSet: equality on every pair, unvalidated (a pod's spec.nodeSelector)."""
    pairs = sorted((labels or {}).items())
    return LabelSelector(tuple(Requirement(k, Operator.EQUALS, (v,)) for k, v in pairs))


# --- field selectors (k8s.io/apimachinery/pkg/fields + per-kind field label conversions) -----------

_OBJECT_META_FIELDS: Final = ("metadata.name", "metadata.namespace")
# kind -> fields the API server accepts in a field selector; for a Pod, "spec.host" is an old
# alias of spec.nodeName and "status.podIPs" is accepted but never populated (so it reads as "").
_KIND_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "Pod": frozenset(
        {
            *_OBJECT_META_FIELDS,
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
            "spec.host",
        }
    ),
    "Node": frozenset({"metadata.name", "spec.unschedulable"}),
    "Event": frozenset(
        {
            *_OBJECT_META_FIELDS,
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    "Namespace": frozenset({"metadata.name", "status.phase"}),
    "Secret": frozenset({*_OBJECT_META_FIELDS, "type"}),
    "Service": frozenset({*_OBJECT_META_FIELDS, "spec.clusterIP", "spec.type"}),
}
_FIELD_ALIASES: Final = {("Pod", "spec.host"): "spec.nodeName"}
_KIND_NAMES: Final = {
    "pod": "Pod",
    "pods": "Pod",
    "node": "Node",
    "nodes": "Node",
    "event": "Event",
    "events": "Event",
    "namespace": "Namespace",
    "namespaces": "Namespace",
    "secret": "Secret",
    "secrets": "Secret",
    "service": "Service",
    "services": "Service",
}


def canonical_kind(kind: str) -> str:
    """The kind's canonical name: "pods", "pod" and "Pod" all give "Pod"; unknown kinds pass through."""
    return _KIND_NAMES.get(kind.lower(), kind)


def _get(obj: Mapping[str, Any], dotted: str) -> Any:
    current: Any = obj
    for part in dotted.split("."):
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _field_value(kind: str, obj: Mapping[str, Any], field: str) -> str:
    """The value the API server's ToSelectableFields gives `field`; "" for a field it has no value for."""
    if kind == "Pod":
        if field == "spec.hostNetwork":
            return _text(bool(_get(obj, "spec.hostNetwork")))
        if field == "status.podIP":
            pod_ips = _get(obj, "status.podIPs") or []
            if pod_ips and isinstance(pod_ips[0], Mapping):
                return _text(pod_ips[0].get("ip"))
            return _text(_get(obj, "status.podIP"))
        if field == "status.podIPs":
            return ""
    if kind == "Node" and field == "spec.unschedulable":
        return _text(bool(_get(obj, "spec.unschedulable")))
    if kind == "Event" and field == "source":
        return _text(_get(obj, "source.component")) or _text(obj.get("reportingComponent"))
    return _text(_get(obj, field))


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    value: str
    negated: bool = False

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
        return f"{self.field}{'!=' if self.negated else '='}{escaped}"


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """ANDed `field=value` / `field!=value` terms for one kind; no terms selects everything."""

    kind: str
    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for requirement in self.requirements:
            equal = _field_value(self.kind, obj, requirement.field) == requirement.value
            if equal == requirement.negated:
                return False
        return True

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _split_terms(text: str) -> list[str]:
    terms, start, escaped = [], 0, False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    # The first operator occurrence splits the term; at one position "!=" and "==" win over "=".
    for i in range(len(term)):
        for operator in ("!=", "==", "="):
            if term.startswith(operator, i):
                return term[:i], operator, term[i + len(operator) :]
    return None


def _unescape_value(text: str) -> str:
    if not any(c in text for c in "\\,="):
        return text
    out, escaped = [], False
    for char in text:
        if escaped:
            if char not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{char}")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            # Go prints the rune as its code point.
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(char)}")
        else:
            out.append(char)
    if escaped:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def supported_fields(kind: str, *, namespaced: bool = True) -> frozenset[str]:
    """The field labels the API server accepts for `kind`. Kinds without their own conversion are
    treated as custom resources: metadata.name, plus metadata.namespace when namespaced."""
    kind = canonical_kind(kind)
    if kind in _KIND_FIELDS:
        return _KIND_FIELDS[kind]
    return frozenset(_OBJECT_META_FIELDS if namespaced else ("metadata.name",))


def parse_field_selector(text: str, kind: str, *, namespaced: bool = True) -> FieldSelector:
    """fields.ParseSelector followed by the API server's field label conversion for `kind`.

    Terms are `field=value`, `field==value`, `field!=value`, comma-separated and ANDed; `\\,`, `\\=`
    and `\\\\` escape the value. A field the kind does not support raises
    SelectorError("field label not supported: <field>"). `namespaced` only matters for kinds
    treated as custom resources.
    """
    kind = canonical_kind(kind)
    terms = sorted(_split_terms(text)) if text else []
    parsed: list[FieldRequirement] = []
    for term in terms:
        if not term:
            continue
        split = _split_term(term)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        field, operator, raw_value = split
        parsed.append(FieldRequirement(field, _unescape_value(raw_value), negated=operator == "!="))
    allowed = supported_fields(kind, namespaced=namespaced)
    converted = []
    for requirement in parsed:
        if requirement.field not in allowed:
            raise SelectorError(f"field label not supported: {requirement.field}")
        field = _FIELD_ALIASES.get((kind, requirement.field), requirement.field)
        converted.append(FieldRequirement(field, requirement.value, requirement.negated))
    return FieldSelector(kind, tuple(converted))


# --- node selector terms (k8s.io/component-helpers/scheduling/corev1/nodeaffinity) ------------------

_NODE_SELECTOR_OPERATORS: Final = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
    "Gt": Operator.GREATER_THAN,
    "Lt": Operator.LESS_THAN,
}


def _term_matches(term: Mapping[str, Any], node_labels: Mapping[str, str], node_name: str) -> bool:
    expressions = term.get("matchExpressions") or []
    field_expressions = term.get("matchFields") or []
    try:
        requirements = [
            new_requirement(
                str(e.get("key", "")),
                _NODE_SELECTOR_OPERATORS[e.get("operator")],
                [str(v) for v in e.get("values") or []],
            )
            for e in expressions
        ]
    except (KeyError, SelectorError):
        return False  # a term that does not parse selects nothing
    if not all(r.matches(node_labels) for r in requirements):
        return False
    for expression in field_expressions:
        values = expression.get("values") or []
        if expression.get("operator") not in ("In", "NotIn") or len(values) != 1:
            return False
    if not node_name:
        return True  # a node without a name has no fields to match against
    node_fields = {"metadata.name": node_name}
    for expression in field_expressions:
        equal = node_fields.get(str(expression.get("key", "")), "") == str(expression["values"][0])
        if equal != (expression["operator"] == "In"):
            return False
    return True


def node_selector_terms_match(terms: Sequence[Mapping[str, Any]] | None, node: Mapping[str, Any]) -> bool:
    """Required node affinity: the terms are ORed; within a term matchExpressions (on node labels)
    and matchFields (only metadata.name) are ANDed. A term with neither, or one that does not
    parse (unknown operator, invalid key or value, Gt/Lt without one integer, matchFields other
    than In/NotIn with exactly one value), matches no node; so does an empty list of terms."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    name = metadata.get("name") or ""
    for term in terms or []:
        if not term or not (term.get("matchExpressions") or term.get("matchFields")):
            continue
        if _term_matches(term, labels, name):
            return True
    return False
