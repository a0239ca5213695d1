"""parse_dcgm against every real `dcgmi diag` sample in tests/fixtures/dcgm (see SOURCES.md there)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fleetval.dcgm.parser import DcgmReport, DcgmTest, parse_dcgm
from fleetval.dcgm.simulated import DcgmFault, render_dcgm
from fleetval.errors import ParseError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "dcgm"
FOOTER = "+---------------------------+------------------------------------------------+"
DEPLOYMENT_3X = [
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
]


def read(name: str) -> str:
    return (FIXTURES / name).read_bytes().decode("utf-8")


def by_name(report: DcgmReport, name: str) -> DcgmTest:
    return next(t for t in report.tests if t.name == name)


# ---------------------------------------------------------------------------------------------
# one expectation per fixture file


def check_423_pcie_internal_error(text: str) -> None:
    report = parse_dcgm(text)
    assert (report.format, report.dcgm_version, report.driver_version) == ("text", "4.2.3", "570.148.08")
    assert report.complete is False  # the paste lost the closing border
    assert report.level is None
    assert report.overall == "fail"
    assert [(t.name, t.category, t.result) for t in report.tests] == [
        ("software", "Deployment", "pass"),
        ("memory", "Hardware", "pass"),
        ("pcie", "Integration", "fail"),
    ]
    pcie = by_name(report, "pcie")
    assert pcie.gpus == {"0": "pass", "1": "pass", "2": "pass", "3": "pass"}
    assert pcie.internal_error is True
    assert pcie.failure_class == "software"
    assert len(pcie.warnings) == 4
    assert all(w.gpu is None and w.error_id is None for w in pcie.warnings)
    assert pcie.warnings[0].message == (
        "There was an internal error during the test: 'A child process (152) exited with non-zero "
        "status 1' Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
    )
    assert pcie.warnings[3].message.startswith(
        "There was an internal error during the test: 'Output of child process (153)"
    )
    for name in ("software", "memory"):
        passing = by_name(report, name)
        assert passing.gpus == {"0": "pass", "1": "pass", "2": "pass", "3": "pass"}
        assert passing.internal_error is False
        assert passing.warnings == ()


def check_mlengineering_memory_fail_thermal(text: str) -> None:
    report = parse_dcgm(text)
    assert (report.format, report.complete, report.overall, report.level) == ("text", False, "fail", None)
    assert report.dcgm_version is None
    (memory,) = report.tests
    assert (memory.name, memory.category, memory.result) == ("GPU Memory", "Hardware", "fail")
    assert memory.gpus == {"0": "fail", **{str(g): "pass" for g in range(1, 8)}}
    # A thermal note beside a memory failure does not make the failure thermal.
    assert memory.failure_class == "memory"
    assert memory.internal_error is False
    (warning,) = memory.warnings
    assert warning.gpu == "0"
    assert warning.message == (
        "GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test for GPU 0 "
        "Verify that the cooling on this machine is functional, including external, thermal material "
        "interface, fans, and any other components."
    )


def check_mlengineering_error_row(text: str) -> None:
    report = parse_dcgm(text)
    assert (report.format, report.complete, report.overall) == ("text", False, "fail")
    (error,) = report.tests
    assert (error.name, error.category, error.result) == ("Error", "Deployment", "fail")
    assert error.gpus == {"3": "fail"}
    assert error.failure_class == "memory"
    (warning,) = error.warnings
    assert (warning.gpu, warning.message) == (
        "3",
        "GPU 3 has uncorrectable memory errors and row remappings are pending",
    )


def check_virtualclient_r2(text: str) -> None:
    report = parse_dcgm(text)
    assert (report.format, report.dcgm_version, report.driver_version) == ("json3", None, None)
    assert (report.level, report.overall, report.complete) == (2, "pass", True)
    assert [t.name for t in report.tests] == [*DEPLOYMENT_3X, "PCIe", "GPU Memory"]
    assert all(t.category == "Deployment" and t.gpus == {} for t in report.tests[:9])
    pcie, memory = report.tests[9:]
    assert (pcie.category, pcie.gpus, pcie.failure_class) == ("Integration", {"0": "pass"}, "pcie")
    assert (memory.category, memory.gpus, memory.failure_class) == ("Hardware", {"0": "pass"}, "memory")
    assert report.gpu_uuids == {}


def check_nvvs_310_nulls(text: str) -> None:
    report = parse_dcgm(text)
    assert (report.format, report.dcgm_version, report.level, report.overall) == ("json3", "3.1.0", 1, "pass")
    # Nine Deployment checks and the Custom "software" plugin; the literal nulls are skipped.
    assert len(report.tests) == 10
    assert report.tests[3].name == "Permissions and OS-related Blocks"
    every_gpu = {str(g): "pass" for g in range(8)}
    assert all(t.gpus == every_gpu for t in report.tests)  # "0,1,...,7" strings and int ids alike
    assert (report.tests[-1].name, report.tests[-1].category) == ("software", "Custom")


def check_t400_skip_fragment(text: str) -> None:
    with pytest.raises(ParseError, match="invalid or truncated JSON") as caught:
        parse_dcgm(text)
    assert caught.value.tool == "dcgm"


def check_r4_json_fragment(text: str) -> None:
    # One test object cut out of a document and ending in "}," is not recoverable: every visible
    # result passes, and a piece of a run cannot say the run passed.
    with pytest.raises(ParseError, match="fragment"):
        parse_dcgm(text)


def check_schema_is_not_output(text: str) -> None:
    with pytest.raises(ParseError, match="unknown JSON shape"):
        parse_dcgm(text)


def check_image_check_is_not_a_report(text: str) -> None:
    # dcgmi's version banner and a file listing (tests/fleetval/sim/test_dcgm_images.py uses it).
    with pytest.raises(ParseError, match="no DCGM result table or JSON document"):
        parse_dcgm(text)


def check_304_deployment_fragment(text: str) -> None:
    with pytest.raises(ParseError, match="closing border"):
        parse_dcgm(text)
    # The same bytes with the table closed where the paste was cut: 3.0 prints no Metadata.
    report = parse_dcgm(_closed(text))
    assert (report.dcgm_version, report.driver_version, report.level) == (None, None, 3)
    assert [t.name for t in report.tests] == DEPLOYMENT_3X
    assert {t.result for t in report.tests} == {"pass"}


def check_331_metadata_fragment(text: str) -> None:
    with pytest.raises(ParseError, match="closing border"):
        parse_dcgm(text)
    report = parse_dcgm(_closed(text))
    assert (report.dcgm_version, report.driver_version, report.level) == ("3.3.1", "535.129.03", 2)
    assert [t.name for t in report.tests] == DEPLOYMENT_3X[:7]
    assert all(t.category == "Deployment" for t in report.tests)


def _closed(text: str) -> str:
    """The fragment with the curator's "[... truncated ...]" line replaced by dcgmi's footer."""
    lines = text.splitlines()
    assert lines[-1].startswith("[... truncated")
    return "\n".join([*lines[:-1], FOOTER]) + "\n"


CASES: dict[str, tuple[str, Callable[[str], None]]] = {
    "dcgm4.2.3-r2-text-pcie-fail-internal-error-issue253.txt": (
        "4.2.3-text-pcie-internal-error",
        check_423_pcie_internal_error,
    ),
    "dcgm-r2-text-fragment-gpu-memory-fail-thermal-mlengineering.txt": (
        "3.x-text-gpu-memory-fail-thermal",
        check_mlengineering_memory_fail_thermal,
    ),
    "dcgm-r3-text-fragment-deployment-error-row-remap-pending-mlengineering.txt": (
        "3.x-text-deployment-error-row",
        check_mlengineering_error_row,
    ),
    "dcgm3-r2-pass-json-virtualclient.json": ("3.x-json-r2-pass", check_virtualclient_r2),
    "dcgm3.1.0-nvvs-json-8gpu-pass-deployment-nulls-dcgm-unittest.txt": (
        "3.1.0-json-nulls-preamble",
        check_nvvs_310_nulls,
    ),
    "dcgm3-r3-json-t400-all-skip-issue139-fragment.txt": ("3.x-json-skip-fragment", check_t400_skip_fragment),
    "dcgm4-r4-json-fragment-issue215.json": ("4.x-json-fragment", check_r4_json_fragment),
    "dcgm4-diag-json-schema.reference.json": ("4.x-schema-not-output", check_schema_is_not_output),
    "dcgm4.6.0-image-check-version-binaries-poc.txt": (
        "4.6.0-image-not-a-report",
        check_image_check_is_not_a_report,
    ),
    "dcgm3.0.4-r3-text-header-deployment-pass-issue55-fragment.txt": (
        "3.0.4-text-fragment",
        check_304_deployment_fragment,
    ),
    "dcgm3.3.1-r2-text-header-metadata-deployment-go-dcgm-issue52-fragment.txt": (
        "3.3.1-text-metadata-fragment",
        check_331_metadata_fragment,
    ),
}
FIXTURE_PARAMS = [pytest.param(name, id=label) for name, (label, _) in CASES.items()]
COMPLETE = {
    "dcgm3-r2-pass-json-virtualclient.json",
    "dcgm3.1.0-nvvs-json-8gpu-pass-deployment-nulls-dcgm-unittest.txt",
}


def test_every_fixture_has_an_expectation() -> None:
    on_disk = {p.name for p in FIXTURES.iterdir() if p.name != "SOURCES.md"}
    assert on_disk == set(CASES)


@pytest.mark.parametrize("name", FIXTURE_PARAMS)
def test_fixture(name: str) -> None:
    CASES[name][1](read(name))


@pytest.mark.parametrize("name", FIXTURE_PARAMS)
def test_fixture_cut_anywhere_never_passes(name: str) -> None:
    text = read(name)
    whole_may_pass = name in COMPLETE
    cuts = sorted({*range(0, len(text), 7), *(i for i, c in enumerate(text) if c == "\n")})
    for cut in [c for c in cuts if c < len(text.rstrip())] + ([] if whole_may_pass else [len(text)]):
        try:
            report = parse_dcgm(text[:cut])
        except ParseError:
            continue
        assert report.overall != "pass", f"{name} cut at {cut} parsed as a pass"


# ---------------------------------------------------------------------------------------------
# garbage and shapes that must not parse


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("", "empty", id="empty"),
        pytest.param(" \n\t\n", "empty", id="whitespace"),
        pytest.param(
            "Error: Unable to complete diagnostic for group 2. Return: (-37) : "
            "Host engine connection invalid/disconnected\n",
            "no DCGM result table",
            id="dcgmi-error-line",
        ),
        pytest.param("{not json", "invalid or truncated JSON", id="broken-json"),
        pytest.param("[1, 2]", "no DCGM result table", id="top-level-array"),
        pytest.param('{"hello": "world"}', "unknown JSON shape", id="unknown-object"),
        pytest.param(
            '{"DCGM Diagnostic": {"runtime_error": "Error: Unable to complete diagnostic.", '
            '"version": "4.2.3"}}',
            "runtime error",
            id="runtime-error",
        ),
        pytest.param(
            f"{FOOTER}\n| Diagnostic                | Result                                         |\n"
            f"+===========================+================================================+\n{FOOTER}\n",
            "no test results",
            id="table-without-rows",
        ),
    ],
)
def test_garbage_raises(text: str, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse_dcgm(text)


def test_unknown_status_word_is_never_read_as_pass() -> None:
    text = read("dcgm3-r2-pass-json-virtualclient.json").replace(
        '"status" : "Pass"', '"status" : "Inconclusive"', 1
    )
    with pytest.raises(ParseError, match="unknown status 'Inconclusive'"):
        parse_dcgm(text)


def test_missing_status_in_json_is_damage() -> None:
    text = read("dcgm3-r2-pass-json-virtualclient.json").replace('"status" : "Pass"', '"state" : "Pass"', 1)
    with pytest.raises(ParseError, match="missing status"):
        parse_dcgm(text)


def test_trailing_log_line_after_json_is_tolerated() -> None:
    # kubectl exec appends its own line when dcgmi exits non-zero.
    text = read("dcgm3-r2-pass-json-virtualclient.json") + "command terminated with exit code 226\n"
    assert parse_dcgm(text).overall == "pass"


def test_crlf_text_parses_like_lf() -> None:
    text = read("dcgm4.2.3-r2-text-pcie-fail-internal-error-issue253.txt")
    assert parse_dcgm(text.replace("\n", "\r\n")) == parse_dcgm(text)


def test_to_json_follows_the_cli_contract() -> None:
    data = parse_dcgm(read("dcgm4.2.3-r2-text-pcie-fail-internal-error-issue253.txt")).to_json()
    assert {"dcgm_version", "driver_version", "level", "overall", "tests"} <= set(data)
    assert set(data) - {"dcgm_version", "driver_version", "level", "overall", "tests"} == {
        "format",
        "gpu_uuids",
        "complete",
    }
    pcie = data["tests"][2]
    assert {"name", "category", "result", "gpus", "warnings"} <= set(pcie)
    assert (pcie["result"], pcie["gpus"]["0"], pcie["internal_error"], pcie["failure_class"]) == (
        "fail",
        "pass",
        True,
        "software",
    )
    assert pcie["warnings"][0]["gpu"] is None
    assert pcie["warnings"][0]["message"].startswith("There was an internal error")


# ---------------------------------------------------------------------------------------------
# no silent pass: bounded work, typed errors only, no row dropped (found by an attacker)


def sim(
    *, major: int = 4, fmt: str = "text", level: int = 2, gpus: int = 8, faults: tuple[DcgmFault, ...] = ()
) -> str:
    return render_dcgm(
        level=level,
        gpu_count=gpus,
        gpu_uuids=[f"GPU-{g}" for g in range(gpus)],
        driver_version="570.148.08",
        faults=faults,
        dcgm_major=major,
        fmt=fmt,
    )


def test_an_overlong_command_line_above_the_table_is_read_only_in_part() -> None:
    # 100 KB of "dcgmi diag " once took ~10 s in a non-anchored pattern; now the line is read from its
    # first 256 characters, as words, so a level after that is never seen (and never searched for).
    table = sim(level=2)
    report = parse_dcgm("$ " + "dcgmi diag " * 9_000 + "-r 3\n" + table)
    assert report.level == 2  # shown by its tests; the "-r 3" at character 99,000 is not read
    assert parse_dcgm("$ dcgmi diag -j -r 3\n" + table).level == 3
    assert parse_dcgm("$ dcgmi diag --run=long\n" + table).level == 3


def test_an_overlong_table_line_is_refused() -> None:
    text = sim().replace("| software ", "| " + "dcgmi diag " * 9_000, 1)
    with pytest.raises(ParseError, match="characters long; dcgmi's table rows are 78"):
        parse_dcgm(text)


JSON4_GPU0 = '"entity_group" : "GPU",\n\t\t\t\t\t\t\t"entity_group_id" : 1,\n\t\t\t\t\t\t\t"entity_id" : 0,'


@pytest.mark.parametrize(
    ("old", "new", "fmt", "major"),
    [
        pytest.param("GPU0: Pass", "GPU\u0663: Pass", "text", 4, id="arabic-indic-digit-gpu-line"),
        pytest.param("GPU0: Pass", "GPU\u00b2: Pass", "text", 4, id="superscript-digit-gpu-line"),
        pytest.param('"gpu_ids" : "0"', '"gpu_ids" : "\u00b2"', "json", 3, id="superscript-digit-gpu-ids"),
        pytest.param(
            '"gpu_ids" : "0"', '"gpu_ids" : "' + "9" * 5000 + '"', "json", 3, id="5000-digit-gpu-ids"
        ),
        pytest.param('"entity_id" : 0', '"entity_id" : ' + "9" * 5000, "json", 4, id="5000-digit-entity-id"),
        pytest.param('"entity_id" : 0', '"entity_id" : -3', "json", 4, id="negative-entity-id"),
        pytest.param('"entity_id" : 0', '"entity_id" : 5.0', "json", 4, id="float-entity-id"),
        pytest.param('"gpu_ids" : "0"', '"gpu_ids" : ""', "json", 3, id="empty-gpu-ids"),
    ],
)
def test_numbers_that_are_not_gpu_indices_raise_parse_error(old: str, new: str, fmt: str, major: int) -> None:
    text = sim(major=major, fmt=fmt)
    assert old in text
    with pytest.raises(ParseError):
        parse_dcgm(text.replace(old, new, 1))


def test_a_unicode_digit_error_id_is_not_an_error_id() -> None:
    text = sim(major=4, fmt="json", faults=(DcgmFault(1, "memory"),)).replace(
        '"error_id" : 52', '"error_id" : "\u00b2"'
    )
    (warning,) = next(t for t in parse_dcgm(text).tests if t.name == "memory").warnings
    assert warning.error_id is None


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"DCGM Diagnostic": ' + "[" * 100_000, id="100k-open-brackets"),
        pytest.param('{"DCGM Diagnostic": ' + "[" * 200 + "]" * 200 + "}", id="200-deep"),
        pytest.param(
            '{"DCGM Diagnostic": {"test_categories": ' + '{"a":' * 5000 + "1" + "}" * 5001, id="5000-deep"
        ),
    ],
)
def test_deeply_nested_json_raises_parse_error(text: str) -> None:
    with pytest.raises(ParseError, match="nested"):
        parse_dcgm(text)


def test_json_strings_lose_nul_and_lone_surrogates() -> None:
    text = sim(major=3, fmt="json").replace('"name" : "Denylist"', '"name" : "Deny\\u0000list\\ud800"')
    names = [t.name for t in parse_dcgm(text).tests]
    assert "Deny\ufffdlist?" in names


@pytest.mark.parametrize(
    ("old", "new", "major"),
    [
        pytest.param("| Fail - GPU: 5 ", "| Fahl - GPU: 5 ", 3, id="3x-garbled-fail-group"),
        pytest.param("| GPU5: Fail ", "| GPU5: Fial ", 4, id="4x-garbled-gpu-line"),
        pytest.param("| GPU6: Pass ", "| GPU6: Pahs ", 4, id="4x-garbled-gpu-line-after-a-warning"),
        pytest.param("| GPU5: Fail ", "| GPU05: Fail", 4, id="4x-leading-zero"),
        pytest.param(
            "| Pass - GPUs: 0, 1, 2, 3, 4, 6, 7",
            "| Pass - GPUs: 0, 1, 2, x, 4, 6, 7",
            3,
            id="3x-bad-gpu-list",
        ),
    ],
)
def test_a_garbled_row_in_a_result_table_makes_it_unreadable(old: str, new: str, major: int) -> None:
    text = sim(major=major, faults=(DcgmFault(5, "memory"),))
    assert old in text
    with pytest.raises(ParseError, match=r"row|unknown status"):
        parse_dcgm(text.replace(old, new, 1))


def test_rows_the_table_cannot_place_make_it_unreadable() -> None:
    text = sim(major=4)
    lines = text.splitlines()
    software = next(i for i, line in enumerate(lines) if line.startswith("| software "))
    orphaned = "\n".join(lines[:software] + lines[software + 1 :]) + "\n"
    with pytest.raises(ParseError, match="outside any test"):  # its GPU lines have no test
        parse_dcgm(orphaned)
    no_section = "\n".join(line for line in lines if "Deployment" not in line) + "\n"
    with pytest.raises(ParseError, match="inside the Metadata section"):  # software read as metadata
        parse_dcgm(no_section)
    memory = next(i for i, line in enumerate(lines) if line.startswith("| memory "))
    without_test = "\n".join(lines[:memory] + lines[memory + 1 :]) + "\n"
    with pytest.raises(ParseError, match="outside any test"):
        parse_dcgm(without_test)
    interrupted = "\n".join([*lines[:memory], "", *lines[memory:]]) + "\n"
    with pytest.raises(ParseError, match="interrupted"):
        parse_dcgm(interrupted)
    gpu0 = "|                           | GPU0: Pass                                     |"
    joined = text.replace(gpu0, gpu0 + " " + gpu0.replace("GPU0", "GPU1"), 1)  # two rows on one line
    with pytest.raises(ParseError, match="past its right border"):
        parse_dcgm(joined)
    three_cells = text.replace(gpu0, "| | GPU0: Pass | Fail |", 1)
    with pytest.raises(ParseError, match="two-cell row"):
        parse_dcgm(three_cells)


def test_pass_all_stands_for_every_gpu_the_run_listed() -> None:
    text = sim(major=3, level=2, gpus=8)
    memory = by_name(parse_dcgm(text), "GPU Memory")
    assert memory.gpus == {str(g): "pass" for g in range(8)}
    no_device_ids = "\n".join(line for line in text.splitlines() if "GPU Device IDs" not in line) + "\n"
    report = parse_dcgm(no_device_ids)
    assert report.gpu_count is None
    assert by_name(report, "GPU Memory").gpus == {}  # "All" of an unknown set names no GPU
    assert by_name(report, "GPU Memory").result == "pass"
