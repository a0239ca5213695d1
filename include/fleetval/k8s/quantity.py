"""Kubernetes resource quantities ("100m", "2Gi", "1e3"): parsed as apimachinery's ParseQuantity
parses them, and printed in the canonical form the API server stores.

The simulated API server validates and canonicalises the quantities in the objects it receives, and
the scheduler simulation adds up pod requests against node allocatable. Both must accept, reject and
round exactly as the Go code does and fail with its error texts, so both use this one parser. The
scan follows parseQuantityString character for character (so "." and "k" are 0, as they are on a
real server); the value is an exact Decimal, rounded up (away from zero) to a nano unit, with
binary-suffixed values capped at 2^63-1.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import ROUND_UP, Context, Decimal, DecimalException
from fractions import Fraction
from typing import Final

# The errors ParseQuantity returns (ErrFormatWrong, ErrSuffix, ErrNumeric), worded as the API
# server reports them.
FORMAT_ERROR: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
SUFFIX_ERROR: Final = "unable to parse quantity's suffix"
NUMERIC_ERROR: Final = "unable to parse numeric part of quantity"

# The suffix families, named as resource.Format names them.
DECIMAL_SI: Final = "DecimalSI"
BINARY_SI: Final = "BinarySI"
DECIMAL_EXPONENT: Final = "DecimalExponent"

DECIMAL_SUFFIXES: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXP: Final = {v: k for k, v in DECIMAL_SUFFIXES.items()}
_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")
_EXPONENT: Final = re.compile(r"[+-]?[0-9]+")
_NANO: Final = Decimal("1e-9")
_MAX_BINARY: Final = Decimal(2**63 - 1)
# Wide enough that real quantities never round while being parsed or summed.
EXACT: Final = Context(prec=200)


class QuantityError(ValueError):
    """ParseQuantity failed; the message is the apimachinery error text."""


def _is_digit(char: str) -> bool:
    return char.isascii() and char.isdigit()


def _split(text: str) -> tuple[bool, str, str, str]:
    """(positive, integer digits, fraction digits, suffix), scanned like parseQuantityString."""
    pos, end = 0, len(text)
    positive = True
    if text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    start = pos
    while pos < end and _is_digit(text[pos]):
        pos += 1
    integer = text[start:pos] or "0"
    fraction = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and _is_digit(text[pos]):
            pos += 1
        fraction = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and _is_digit(text[pos]):
        pos += 1
    if pos < end:
        raise QuantityError(FORMAT_ERROR)
    return positive, integer, fraction, text[suffix_start:]


def _suffix(suffix: str) -> tuple[int, str]:
    """(power, format) of a suffix, like suffixHandler.interpret: a power of 2 for BinarySI, of 10
    otherwise; an exponent must fit an int64."""
    if suffix in DECIMAL_SUFFIXES:
        return DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in BINARY_SUFFIXES:
        return BINARY_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT.fullmatch(suffix[1:]):
        exponent = int(suffix[1:])
        if -(2**63) <= exponent < 2**63:
            return exponent, DECIMAL_EXPONENT
    raise QuantityError(SUFFIX_ERROR)


def parse_decimal(raw: str | int | float) -> tuple[Decimal, str]:
    """The value of a quantity and the format its suffix gives it (DECIMAL_SI, BINARY_SI or
    DECIMAL_EXPONENT), or QuantityError. An int or float is parsed from its repr; a bool, NaN or
    infinity fails the format. The text is not trimmed.
    """
    if isinstance(raw, str):
        text = raw
    elif isinstance(raw, float):
        text = repr(raw)  # "inf" and "nan" fail the format like any other word
    else:
        text = str(raw)  # so does a bool ("True")
    if not text:
        raise QuantityError(FORMAT_ERROR)
    positive, integer, fraction, suffix = _split(text)
    power, fmt = _suffix(suffix)
    try:
        magnitude = Decimal(f"{integer}.{fraction or '0'}")
        if fmt == BINARY_SI:
            value = EXACT.multiply(magnitude, Decimal(2**power))
        else:
            value = magnitude.scaleb(power, EXACT)
        exponent = value.as_tuple().exponent
        if isinstance(exponent, int) and exponent < -9 and value != 0:
            value = value.quantize(_NANO, rounding=ROUND_UP, context=EXACT)
    except DecimalException:
        raise QuantityError(NUMERIC_ERROR) from None
    if fmt == BINARY_SI and value > _MAX_BINARY:
        value = _MAX_BINARY
    return (value if positive else -value), fmt


@dataclass(frozen=True, slots=True)
class Quantity:
    """A parsed quantity as an object keeps it: exact value and the suffix family it was written in."""

    value: Fraction
    format: str  # DECIMAL_SI | BINARY_SI | DECIMAL_EXPONENT

    @classmethod
    def parse(cls, raw: str | int | float) -> Quantity:
        """parse_decimal() as a Quantity; raises QuantityError."""
        value, fmt = parse_decimal(raw)
        return cls(Fraction(value), fmt)

    def __str__(self) -> str:
        return _canonical(self.value, self.format)

    @property
    def is_integer(self) -> bool:
        return self.value.denominator == 1


def _canonical(value: Fraction, fmt: str) -> str:
    """`Quantity.String()`: the largest suffix that keeps an integer mantissa."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if fmt == BINARY_SI and magnitude.denominator == 1 and magnitude >= 1024:
        for suffix, power in sorted(BINARY_SUFFIXES.items(), key=lambda kv: -kv[1]):
            mantissa = magnitude / 2**power
            if mantissa.denominator == 1:
                return f"{sign}{mantissa.numerator}{suffix}"
    for exp in range(18, -10, -3):
        mantissa = magnitude / Fraction(10) ** exp
        if mantissa.denominator == 1:
            if fmt == DECIMAL_EXPONENT:
                return f"{sign}{mantissa.numerator}" + (f"e{exp}" if exp else "")
            return f"{sign}{mantissa.numerator}{_DECIMAL_BY_EXP[exp]}"
    return f"{sign}{math.ceil(magnitude * 10**9)}n"
