"""What `dcgmi diag`'s exit status means, per DCGM version fleetval supports.

dcgmi's `main` returns a `dcgmReturn_t` (negative), so the process exits with it as an unsigned
byte (`dcgmi/main_dcgmi.cpp`). Read from NVIDIA/DCGM at the tags below (`dcgmi/Diag.cpp`
`GetFailureResult` and `RunDiagOnce`, `dcgmlib/dcgm_structs.h`, `dcgmlib/src/dcgm_errors.c`);
the values are the same in all three:

- 0: every test ran and passed (or warned);
- 205 (DCGM_ST_NVVS_ISOLATE_ERROR, -51): a test failed with an ISOLATE-priority error;
- 226 (DCGM_ST_NVVS_ERROR, -30): a test failed otherwise, or the run reported system errors;
- 222 (DCGM_ST_IN_USE, -34), 218 (DCGM_ST_PROFILING_MULTI_PASS, -38), 217
  (DCGM_ST_DIAG_ALREADY_RUNNING, -39): DCGM refused the run because someone else holds the GPUs'
  profiling or diagnostic resources (dcgm-exporter's profiling metrics, another diagnostic).
  `RunDiagOnce` prints the reason (`Return: (-34) : <errorString>`; with `-j` as the
  `runtime_error` of a `DCGM Diagnostic` object) and returns the code. This says nothing about
  the node: the output is judged (`inconclusive`, re-run), not retried as a harness failure;
- anything else (235 no host engine, 127 command not found, 137 killed, ...) is the harness.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class DcgmExitCodes:
    version: str
    commit: str  # NVIDIA/DCGM commit of the tag the codes were read at
    passed: int
    isolate_error: int
    test_error: int
    busy: tuple[int, ...]  # the run was refused: resources held by another client

    @property
    def reported(self) -> tuple[int, ...]:
        """The codes whose output is evidence to judge (not a harness failure)."""
        return (self.passed, self.isolate_error, self.test_error, *self.busy)


def _as_byte(status: int) -> int:
    return status & 0xFF


_BUSY: Final = tuple(
    _as_byte(s) for s in (-34, -38, -39)
)  # IN_USE, PROFILING_MULTI_PASS, DIAG_ALREADY_RUNNING

EXIT_CODES: Final[dict[str, DcgmExitCodes]] = {
    "3.3.9": DcgmExitCodes(
        "3.3.9", "b0ec3c624ea21e688b0d93cf9b214ae0eeb6fe52", 0, _as_byte(-51), _as_byte(-30), _BUSY
    ),
    "4.2.3": DcgmExitCodes(
        "4.2.3", "6e947dcac9b3160d61d98fea4741d51d4bec5c1f", 0, _as_byte(-51), _as_byte(-30), _BUSY
    ),
    "4.6.0": DcgmExitCodes(
        "4.6.0", "51b65ccebf9d61e6593713a7d6b68e594d9d7975", 0, _as_byte(-51), _as_byte(-30), _BUSY
    ),
}

# What a probe accepts as reported, whichever supported version the image runs.
REPORTED_EXIT_CODES: Final = tuple(sorted({code for table in EXIT_CODES.values() for code in table.reported}))
