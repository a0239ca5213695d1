"""Every DCGM image fleetval supports is whole: an exit-code table and run-level plans of its
release, a simulator catalog entry that prints its own version, and a probe run on it that judges
a healthy node `pass` and a faulty one `fail`. The 4.6.0 image is checked against a captured run
of the published image (tests/fixtures/dcgm/dcgm4.6.0-image-check-version-binaries-poc.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetval.dcgm import exit_codes
from fleetval.dcgm.judge import judge_dcgm
from fleetval.dcgm.parser import parse_dcgm
from fleetval.dcgm.probe import DCGM_IMAGE, SUPPORTED_DCGM_IMAGES, DcgmImage, dcgm_diag_probe
from fleetval.dcgm.simulated import SIMULATED_DCGM_VERSIONS
from fleetval.fleet.spec import load_fleet_spec
from fleetval.nvidia_smi.parser import split_gpu_list
from fleetval.sim.images import ContainerContext, lookup_image, run_container

CAPTURED_460 = (
    Path(__file__).parents[2] / "fixtures" / "dcgm" / "dcgm4.6.0-image-check-version-binaries-poc.txt"
)
FLEET = load_fleet_spec(
    {
        "name": "dcgmimages",
        "seed": 5,
        "profiles": {
            # The profile says DCGM 3; a pod runs its image's DCGM whatever the profile says.
            "h100": {
                "gpu_product": "NVIDIA-H100-80GB-HBM3",
                "gpus": 8,
                "intra_busbw_gbps": 480,
                "inter_busbw_gbps": 370,
                "fabric": "ib",
                "dcgm_major": 3,
            }
        },
        "racks": [{"name": "r01", "profile": "h100", "nodes": 2}],
        "faults": [{"node": "r01-n02", "kind": "dcgm.memory", "gpu": 3}],
    }
)
IDS = [d.version for d in SUPPORTED_DCGM_IMAGES]


def shell(image: str, script: str, node: str = "r01-n01") -> tuple[int, str]:
    context = ContainerContext(node=node, gpu_indices=tuple(range(8)), env={}, salt="uid-1")
    result = run_container(image, ["/bin/bash", "-c"], [script], context, FLEET)
    return result.exit_code, result.output


def captured_section(title: str) -> str:
    """One `== title` section of the captured 4.6.0 image check, as the image printed it."""
    text = CAPTURED_460.read_text()
    start = text.index(f"== {title}\n") + len(f"== {title}\n")
    return text[start : text.index("\n== ", start) + 1]


def test_the_pinned_image_is_the_gpu_operators_current_dcgm() -> None:
    assert DCGM_IMAGE == "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"
    assert CAPTURED_460.read_text().startswith(f"== image\n{DCGM_IMAGE}\n")
    assert [d.version for d in SUPPORTED_DCGM_IMAGES] == ["3.3.9", "4.2.3", "4.6.0"]


@pytest.mark.parametrize("dcgm", SUPPORTED_DCGM_IMAGES, ids=IDS)
def test_each_supported_release_has_its_tables_and_a_catalog_image(dcgm: DcgmImage) -> None:
    assert dcgm.version in exit_codes.EXIT_CODES
    assert dcgm.version in SIMULATED_DCGM_VERSIONS
    image = lookup_image(dcgm.ref)
    assert image is not None and image.tool_version == dcgm.version
    assert dcgm.ref.endswith(f":{dcgm.version}-1-" + dcgm.ref.rsplit("-", 1)[1])


@pytest.mark.parametrize("dcgm", SUPPORTED_DCGM_IMAGES, ids=IDS)
def test_each_image_prints_its_own_version(dcgm: DcgmImage) -> None:
    code, banner = shell(dcgm.ref, "nv-hostengine")
    assert (code, banner) == (0, f"Started host engine version {dcgm.version} using port number: 5555 \n")
    assert shell(dcgm.ref, "dcgmi --version") == (0, f"\ndcgmi  version: {dcgm.version}\n\n")


def test_the_460_image_matches_the_captured_run_of_the_published_image() -> None:
    assert shell(DCGM_IMAGE, "dcgmi --version")[1] == captured_section("dcgmi version")
    binaries = captured_section("dcgmproftester binaries").split()
    image = lookup_image(DCGM_IMAGE)
    assert image is not None
    assert sorted(p for p in image.files if "dcgmproftester" in p) == binaries
    # Ubuntu 24.04's bash is 5.2: `-c` errors name line 1, as on 5.1.
    assert shell(DCGM_IMAGE, "nosuch")[1] == "/bin/bash: line 1: nosuch: command not found\n"


@pytest.mark.parametrize("dcgm", SUPPORTED_DCGM_IMAGES, ids=IDS)
@pytest.mark.parametrize(("node", "expected"), [("r01-n01", "pass"), ("r01-n02", "fail")])
def test_the_probe_on_each_image_reports_and_is_judged(dcgm: DcgmImage, node: str, expected: str) -> None:
    probe = dcgm_diag_probe(node, level=2, gpus=8, run_key="k", image=dcgm.ref)
    context = ContainerContext(node=node, gpu_indices=tuple(range(8)), env={}, salt="uid-2")
    result = run_container(probe.image, list(probe.command), list(probe.args), context, FLEET)
    _, report_text = split_gpu_list(result.output)
    report = parse_dcgm(report_text)
    assert report.dcgm_version == dcgm.version
    assert result.exit_code in exit_codes.EXIT_CODES[dcgm.version].reported
    judgement = judge_dcgm(report, gate="weekly", node=node, level=2, expected_gpus=8)
    assert judgement.result.value == expected
