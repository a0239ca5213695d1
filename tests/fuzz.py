"""Mutations for the parser fuzz suites, seeded from real fixtures and the simulator's output.

Each family's suite (`tests/fleetval/<tool>/test_fuzz.py`) draws a `Mutant` from its seeds and
checks the oracle: a parse succeeds or raises our typed error (`ParseError`), and a judge never
returns `pass` for input that lost or damaged evidence it needed. `make test` runs a quick slice
(`FLEETVAL_FUZZ_EXAMPLES`, default 120 per test); `make fuzz` runs ≥ 10,000 per family and prints the
tally (inputs, crashes, hangs, passes) that `record` keeps.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("FLEETVAL_FUZZ_EXAMPLES", "120"))
# Under `make fuzz`, an input that takes longer than this to parse and judge is a hang.
HANG_S = float(os.environ.get("FLEETVAL_FUZZ_HANG_S", "5"))
SLOW_S = 1.0
STRICT_TIME = os.environ.get("FLEETVAL_FUZZ_STRICT_TIME") == "1"

T = TypeVar("T")


def fuzz_settings(examples: int | None = None) -> settings:
    return settings(
        max_examples=examples or EXAMPLES,
        deadline=None,
        database=None,
        derandomize=os.environ.get("FLEETVAL_FUZZ_RANDOM") != "1",
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# Replacements for a number in the input: out of range, signed, non-ASCII digits, too many digits for
# int(), not a number at all, malformed.
BAD_NUMBERS = (
    "0",
    "-3",
    "1e3",
    "5.0",
    "1e308",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: isdigit() is True, int() too, float() too
    "\u00b2",  # SUPERSCRIPT TWO: isdigit() is True, int() raises
    "9" * 5000,
    "1x",
    "O",
    "1,000",
    "",
    "N/A",
    "0x10",
)
LONG_TOKENS = (
    "a" * 40_000,
    ":" * 40_000,
    "x:" * 20_000,
    "dcgmi diag " * 9_000,
    "[0] " * 10_000,
    "NVRM: " * 8_000,
)
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


@dataclass(frozen=True, slots=True)
class Mutant:
    seed: str  # the name of the seed it came from
    original: str
    text: str
    ops: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return self.text != self.original


def corrupt_word(word: str, draw: Callable[[st.SearchStrategy[Any]], Any]) -> str:
    """A misspelling of `word` that is never `word` in any case (so never another valid status)."""
    if len(word) < 2:
        return word + "x"
    i = draw(st.integers(0, len(word) - 2))
    kind = draw(st.sampled_from(("swap", "replace", "drop", "double")))
    if kind == "swap" and word[i].lower() != word[i + 1].lower():
        out = word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    elif kind == "drop":
        out = word[:i] + word[i + 1 :]
    elif kind == "double":
        out = word[:i] + word[i] + word[i:]
    else:
        out = word[:i] + ("h" if word[i].lower() != "h" else "q") + word[i + 1 :]
    return out if out.lower() != word.lower() else word + "x"


def _lines(text: str) -> list[str]:
    return text.split("\n")


@st.composite
def mutants(
    draw: Callable[[st.SearchStrategy[Any]], Any],
    seeds: Sequence[tuple[str, str]],
    *,
    words: Sequence[str] = (),
    max_ops: int = 3,
    ops: Sequence[str] | None = None,
) -> Mutant:
    """One to `max_ops` mutations of one seed: bytes, lines, numbers, status words (`words`),
    line endings, truncation, binary garbage, long tokens, emptiness."""
    name, original = draw(st.sampled_from(list(seeds)))
    text = original
    applied: list[str] = []
    choices = list(ops or OPS)
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(st.sampled_from(choices))
        if op == "status" and words:
            present = [w for w in words if re.search(rf"\b{re.escape(w)}\b", text)]
            if not present:
                continue
            word = draw(st.sampled_from(present))
            hits = [m.start() for m in re.finditer(rf"\b{re.escape(word)}\b", text)]
            at = draw(st.sampled_from(hits))
            text = text[:at] + corrupt_word(word, draw) + text[at + len(word) :]
        elif op == "number":
            hits = list(_NUMBER.finditer(text))
            if not hits:
                continue
            m = draw(st.sampled_from(hits))
            new = draw(st.one_of(st.sampled_from(BAD_NUMBERS), st.integers(-(10**12), 10**12).map(str)))
            text = text[: m.start()] + new + text[m.end() :]
        elif op in ("delete_line", "duplicate_line", "swap_lines", "join_lines"):
            lines = _lines(text)
            if len(lines) < 2:
                continue
            i = draw(st.integers(0, len(lines) - 2))
            if op == "delete_line":
                del lines[i]
            elif op == "duplicate_line":
                lines.insert(i, lines[i])
            elif op == "swap_lines":
                lines[i], lines[i + 1] = lines[i + 1], lines[i]
            else:
                lines[i : i + 2] = [lines[i] + " " + lines[i + 1]]
            text = "\n".join(lines)
        elif op == "byte" and text:
            i = draw(st.integers(0, len(text) - 1))
            text = text[:i] + draw(st.characters(codec="utf-8")) + text[i + 1 :]
        elif op == "line_endings":
            text = text.replace("\n", draw(st.sampled_from(("\r\n", "\r", "\n\n", "\x00\n"))))
        elif op == "truncate" and text:
            text = text[: draw(st.integers(0, len(text) - 1))]
        elif op == "garbage":
            i = draw(st.integers(0, len(text)))
            junk = draw(st.binary(min_size=1, max_size=64)).decode("latin-1")
            text = text[:i] + junk + text[i:]
        elif op == "long_token":
            i = draw(st.integers(0, len(text)))
            text = text[:i] + draw(st.sampled_from(LONG_TOKENS)) + text[i:]
        elif op == "empty":
            text = draw(st.sampled_from(("", " ", "\n", "\x00" * 16, "\ufffd" * 8)))
        else:
            continue
        applied.append(op)
    return Mutant(name, original, text, tuple(applied))


OPS = (
    "status",
    "number",
    "delete_line",
    "duplicate_line",
    "swap_lines",
    "join_lines",
    "byte",
    "line_endings",
    "truncate",
    "garbage",
    "long_token",
    "empty",
)

# family → outcome → count: "inputs", "crashes", "hangs", "slow", "passes" (damaged input passed)
TALLY: dict[str, Counter[str]] = defaultdict(Counter)
WORST_S: dict[str, float] = defaultdict(float)


def record(family: str, outcome: str) -> None:
    TALLY[family][outcome] += 1


@contextmanager
def timed(family: str) -> Iterator[None]:
    """Count the input and time it: slow (> 1 s) and hangs (> HANG_S) are counted; under
    `make fuzz` (FLEETVAL_FUZZ_STRICT_TIME=1) a hang fails the test."""
    start = time.perf_counter()
    record(family, "inputs")
    yield
    took = time.perf_counter() - start
    WORST_S[family] = max(WORST_S[family], took)
    if took > HANG_S:
        record(family, "hangs")
        if STRICT_TIME:
            raise AssertionError(f"{family}: one input took {took:.1f} s (a hang: > {HANG_S} s)")
    elif took > SLOW_S:
        record(family, "slow")


def tally_lines() -> list[str]:
    if not TALLY:
        return []
    out = ["fuzz tally (family: inputs, crashes, hangs, slow, damaged→pass, worst seconds per input)"]
    for family in sorted(TALLY):
        c = TALLY[family]
        out.append(
            f"  {family}: {c['inputs']} inputs, {c['crashes']} crashes, {c['hangs']} hangs,"
            f" {c['slow']} slow, {c['passes']} passes, worst {WORST_S[family]:.3f} s"
        )
    return out
