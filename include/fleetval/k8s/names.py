"""Name, label and key syntax checks with the API server's messages (apimachinery
pkg/util/validation and pkg/api/validate/content).

Object validation (metadata names, labels, annotations, container and volume names, data keys) and
the label-selector parser (requirement keys and values) report these messages word for word, so
both use this one implementation. They differ only in how a value that is too long is measured and
worded, so each caller picks the unit of a NameSyntax.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT: Final = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
DNS1035_LABEL_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT: Final = "(" + LABEL_KEY_FMT + ")?"
CONFIG_KEY_FMT: Final = "[-._a-zA-Z0-9]+"

DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_MAX: Final = 253
DNS1035_LABEL_MAX: Final = 63
LABEL_NAME_MAX: Final = 63
LABEL_VALUE_MAX: Final = 63
CONFIG_KEY_MAX: Final = 253

_DNS1123_LABEL_ERR: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_ERR: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1035_LABEL_ERR: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
_LABEL_KEY_ERR: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_KEY_EXAMPLES: Final = ("MyName", "my.name", "123-abc")
_LABEL_VALUE_ERR: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_CONFIG_KEY_ERR: Final = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"


def regex_error(message: str, fmt: str, *examples: str) -> str:
    """`validation.RegexError`, including its `'a',  or 'b'` double space between examples."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    text = message + " (e.g. "
    for i, example in enumerate(examples):
        if i > 0:
            text += " or "
        text += f"'{example}', "
    return text + f"regex used for validation is '{fmt}')"


@dataclass(frozen=True, slots=True)
class NameSyntax:
    """The checks, each returning why a value is invalid (empty when it is valid).

    `unit` is how a length limit is measured and worded: "characters" counts Python characters and
    says "must be no more than N characters"; "bytes" counts UTF-8 bytes, as Go's len() does, and
    says "must be no more than N bytes".
    """

    unit: Literal["characters", "bytes"]

    def _too_long(self, value: str, limit: int) -> list[str]:
        length = len(value.encode()) if self.unit == "bytes" else len(value)
        return [f"must be no more than {limit} {self.unit}"] if length > limit else []

    def _matching(self, value: str, limit: int, fmt: str, message: str, *examples: str) -> list[str]:
        errors = self._too_long(value, limit)
        if not re.fullmatch(fmt, value):
            errors.append(regex_error(message, fmt, *examples))
        return errors

    def dns1123_label(self, value: str) -> list[str]:
        """`IsDNS1123Label`."""
        errors = self._too_long(value, DNS1123_LABEL_MAX)
        if not re.fullmatch(DNS1123_LABEL_FMT, value):
            if re.fullmatch(DNS1123_SUBDOMAIN_FMT, value):
                errors.append("must not contain dots")
            else:
                errors.append(regex_error(_DNS1123_LABEL_ERR, DNS1123_LABEL_FMT, "my-name", "123-abc"))
        return errors

    def dns1123_subdomain(self, value: str) -> list[str]:
        """`IsDNS1123Subdomain`."""
        return self._matching(
            value, DNS1123_SUBDOMAIN_MAX, DNS1123_SUBDOMAIN_FMT, _DNS1123_SUBDOMAIN_ERR, "example.com"
        )

    def dns1035_label(self, value: str) -> list[str]:
        """`IsDNS1035Label`."""
        return self._matching(
            value, DNS1035_LABEL_MAX, DNS1035_LABEL_FMT, _DNS1035_LABEL_ERR, "my-name", "abc-123"
        )

    def qualified_name(self, value: str) -> list[str]:
        """`IsQualifiedName` / `content.IsLabelKey`: an optional DNS-subdomain prefix and a name
        (`[prefix/]name`)."""
        errors: list[str] = []
        parts = value.split("/")
        if len(parts) == 1:
            name = parts[0]
        elif len(parts) == 2:
            prefix, name = parts
            if not prefix:
                errors.append("prefix part must be non-empty")
            else:
                errors.extend("prefix part " + m for m in self.dns1123_subdomain(prefix))
        else:
            return [
                "a valid label key "
                + regex_error(_LABEL_KEY_ERR, LABEL_KEY_FMT, *_LABEL_KEY_EXAMPLES)
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ]
        if not name:
            errors.append("name part must be non-empty")
        else:
            errors.extend("name part " + m for m in self._too_long(name, LABEL_NAME_MAX))
        if not re.fullmatch(LABEL_KEY_FMT, name):
            errors.append("name part " + regex_error(_LABEL_KEY_ERR, LABEL_KEY_FMT, *_LABEL_KEY_EXAMPLES))
        return errors

    def label_value(self, value: str) -> list[str]:
        """`IsValidLabelValue` (the empty string is valid)."""
        return self._matching(
            value, LABEL_VALUE_MAX, LABEL_VALUE_FMT, _LABEL_VALUE_ERR, "MyValue", "my_value", "12345"
        )

    def config_map_key(self, value: str) -> list[str]:
        """`IsConfigMapKey`."""
        errors = self._matching(
            value, CONFIG_KEY_MAX, CONFIG_KEY_FMT, _CONFIG_KEY_ERR, "key.name", "KEY_NAME", "key-name"
        )
        if value == ".":
            errors.append("must not be '.'")
        elif value == "..":
            errors.append("must not be '..'")
        elif value.startswith(".."):
            errors.append("must not start with '..'")
        return errors
