"""`nvidia-smi -L` listings (real NVIDIA captures and the simulator's) map GPU indexes to UUIDs;
damaged listings are a ParseError or no listing at all, never another exception (the patterns
are bounded, so 50 KB tokens stay linear)."""

from __future__ import annotations

import contextlib
import random

import pytest

from fleetval.errors import ParseError
from fleetval.fleet.spec import load_fleet_spec
from fleetval.nvidia_smi.parser import parse_gpu_list, split_gpu_list
from fleetval.sim.images import ContainerContext, run_container
from tests.paths import DEMO_FLEET, FIXTURES

MIXED = (FIXTURES / "nvidia-smi" / "nvidia-smi-L-h100-mig-mixed-all-balanced-nvidia-docs.txt").read_text()
SINGLE = (FIXTURES / "nvidia-smi" / "nvidia-smi-L-h100-mig-single-all-1g.10gb-nvidia-docs.txt").read_text()


def simulated_probe_output() -> str:
    ctx = ContainerContext(node="r01-n03", gpu_indices=tuple(range(8)), env={}, salt="t")
    script = "nvidia-smi -L && nv-hostengine >/dev/null && exec dcgmi diag -r 2 -j"
    result = run_container(
        "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
        ["/bin/bash", "-c"],
        [script],
        ctx,
        load_fleet_spec(DEMO_FLEET.read_text()),
    )
    return result.output


def test_real_listings_with_mig_devices() -> None:
    assert parse_gpu_list(MIXED) == {"0": "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"}
    assert list(parse_gpu_list(SINGLE)) == ["0"]


def test_split_leaves_the_report_intact() -> None:
    raw = simulated_probe_output()
    uuids, report = split_gpu_list(raw)
    assert sorted(uuids) == [str(i) for i in range(8)]
    assert report.lstrip().startswith("{") and raw.endswith(report)
    assert split_gpu_list(report) == ({}, report)  # no listing: nothing taken


def test_not_a_listing_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_gpu_list(MIXED + "No devices were found\n")


def test_damaged_listings_never_crash_or_hang() -> None:
    rng = random.Random(7)
    seeds = [MIXED, SINGLE, simulated_probe_output()[:2000]]
    for _ in range(3000):
        text = rng.choice(seeds)
        kind = rng.random()
        if kind < 0.3:
            i = rng.randrange(len(text))
            text = text[:i] + chr(rng.choice([0, 0x0663, 0xFFFD, rng.randrange(32, 127)])) + text[i + 1 :]
        elif kind < 0.5:
            text = text[: rng.randrange(len(text))]
        elif kind < 0.7:
            lines = text.splitlines(keepends=True)
            rng.shuffle(lines)
            text = "".join(lines).replace("\n", rng.choice(["\r\n", "\r", "\n\n"]))
        else:
            text = text.replace("(UUID: ", "(UUID: " + "9" * rng.randrange(1, 50_000), 1)
        with contextlib.suppress(ParseError):
            parse_gpu_list(text)
        uuids, rest = split_gpu_list(text)
        assert rest == "" or text.endswith(rest)
        assert all(u.startswith("GPU-") for u in uuids.values())
