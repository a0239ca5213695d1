"""Which tests each `dcgmi diag -r <level>` run runs, and which may be absent or skipped, and why.

Data, with ids, so a judgement can say what a report left out. Source: NVIDIA/DCGM
`nvvs/src/NvidiaValidationSuite.cpp`, `NvidiaValidationSuite::FillTestVectors` (tags v3.0.4, v3.3.9,
v4.2.3, v4.6.0), which builds each level's test list per class; names as `dcgmi/Diag.cpp` prints
them (3.x: "GPU Memory", "PCIe", ...; 4.x: the plugin names `memory`, `pcie`, ...):

- r1 (quick): the software checks. 3.x prints them as separate Deployment rows (Denylist, NVML
  Library, ... Inforom); 4.x prints one `software` test with a result per GPU.
- r2 (medium): adds `memory` and `pcie`.
- r3 (long): adds `diagnostic`, `targeted_stress`, `targeted_power`, `memory_bandwidth`; and, only
  where they can run, `eud` (root and the EUD package), `cpu_eud`, `nvbandwidth` (4.x),
  `nccl_tests` (4.5+), `rist` (DCGM_RIST_BIN_PATH set). 3.0.x also ran `sm_stress`.
- r4 (xlong): adds `memtest` and `pulse_test`.

A test a level runs that is absent or skipped leaves that part of the node unexamined: the judge
treats it as missing evidence, unless a reason below says DCGM leaves it out (or skips it) on
healthy hardware. Reasons DCGM gives for skipping a required plugin are not evidence: a plugin
not allowed on the SKU (DCGM_FR_TEST_DISABLED), an aborted run, ECC disabled for `memory`. MIG is
not a skip reason either: with MIG enabled in a way the diagnostic cannot use, DCGM refuses the
whole run ("Cannot run diagnostic: MIG ...", NvidiaValidationSuite.cpp), which reaches fleetval as
a runtime error and so as no evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class SkipReason:
    """Why DCGM may leave a test out of a run, or skip it, on healthy hardware."""

    reason_id: str
    text: str
    source: str


@dataclass(frozen=True, slots=True)
class DiagTest:
    """One test a DCGM run level runs.

    `names` are the names 3.x and 4.x print, read the way the parser keys them (lower case, "_"
    as " "). `per_gpu`: the test reports one result per GPU, so every GPU of the node needs one.
    `stands_for`: 3.x prints the software plugin as separate Deployment checks; each stands for
    the 4.x `software` test and is required only when that test is absent. `may_skip`: the id of
    the reason this test may report Skip without the report losing evidence. `optional`: DCGM
    lists it only where it can run (the reason is `may_skip`), so a report may lack it.
    """

    test_id: str
    names: frozenset[str]
    level: int
    per_gpu: bool
    stands_for: str | None = None
    may_skip: str | None = None
    optional: bool = False


SKIP_REASONS: Final[tuple[SkipReason, ...]] = (
    SkipReason(
        "dcgm.skip.eud",
        "EUD runs only when the host engine runs as root and the EUD package is installed",
        "NVIDIA/DCGM NvidiaValidationSuite.cpp FillTestVectors (IsRunningAsRoot); DCGM docs, EUD plugin",
    ),
    SkipReason(
        "dcgm.skip.plugin-not-installed",
        "listed only when its plugin or external binary is installed on the host",
        "NVIDIA/DCGM FillTestVectors (FindTestName; DCGM_RIST_BIN_PATH); DCGM docs, Diagnostic Plugins",
    ),
    SkipReason(
        "dcgm.skip.not-in-every-version",
        "run by some DCGM versions only (3.0.x sm_stress) or only when named (context_create)",
        "NVIDIA/DCGM FillTestVectors v3.0.4 vs v3.3.9",
    ),
    SkipReason(
        "dcgm.skip.persistence-not-required",
        "the persistence-mode check skips unless the run requires persistence mode",
        "NVIDIA/DCGM nvvs/src/Software.cpp (require_persistence_mode: 'Skipping persistence check')",
    ),
    SkipReason(
        "dcgm.skip.inforom-unsupported",
        "the inforom check skips where the GPU cannot report inforom validity",
        "NVIDIA/DCGM nvvs/src/Software.cpp checkInforom (DCGM_ST_NOT_SUPPORTED: 'Skipping this check')",
    ),
    SkipReason(
        "dcgm.skip.cuda-toolkit-check",
        "3.x lists a CUDA Toolkit Library check that the level suites do not run",
        "NVIDIA/DCGM dcgmi/Diag.cpp v3.3.9 levelOneTests vs FillTestVectors",
    ),
)

SKIP_REASON_IDS: Final = frozenset(r.reason_id for r in SKIP_REASONS)

SOFTWARE: Final = "dcgm.test.software"


def _names(*names: str) -> frozenset[str]:
    return frozenset(n.lower().replace("_", " ") for n in names)


DIAG_TESTS: Final[tuple[DiagTest, ...]] = (
    DiagTest(SOFTWARE, _names("software"), 1, per_gpu=True),
    # 3.x Deployment checks (FillTestVectors' software class; 3.x display names beside nvvs names).
    DiagTest("dcgm.test.denylist", _names("Denylist"), 1, per_gpu=False, stands_for=SOFTWARE),
    DiagTest("dcgm.test.nvml-library", _names("NVML Library"), 1, per_gpu=False, stands_for=SOFTWARE),
    DiagTest(
        "dcgm.test.cuda-main-library", _names("CUDA Main Library"), 1, per_gpu=False, stands_for=SOFTWARE
    ),
    DiagTest(
        "dcgm.test.permissions",
        _names("Permissions and OS Blocks", "Permissions and OS-related Blocks"),
        1,
        per_gpu=False,
        stands_for=SOFTWARE,
    ),
    DiagTest(
        "dcgm.test.persistence-mode",
        _names("Persistence Mode"),
        1,
        per_gpu=False,
        stands_for=SOFTWARE,
        may_skip="dcgm.skip.persistence-not-required",
    ),
    DiagTest(
        "dcgm.test.environment-variables",
        _names("Environment Variables", "Environmental Variables"),
        1,
        per_gpu=False,
        stands_for=SOFTWARE,
    ),
    DiagTest(
        "dcgm.test.page-retirement",
        _names("Page Retirement/Row Remap"),
        1,
        per_gpu=False,
        stands_for=SOFTWARE,
    ),
    DiagTest(
        "dcgm.test.graphics-processes", _names("Graphics Processes"), 1, per_gpu=False, stands_for=SOFTWARE
    ),
    DiagTest(
        "dcgm.test.inforom",
        _names("Inforom"),
        1,
        per_gpu=False,
        stands_for=SOFTWARE,
        may_skip="dcgm.skip.inforom-unsupported",
    ),
    DiagTest(
        "dcgm.test.cuda-toolkit-library",
        _names("CUDA Toolkit Library"),
        1,
        per_gpu=False,
        may_skip="dcgm.skip.cuda-toolkit-check",
        optional=True,
    ),
    DiagTest(
        "dcgm.test.fabric-manager",
        _names("Fabric Manager"),
        1,
        per_gpu=False,
        may_skip="dcgm.skip.not-in-every-version",
        optional=True,
    ),
    DiagTest("dcgm.test.memory", _names("memory", "GPU Memory"), 2, per_gpu=True),
    DiagTest("dcgm.test.pcie", _names("pcie", "PCIe"), 2, per_gpu=True),
    DiagTest("dcgm.test.diagnostic", _names("diagnostic"), 3, per_gpu=True),
    DiagTest("dcgm.test.targeted-stress", _names("targeted_stress", "Targeted Stress"), 3, per_gpu=True),
    DiagTest("dcgm.test.targeted-power", _names("targeted_power", "Targeted Power"), 3, per_gpu=True),
    DiagTest("dcgm.test.memory-bandwidth", _names("memory_bandwidth", "Memory Bandwidth"), 3, per_gpu=True),
    DiagTest(
        "dcgm.test.eud", _names("eud", "EUD Test"), 3, per_gpu=True, may_skip="dcgm.skip.eud", optional=True
    ),
    DiagTest(
        "dcgm.test.cpu-eud",
        _names("cpu_eud", "CPU EUD Test"),
        3,
        per_gpu=False,
        may_skip="dcgm.skip.eud",
        optional=True,
    ),
    DiagTest(
        "dcgm.test.nvbandwidth",
        _names("nvbandwidth"),
        3,
        per_gpu=True,
        may_skip="dcgm.skip.plugin-not-installed",
        optional=True,
    ),
    DiagTest(
        "dcgm.test.nccl-tests",
        _names("nccl_tests"),
        3,
        per_gpu=True,
        may_skip="dcgm.skip.plugin-not-installed",
        optional=True,
    ),
    DiagTest(
        "dcgm.test.rist",
        _names("rist"),
        3,
        per_gpu=True,
        may_skip="dcgm.skip.plugin-not-installed",
        optional=True,
    ),
    DiagTest(
        "dcgm.test.sm-stress",
        _names("sm_stress", "SM Stress"),
        3,
        per_gpu=True,
        may_skip="dcgm.skip.not-in-every-version",
        optional=True,
    ),
    DiagTest(
        "dcgm.test.context-create",
        _names("context_create", "Context Create"),
        1,
        per_gpu=True,
        may_skip="dcgm.skip.not-in-every-version",
        optional=True,
    ),
    DiagTest("dcgm.test.memtest", _names("memtest"), 4, per_gpu=True),
    DiagTest("dcgm.test.pulse-test", _names("pulse_test", "Pulse Test"), 4, per_gpu=True),
)

_BY_NAME: Final[dict[str, DiagTest]] = {name: t for t in DIAG_TESTS for name in t.names}


def diag_test(name: str) -> DiagTest | None:
    """The known test a report's test name is, or None for a name this table does not know."""
    return _BY_NAME.get(name.strip().lower().replace("_", " "))


def required_tests(level: int) -> tuple[DiagTest, ...]:
    """The tests a run at `level` must report (each level runs every lower level's tests too)."""
    return tuple(t for t in DIAG_TESTS if t.level <= level and not t.optional)


def stated_level(names: set[str]) -> int:
    """The run level a set of test names shows: the highest level any known test first runs at.

    Tests that may be absent count too: an EUD result can only come from an r3 or r4 run.
    The context-create test is run only by name, so it shows nothing."""
    levels = [
        t.level for t in map(diag_test, names) if t is not None and t.test_id != "dcgm.test.context-create"
    ]
    return max(levels, default=1)
