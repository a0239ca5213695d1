"""render_dcgm emits what dcgmi prints, and parse_dcgm reads it back to the injected faults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from fleetval.dcgm.parser import DcgmReport, parse_dcgm
from fleetval.dcgm.simulated import DCGM_VERSIONS, FAULT_KINDS, DcgmFault, jsoncpp_styled, render_dcgm
from fleetval.errors import ParseError, SpecError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "dcgm"
UUIDS = [f"GPU-5f1c{g:04x}-8c2e-4a7b-9d3e-0b6a1c2d3e4f" for g in range(8)]
DRIVER = "570.148.08"
MAJORS = [pytest.param(3, id="dcgm3"), pytest.param(4, id="dcgm4")]
FORMATS = [pytest.param("json", id="json"), pytest.param("text", id="text")]

# kind -> (plugin name in 3.x, in 4.x, per-GPU result, failure_class, DCGM error id/category/severity)
EXPECTED = {
    "memory": ("GPU Memory", "memory", "fail", "memory", (52, "10", "2")),
    "pcie": ("PCIe", "pcie", "fail", "pcie", (30, "13", "4")),
    "nvlink": ("PCIe", "pcie", "fail", "nvlink", (71, "11", "2")),
    "thermal_warn": ("GPU Memory", "memory", "warn", "thermal", (41, "9", "1")),
}

TESTS_4X = {
    1: {"software"},
    2: {"software", "memory", "pcie"},
    3: {"software", "memory", "pcie", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth"},
}
TESTS_4X[4] = TESTS_4X[3] | {"memtest", "pulse_test"}
DEPLOYMENT_3X = {
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
}
TESTS_3X = {
    1: DEPLOYMENT_3X,
    2: DEPLOYMENT_3X | {"GPU Memory", "PCIe"},
    3: DEPLOYMENT_3X
    | {"GPU Memory", "PCIe", "Diagnostic", "Targeted Stress", "Targeted Power", "Memory Bandwidth"},
}
TESTS_3X[4] = TESTS_3X[3] | {"Memtest", "Pulse Test"}


def render(
    *, level: int = 2, gpus: int = 8, faults: tuple[DcgmFault, ...] = (), major: int = 4, fmt: str = "json"
) -> str:
    return render_dcgm(
        level=level,
        gpu_count=gpus,
        gpu_uuids=UUIDS[:gpus],
        driver_version=DRIVER,
        faults=faults,
        dcgm_major=major,
        fmt=fmt,
    )


def fixture(name: str) -> str:
    return (FIXTURES / name).read_bytes().decode("utf-8")


def not_passing(report: DcgmReport) -> dict[str, dict[str, str]]:
    return {
        t.name: {g: r for g, r in t.gpus.items() if r != "pass"} for t in report.tests if t.result != "pass"
    }


# ---------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("major", MAJORS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", FAULT_KINDS)
@pytest.mark.parametrize("level", [2, 3, 4], ids=lambda lv: f"r{lv}")
def test_fault_round_trips_to_its_gpu_and_class(major: int, fmt: str, kind: str, level: int) -> None:
    name3, name4, result, failure_class, (error_id, category, severity) = EXPECTED[kind]
    report = parse_dcgm(render(level=level, faults=(DcgmFault(5, kind),), major=major, fmt=fmt))

    assert report.overall == result
    assert (report.level, report.complete, report.driver_version) == (level, True, DRIVER)
    assert report.dcgm_version == DCGM_VERSIONS[major]
    name = name4 if major == 4 else name3
    assert not_passing(report) == {name: {"5": result}}
    (faulted,) = (t for t in report.tests if t.result != "pass")
    assert (faulted.result, faulted.failure_class, faulted.internal_error) == (result, failure_class, False)
    assert faulted.gpus == {str(g): "pass" for g in range(8)} | {"5": result}
    (warning,) = faulted.warnings
    assert warning.gpu == "5"
    if fmt == "json":
        assert (warning.error_id, warning.error_category, warning.error_severity) == (
            error_id,
            category,
            severity,
        )
    else:
        assert warning.error_id is None  # the table prints only the message


@pytest.mark.parametrize("major", MAJORS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("level", [1, 2, 3, 4], ids=lambda lv: f"r{lv}")
@pytest.mark.parametrize("gpus", [1, 8], ids=lambda n: f"{n}gpu")
def test_healthy_node_passes_with_the_levels_test_set(major: int, fmt: str, level: int, gpus: int) -> None:
    report = parse_dcgm(render(level=level, gpus=gpus, major=major, fmt=fmt))
    assert (report.overall, report.level) == ("pass", level)
    assert {t.name for t in report.tests} == (TESTS_4X if major == 4 else TESTS_3X)[level]
    assert not any(t.warnings or t.internal_error for t in report.tests)
    every_gpu = {str(g) for g in range(gpus)}
    for test in report.tests:
        if major == 4:
            assert set(test.gpus) == every_gpu
        elif test.category != "Deployment" and fmt == "json":
            assert set(test.gpus) == every_gpu  # 3.x text says "Pass - All" instead


@pytest.mark.parametrize("major", MAJORS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_level_one_runs_software_checks_only_so_hardware_faults_stay_hidden(major: int, fmt: str) -> None:
    faults = tuple(DcgmFault(g, kind) for g, kind in enumerate(FAULT_KINDS))
    assert parse_dcgm(render(level=1, faults=faults, major=major, fmt=fmt)).overall == "pass"


@pytest.mark.parametrize(
    ("major", "fmt"),
    [
        pytest.param(4, "json", id="dcgm4-json"),
        pytest.param(3, "json", id="dcgm3-json"),
        pytest.param(3, "text", id="dcgm3-text"),
    ],
)
def test_mixed_faults_keep_each_gpu_apart(major: int, fmt: str) -> None:
    faults = (DcgmFault(1, "memory"), DcgmFault(3, "thermal_warn"), DcgmFault(6, "nvlink"))
    report = parse_dcgm(render(level=3, faults=faults, major=major, fmt=fmt))
    memory, pcie = ("memory", "pcie") if major == 4 else ("GPU Memory", "PCIe")
    assert not_passing(report) == {memory: {"1": "fail", "3": "warn"}, pcie: {"6": "fail"}}
    classes = {t.name: t.failure_class for t in report.tests if t.result != "pass"}
    assert classes == {memory: "memory", pcie: "nvlink"}


def test_dcgm4_text_cannot_tell_a_warn_gpu_beside_a_failing_one() -> None:
    # DCGM 4 prints a warn entity as "Fail"; only the test line says "Warn", and here it says Fail.
    faults = (DcgmFault(1, "memory"), DcgmFault(3, "thermal_warn"))
    report = parse_dcgm(render(level=2, faults=faults, major=4, fmt="text"))
    assert not_passing(report) == {"memory": {"1": "fail", "3": "fail"}}


# ---------------------------------------------------------------------------------------------
# faithful to the real format


def _keys_within_schema(instance: Any, schema: dict[str, Any], path: str = "$") -> None:
    """Every object key in `instance` is a property the schema declares at that place."""
    if isinstance(instance, dict) and "properties" in schema:
        extra = set(instance) - set(schema["properties"])
        assert not extra, f"{path} has keys the DCGM schema does not know: {extra}"
        for key, child in instance.items():
            _keys_within_schema(child, schema["properties"][key], f"{path}.{key}")
    elif isinstance(instance, list) and "items" in schema:
        for i, child in enumerate(instance):
            _keys_within_schema(child, schema["items"], f"{path}[{i}]")


@pytest.mark.parametrize("level", [1, 2, 3, 4], ids=lambda lv: f"r{lv}")
@pytest.mark.parametrize("faulty", [False, True], ids=["healthy", "all-faults"])
def test_dcgm4_json_is_valid_against_dcgms_own_schema(level: int, faulty: bool) -> None:
    schema = json.loads(fixture("dcgm4-diag-json-schema.reference.json"))
    faults = tuple(DcgmFault(g, kind) for g, kind in enumerate(FAULT_KINDS)) if faulty else ()
    doc = json.loads(render(level=level, faults=faults, major=4))
    jsonschema.Draft7Validator(schema).validate(doc)
    _keys_within_schema(doc, schema)
    assert set(doc) == {"DCGM Diagnostic", "entity_groups", "metadata"}


def test_dcgm4_json_tests_have_the_real_fragments_keys() -> None:
    real = json.loads(fixture("dcgm4-r4-json-fragment-issue215.json").rstrip().rstrip(","))
    sim = json.loads(render(level=4, faults=(DcgmFault(0, "memory"),), major=4))
    tests = [t for c in sim["DCGM Diagnostic"]["test_categories"] for t in c["tests"]]
    assert all(set(t) == set(real) for t in tests)
    real_result_keys = {k for r in real["results"] for k in r} - {"info"}  # info is verbose-only prose
    sim_result_keys = {k for t in tests for r in t["results"] for k in r} - {"warnings"}
    assert sim_result_keys == real_result_keys
    assert set(tests[0]["test_summary"]) == set(real["test_summary"])


def test_dcgm3_json_has_the_real_documents_keys() -> None:
    real = json.loads(fixture("dcgm3-r2-pass-json-virtualclient.json"))["DCGM GPU Diagnostic"]
    sim_doc = json.loads(render(level=2, faults=(DcgmFault(0, "pcie"),), major=3))
    assert set(sim_doc) == {"DCGM GPU Diagnostic"}
    sim = sim_doc["DCGM GPU Diagnostic"]
    # "version" is in the 3.1.0 nvvs sample; "Driver Version Detected" is what DCGM's JsonResult writes.
    assert set(sim) - set(real) == {"version", "Driver Version Detected"}
    assert [c["category"] for c in sim["test_categories"]] == [c["category"] for c in real["test_categories"]]

    def shape(doc: dict[str, Any]) -> list[tuple[str, frozenset[str], frozenset[frozenset[str]]]]:
        return [
            (
                c["category"],
                frozenset(t),
                frozenset(frozenset(r) - {"info", "warnings"} for r in t["results"]),
            )
            for c in doc["test_categories"]
            for t in c["tests"]
        ]

    assert shape(sim) == shape(real)


def test_jsoncpp_layout_reproduces_a_real_capture_byte_for_byte() -> None:
    real = fixture("dcgm3-r2-pass-json-virtualclient.json")
    # The one hand-edited line in that file lacks jsoncpp's space before the colon.
    assert real.count('"status": "Pass"') == 1
    assert jsoncpp_styled(json.loads(real)) == real.replace('"status": "Pass"', '"status" : "Pass"')


def test_jsoncpp_layout_matches_the_4x_paste_up_to_trailing_spaces() -> None:
    real = fixture("dcgm4-r4-json-fragment-issue215.json").rstrip().rstrip(",")
    nested = jsoncpp_styled({"a": {"b": {"c": {"d": [json.loads(real)]}}}})  # the test object's depth
    ours = "\n".join(nested.splitlines()[9:-5]).expandtabs(8)  # the reporter's 8-column tabs
    assert [line.rstrip() for line in ours.splitlines()] == [line.rstrip() for line in real.splitlines()]


@pytest.mark.parametrize("major", MAJORS)
def test_text_table_uses_dcgmis_frame(major: int) -> None:
    real_frame = {
        line
        for name in (
            "dcgm4.2.3-r2-text-pcie-fail-internal-error-issue253.txt",
            "dcgm3.0.4-r3-text-header-deployment-pass-issue55-fragment.txt",
        )
        for line in fixture(name).splitlines()
        if line.startswith("+") or line.startswith("|-")
    }
    stress = (
        "+-----  Stress  ------------+------------------------------------------------+"  # dcgmi/Diag.cpp
    )
    faults = tuple(DcgmFault(g, kind) for g, kind in enumerate(FAULT_KINDS))
    lines = render(level=4, faults=faults, major=major, fmt="text").splitlines()
    assert lines[0] == "Successfully ran diagnostic for group."
    assert all(len(line) == 78 and line[0] in "|+" and line[28] in "|+" for line in lines[1:])
    frame = {line for line in lines if line.startswith("+") or line.startswith("|-")}
    assert frame - real_frame == {stress}
    assert lines[-1] == lines[1]  # closed with the same border it opened with


def test_dcgm4_prints_warn_only_on_the_text_test_line() -> None:
    doc = json.loads(render(level=2, faults=(DcgmFault(2, "thermal_warn"),), major=4))
    (memory,) = (
        t for c in doc["DCGM Diagnostic"]["test_categories"] for t in c["tests"] if t["name"] == "memory"
    )
    assert memory["results"][2]["status"] == "Fail"
    assert memory["test_summary"]["status"] == "Fail"
    text = render(level=2, faults=(DcgmFault(2, "thermal_warn"),), major=4, fmt="text")
    assert "| memory                    | Warn " in text
    assert "|                           | GPU2: Fail " in text
    assert "| Warning: GPU2             | Thermal violations totaling 13.3 seconds star  |" in text


# ---------------------------------------------------------------------------------------------
# determinism, identities, errors


def test_render_is_deterministic_and_serials_follow_uuids() -> None:
    assert render(level=3) == render(level=3)
    doc = json.loads(render(level=1))
    serials = [e["serial_num"] for e in doc["entity_groups"][0]["entities"]]
    assert len(set(serials)) == 8
    assert all(len(s) == 13 and s.isdigit() for s in serials)
    other = render_dcgm(level=1, gpu_count=8, gpu_uuids=[u[::-1] for u in UUIDS], driver_version=DRIVER)
    assert other != render(level=1)


def test_parser_reads_a_uuid_when_an_entity_carries_one() -> None:
    # dcgmi 4.2 prints no UUIDs (so the sim prints none either); a future field is still read.
    doc = json.loads(render(level=1, gpus=2))
    assert parse_dcgm(json.dumps(doc)).gpu_uuids == {}
    for entity, uuid in zip(doc["entity_groups"][0]["entities"], UUIDS, strict=False):
        entity["uuid"] = uuid
    assert parse_dcgm(json.dumps(doc)).gpu_uuids == {"0": UUIDS[0], "1": UUIDS[1]}


@pytest.mark.parametrize("major", MAJORS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_cut_sim_output_never_passes(major: int, fmt: str) -> None:
    text = render(level=2, gpus=4, major=major, fmt=fmt)
    for cut in range(0, len(text.rstrip()), 11):
        try:
            report = parse_dcgm(text[:cut])
        except ParseError:
            continue
        assert report.overall != "pass", f"cut at {cut} parsed as a pass"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        pytest.param(
            {"faults": (DcgmFault(0, "fan"),)}, SpecError, "unknown DCGM fault kind", id="unknown-kind"
        ),
        pytest.param({"faults": (DcgmFault(8, "memory"),)}, SpecError, "GPUs 0..7", id="gpu-out-of-range"),
        pytest.param({"level": 5}, ValueError, "1..4", id="level-5"),
        pytest.param({"major": 2}, ValueError, "dcgm_major", id="dcgm-2"),
        pytest.param({"fmt": "yaml"}, ValueError, "fmt", id="fmt-yaml"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        render(**kwargs)


def test_one_uuid_per_gpu_is_required() -> None:
    with pytest.raises(ValueError, match="one UUID per GPU"):
        render_dcgm(level=1, gpu_count=8, gpu_uuids=UUIDS[:7], driver_version=DRIVER)
