"""What an nccl-tests exit code means, by the nccl-tests version its output prints (pure).

nccl-tests changed its exit codes twice (NVIDIA/nccl-tests, `src/common.h` `testResult_t` and the
end of `run()`/`main()` in `src/common.cu`, read at each tag):

- up to v2.17.2, wrong results (or an `NCCL_TESTS_CHECK_AVG_BW` miss) end `run()` with
  `exit(EXIT_FAILURE)`: 1; `main` returns any other failure as its `testResult_t`
  (`TESTCHECK(run())`): 1 `testInternalError` (an unknown `-d`/`-o`), 2 `testCudaError`,
  3 `testNcclError`, 4 `testTimeout` (`-T`, since v2.13.4), 5 `testNotImplemented` (v2.17.0+);
- v2.17.3 to v2.17.6, `run()` returns `testNumResults` for wrong results, which `main` returns:
  6 (the enum ends `testNotImplemented = 5, testNumResults = 6`); 1 is only `testInternalError`;
- from v2.17.7 (checked through v2.19.6, the newest tag read), `testInvalidUsage = 6` is added,
  so wrong results are `testNumResults` = 7 and 6 is a usage error.

nccl-tests prints `# nccl-tests version X (sha) nccl-headers=… nccl-library=…` from v2.17.4 on
(`src/util.cu`; `NCCL_TESTS_VERSION` first defined in v2.17.4's `common.h`), so an output with
no such line is from v2.17.3 or older — the pinned image's nccl-tests (2cbb968, between v2.13.6
and v2.13.7) is one — unless the line was lost.

"Reported" codes mean nccl-tests ran and its output holds the evidence: the judges decide from
the output (a wrong-results run is a D-NET-NCCL-03 `fail`). Any other code is a harness failure
(`error`, retried). Where the version is not known, a code is reported when it is a reporting
code in *some* build that could have printed this output, and only because that is safe: in each
of those builds the same code otherwise means a failure that stops nccl-tests before it prints a
table (`testInternalError` in v2.17.3 is an unknown `-d`/`-o` argument; `testInvalidUsage`
rejects the arguments before the first collective), and the judges pass nothing without a complete
table and its `Out of bounds values : 0 OK` footer, so the worst case is `inconclusive` (rerun),
never a pass or a fail of the nodes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

Version = tuple[int, int, int]

SUCCESS: Final = "success"
WRONG_RESULTS: Final = "wrong results or an NCCL_TESTS_CHECK_AVG_BW miss"
INTERNAL: Final = "testInternalError"
CUDA: Final = "testCudaError"
NCCL: Final = "testNcclError"
TIMEOUT: Final = "testTimeout (-T)"
NOT_IMPLEMENTED: Final = "testNotImplemented"
INVALID_USAGE: Final = "testInvalidUsage"


@dataclass(frozen=True, slots=True)
class ExitCodeConvention:
    """The exit codes of the nccl-tests versions `first` (inclusive; None: the oldest) to `until`
    (exclusive; None: the newest), what each means, and which ones report a finding."""

    first: Version | None
    until: Version | None
    meanings: Mapping[int, str]
    reported: frozenset[int]
    source: str

    def covers(self, version: Version) -> bool:
        return (self.first is None or version >= self.first) and (self.until is None or version < self.until)

    @property
    def label(self) -> str:
        lo = "" if self.first is None else ".".join(map(str, self.first))
        hi = "" if self.until is None else ".".join(map(str, self.until))
        return f"nccl-tests [{lo or 'oldest'}, {hi or 'newest'})"


# The table (see the module doc for how each row was read). 1 before v2.17.3 is both wrong results
# and testInternalError (an argument error, before any table): reported, the output decides.
EXIT_CODE_CONVENTIONS: Final[tuple[ExitCodeConvention, ...]] = (
    ExitCodeConvention(
        first=None,
        until=(2, 17, 3),
        meanings={
            0: SUCCESS,
            1: f"{WRONG_RESULTS} (exit(EXIT_FAILURE)), or {INTERNAL}",
            2: CUDA,
            3: NCCL,
            4: TIMEOUT,
            5: NOT_IMPLEMENTED,
        },
        reported=frozenset({0, 1, 3, 4}),
        source="NVIDIA/nccl-tests v2.17.2 src/common.cu run(): exit(EXIT_FAILURE) on errors[0]",
    ),
    ExitCodeConvention(
        first=(2, 17, 3),
        until=(2, 17, 7),
        meanings={
            0: SUCCESS,
            1: INTERNAL,
            2: CUDA,
            3: NCCL,
            4: TIMEOUT,
            5: NOT_IMPLEMENTED,
            6: WRONG_RESULTS,
        },
        reported=frozenset({0, 3, 4, 6}),
        source="NVIDIA/nccl-tests v2.17.3 src/common.cu run(): return testNumResults (common.h: 6)",
    ),
    ExitCodeConvention(
        first=(2, 17, 7),
        until=None,
        meanings={
            0: SUCCESS,
            1: INTERNAL,
            2: CUDA,
            3: NCCL,
            4: TIMEOUT,
            5: NOT_IMPLEMENTED,
            6: INVALID_USAGE,
            7: WRONG_RESULTS,
        },
        reported=frozenset({0, 3, 4, 7}),
        source="NVIDIA/nccl-tests v2.17.7..v2.19.6 src/common.h: testInvalidUsage = 6, testNumResults = 7",
    ),
)
# The first version that prints `# nccl-tests version` (src/util.cu).
VERSION_LINE_SINCE: Final[Version] = (2, 17, 4)
# Every code some version reports with: what a probe spec declares, before its output is read.
ANY_VERSION_REPORTED: Final[tuple[int, ...]] = tuple(
    sorted(set().union(*(c.reported for c in EXIT_CODE_CONVENTIONS)))
)

_VERSION_LINE = re.compile(r"nccl-tests version[ \t]+(\S{1,64})", re.ASCII)
_VERSION_NUMBER = re.compile(r"v?(\d{1,4})\.(\d{1,4})\.(\d{1,4})(?!\d)", re.ASCII)


@dataclass(frozen=True, slots=True)
class VersionSeen:
    """What the output says about its nccl-tests version: the line's text (None: no line) and the
    version read from it (None: no line, or a text that is not `X.Y.Z`)."""

    text: str | None
    version: Version | None


def nccl_tests_version(raw: str) -> VersionSeen:
    """The first `# nccl-tests version X` line of an output (launcher prefixes allowed)."""
    found = _VERSION_LINE.search(raw)
    if found is None:
        return VersionSeen(None, None)
    text = found.group(1)
    number = _VERSION_NUMBER.match(text)
    version = (int(number.group(1)), int(number.group(2)), int(number.group(3))) if number else None
    return VersionSeen(text, version)


def conventions_for(seen: VersionSeen) -> tuple[ExitCodeConvention, ...]:
    """The rows that may apply: the version's own, or every row of the builds that could have
    printed this output (no version line: before VERSION_LINE_SINCE; an unreadable one: from it on)."""
    if seen.version is not None:
        return tuple(c for c in EXIT_CODE_CONVENTIONS if c.covers(seen.version))
    if seen.text is None:
        return tuple(c for c in EXIT_CODE_CONVENTIONS if c.first is None or c.first < VERSION_LINE_SINCE)
    return tuple(c for c in EXIT_CODE_CONVENTIONS if c.until is None or c.until > VERSION_LINE_SINCE)


@dataclass(frozen=True, slots=True)
class ExitReading:
    code: int
    reported: bool
    meaning: str
    version: str | None  # as printed; None: no version line
    conventions: tuple[str, ...]  # the rows that applied

    def to_json(self) -> dict[str, object]:
        return {
            "code": self.code,
            "reported": self.reported,
            "meaning": self.meaning,
            "nccl_tests_version": self.version,
            "conventions": list(self.conventions),
        }


def read_exit_code(code: int, raw: str) -> ExitReading:
    """What `code` means for the nccl-tests build that printed `raw` (see module doc)."""
    seen = nccl_tests_version(raw)
    rows = conventions_for(seen)
    meanings = list(dict.fromkeys(c.meanings[code] for c in rows if code in c.meanings))
    return ExitReading(
        code=code,
        reported=any(code in c.reported for c in rows),
        meaning=" or ".join(meanings) if meanings else "not an nccl-tests code",
        version=seen.text,
        conventions=tuple(c.label for c in rows),
    )


def exit_code_problem(code: int, raw: str) -> str | None:
    """Why an nccl-tests exit code is a harness failure, or None when the output decides."""
    reading = read_exit_code(code, raw)
    if reading.reported:
        return None
    build = (
        f"nccl-tests {reading.version}" if reading.version else "an nccl-tests build that prints no version"
    )
    return f"nccl-tests exited {code} ({reading.meaning} for {build}), not a code it reports a result with"
