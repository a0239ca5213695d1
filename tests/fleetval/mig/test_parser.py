"""MIG parsers on real outputs (`tests/fixtures/mig/`, provenance in its SOURCES.md): exact values
from every fixture, partial tables read up to their cut, joined files read part by part, and hostile
input that is a ParseError or a sensible parse, never another exception (the patterns are bounded
and anchored, so big inputs stay linear)."""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

import pytest

from fleetval.errors import ParseError
from fleetval.mig.parser import (
    MAX_INPUT_CHARS,
    MAX_LINE_CHARS,
    GiProfile,
    GpuInstance,
    MigDevice,
    MigGpu,
    MigResource,
    Placements,
    parse_lgi,
    parse_lgip,
    parse_lgipp,
    parse_mig,
    parse_mig_labels,
    parse_mig_labels_json,
    parse_mig_list,
)
from tests.paths import FIXTURES

MIG = FIXTURES / "mig"


def read(name: str) -> str:
    return (MIG / name).read_text()


H100 = read("nvidia-smi-mig-lgip-lgipp-h100-pcie-80gb-525-scaleway-docs.txt")
A30 = read("nvidia-smi-mig-lgip-lgipp-lgi-a30-all-allocated-free0-summer-lo-readme.txt")
H100_NVL = read("nvidia-smi-mig-lgip-h100-nvl-partial-gpu-operator-pr900.txt")
GB200 = read("nvidia-smi-mig-lgip-gb200-partial-gpu-operator-pr1303.txt")
B200 = read("nvidia-smi-mig-lgip-b200-partial-mig-parted-pr187.txt")
RTX_PRO = read("nvidia-smi-mig-lgip-rtx-pro-6000-blackwell-gfx-me-all-partial-cubecos-issue312.txt")
L_SINGLE = read("nvidia-smi-L-h100-mig-single-all-1g.10gb-nvidia-docs.txt")
L_MIXED = read("nvidia-smi-L-h100-mig-mixed-all-balanced-nvidia-docs.txt")
CGI_LGI_L = read("nvidia-smi-mig-cgi-lgi-L-h100-pcie-3g40gb-3x1g10gb-scaleway-docs.txt")
LABELS_MIXED = read("gfd-node-labels-h100-mig-mixed-all-balanced-nvidia-docs.json")
LABELS_SINGLE = read("gfd-node-labels-h100-mig-single-all-disabled-nvidia-docs.json")
TEXT_SEEDS = [H100, A30, H100_NVL, GB200, B200, RTX_PRO, L_SINGLE, L_MIXED, CGI_LGI_L]

# (name, id, free, total, memory GiB, P2P, SM, DEC, ENC, CE, JPEG, OFA)
Row = tuple[str, int, int, int, float, bool | None, int, int, int, int, int, int]


def rows(profiles: list[GiProfile]) -> list[Row]:
    assert {p.gpu for p in profiles} == {0}
    return [
        (
            p.name,
            p.profile_id,
            p.instances_free,
            p.instances_total,
            p.memory_gib,
            p.p2p,
            p.sm,
            p.dec,
            p.enc,
            p.ce,
            p.jpeg,
            p.ofa,
        )
        for p in profiles
    ]


def json_round_trip(doc: Any) -> None:
    """`to_json` output is plain JSON: it survives a dump and load unchanged."""
    assert json.loads(json.dumps(doc)) == doc


# --- nvidia-smi mig -lgip ---------------------------------------------------------------------------


def test_h100_lgip_has_the_seven_profiles() -> None:
    assert rows(parse_lgip(H100)) == [
        ("1g.10gb", 19, 7, 7, 9.62, False, 14, 1, 0, 1, 1, 0),
        ("1g.10gb+me", 20, 1, 1, 9.62, False, 14, 1, 0, 1, 1, 1),
        ("1g.20gb", 15, 4, 4, 19.50, False, 14, 1, 0, 1, 1, 0),
        ("2g.20gb", 14, 3, 3, 19.50, False, 30, 2, 0, 2, 2, 0),
        ("3g.40gb", 9, 2, 2, 39.25, False, 46, 3, 0, 3, 3, 0),
        ("4g.40gb", 5, 1, 1, 39.25, False, 62, 4, 0, 4, 4, 0),
        ("7g.80gb", 0, 1, 1, 79.00, False, 114, 7, 0, 8, 7, 1),
    ]


def test_a30_lgip_every_profile_free_0() -> None:
    assert rows(parse_lgip(A30)) == [
        ("1g.6gb", 14, 0, 4, 5.81, False, 14, 1, 0, 1, 0, 0),
        ("1g.6gb+me", 21, 0, 1, 5.81, False, 14, 1, 0, 1, 1, 1),
        ("2g.12gb", 5, 0, 2, 11.69, False, 28, 2, 0, 2, 0, 0),
        ("4g.24gb", 0, 0, 1, 23.50, False, 56, 4, 0, 4, 1, 1),
    ]


def test_partial_lgip_outputs_parse_the_rows_they_hold() -> None:
    assert rows(parse_lgip(H100_NVL)) == [  # after a bare "nvidia-smi mig -lgip" command line
        ("1g.12gb", 19, 7, 7, 10.75, False, 16, 1, 0, 1, 1, 0),
        ("1g.12gb+me", 20, 1, 1, 10.75, False, 16, 1, 0, 1, 1, 1),
        ("1g.24gb", 15, 4, 4, 21.62, False, 26, 1, 0, 1, 1, 0),
    ]
    assert rows(parse_lgip(GB200)) == [  # cut at the last complete row
        ("1g.24gb", 19, 7, 7, 20.00, False, 18, 1, 0, 2, 1, 0),
        ("1g.24gb+me", 20, 1, 1, 20.00, False, 18, 1, 0, 2, 1, 1),
        ("1g.47gb", 15, 4, 4, 45.50, False, 32, 1, 0, 2, 1, 0),
        ("2g.47gb", 14, 3, 3, 45.50, False, 38, 2, 0, 4, 2, 0),
    ]
    assert rows(parse_lgip(B200)) == [  # followed by a "[... truncated ...]" line
        ("1g.23gb", 19, 7, 7, 20.50, False, 18, 1, 0, 2, 1, 0),
        ("1g.23gb+me", 20, 1, 1, 20.50, False, 18, 1, 0, 2, 1, 1),
        ("1g.45gb", 15, 4, 4, 44.25, False, 30, 1, 0, 2, 1, 0),
        ("2g.45gb", 14, 3, 3, 44.25, False, 36, 2, 0, 4, 2, 0),
    ]


def test_rtx_pro_wide_table_with_gfx_profile() -> None:
    assert rows(parse_lgip(RTX_PRO)) == [  # the 81-column Blackwell layout, after a shell prompt
        ("1g.24gb", 14, 4, 4, 23.12, False, 46, 1, 1, 1, 1, 0),
        ("1g.24gb+me", 21, 1, 1, 23.12, False, 46, 1, 1, 1, 1, 1),
        ("1g.24gb+gfx", 47, 4, 4, 23.12, False, 46, 1, 1, 1, 1, 0),
    ]


def test_rtx_pro_me_all_profile() -> None:
    """The fixture is cut just before the `+me.all` row (its marker line names it: ID 65); this is
    that row as the same issue thread prints it, in place of the marker."""
    me_all = (
        "|   0  MIG 1g.24gb+me.all  65     1/1        23.12      No     46     4     4   |\n"
        "|                                                               1     4     1   |\n"
        "+-------------------------------------------------------------------------------+\n"
    )
    head, marker = RTX_PRO.split("[... truncated", 1)
    assert "1g.24gb+me.all  65" in marker
    assert rows(parse_lgip(head + me_all))[-1] == (
        "1g.24gb+me.all",
        65,
        1,
        1,
        23.12,
        False,
        46,
        4,
        4,
        1,
        4,
        1,
    )


def test_lgip_record_json() -> None:
    first = parse_lgip(H100)[0]
    assert first.to_json() == {
        "gpu": 0,
        "name": "1g.10gb",
        "profile_id": 19,
        "instances_free": 7,
        "instances_total": 7,
        "memory_gib": 9.62,
        "p2p": False,
        "sm": 14,
        "dec": 1,
        "enc": 0,
        "ce": 1,
        "jpeg": 1,
        "ofa": 0,
    }


def test_lgip_p2p_yes_and_other_gpus() -> None:
    text = H100.replace("No     14", "Yes    14", 1).replace("|   0  MIG 7g.80gb", "|   1  MIG 7g.80gb")
    profiles = parse_lgip(text)
    assert profiles[0].p2p is True and profiles[1].p2p is False
    assert (profiles[-1].gpu, profiles[-1].name) == (1, "7g.80gb")


# --- nvidia-smi mig -lgipp --------------------------------------------------------------------------


def test_h100_lgipp_placements() -> None:
    assert parse_lgipp(H100) == [
        Placements(0, 19, (0, 1, 2, 3, 4, 5, 6), 1),
        Placements(0, 20, (0, 1, 2, 3, 4, 5, 6), 1),
        Placements(0, 15, (0, 2, 4, 6), 2),
        Placements(0, 14, (0, 2, 4), 2),
        Placements(0, 9, (0, 4), 4),
        Placements(0, 5, (0,), 4),  # "Placement :" (one placement) as well as "Placements:"
        Placements(0, 0, (0,), 8),
    ]
    assert parse_lgipp(H100)[-1].to_json() == {"gpu": 0, "profile_id": 0, "starts": [0], "size": 8}


def test_a30_lgipp_between_markdown_lines() -> None:
    assert parse_lgipp(A30) == [
        Placements(0, 14, (0, 1, 2, 3), 1),
        Placements(0, 21, (0, 1, 2, 3), 1),
        Placements(0, 5, (0, 2), 2),
        Placements(0, 0, (0,), 4),
    ]


# --- nvidia-smi mig -lgi ----------------------------------------------------------------------------


def test_a30_lgi_four_1g6gb_instances() -> None:
    assert parse_lgi(A30) == [GpuInstance(0, "1g.6gb", 14, gi, gi - 3, 1) for gi in (3, 4, 5, 6)]


def test_cgi_lgi_l_joined_file() -> None:
    assert parse_lgi(CGI_LGI_L) == [
        GpuInstance(0, "1g.10gb", 19, 7, 0, 1),
        GpuInstance(0, "1g.10gb", 19, 8, 1, 1),
        GpuInstance(0, "1g.10gb", 19, 9, 2, 1),
        GpuInstance(0, "3g.40gb", 9, 2, 4, 4),
    ]
    assert parse_lgi(CGI_LGI_L)[-1].to_json() == {
        "gpu": 0,
        "name": "3g.40gb",
        "profile_id": 9,
        "instance_id": 2,
        "placement_start": 4,
        "placement_size": 4,
    }
    assert parse_mig_list(CGI_LGI_L) == [
        MigGpu(
            0,
            "NVIDIA H100 PCIe",
            "GPU-7cd6d4d6-9fa8-13be-3c42-09a1b2280a02",
            (
                MigDevice("3g.40gb", 0, "MIG-da06d78f-7534-56a0-a062-62fef012be91"),
                MigDevice("1g.10gb", 1, "MIG-8aa1fc52-9818-58ec-bc64-8f0cae121bb4"),
                MigDevice("1g.10gb", 2, "MIG-42fa9c93-1430-5ccc-b623-c02fb93b7f5a"),
                MigDevice("1g.10gb", 3, "MIG-6d96b431-44ba-5360-80b0-9359561c927d"),
            ),
        )
    ]
    doc = parse_mig(CGI_LGI_L)
    assert set(doc) == {"lgi", "devices"}  # the -cgi success lines are no part
    json_round_trip(doc)


# --- nvidia-smi -L ----------------------------------------------------------------------------------


def test_l_single_all_1g10gb() -> None:
    [gpu] = parse_mig_list(L_SINGLE)
    assert (gpu.index, gpu.name, gpu.uuid) == (
        0,
        "NVIDIA H100 80GB HBM3",
        "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4",
    )
    assert [(d.profile, d.index) for d in gpu.devices] == [("1g.10gb", i) for i in range(7)]
    assert [d.uuid for d in gpu.devices] == [
        "MIG-3f6f389f-b0cc-5e5c-8e32-eaa8fd067902",
        "MIG-35f93699-4b53-5a19-8289-80b8418eec60",
        "MIG-9d14fb21-4ae1-546f-a636-011582899c39",
        "MIG-0f709664-740c-52b0-ae79-3e4c9ede6d3b",
        "MIG-5d23f73a-d378-50ac-a6f5-3bf5184773bb",
        "MIG-6cea15c7-8a56-578c-b965-0e73cb6dfc10",
        "MIG-981c86e9-3607-57d7-9426-295347e4b925",
    ]


def test_l_mixed_all_balanced() -> None:
    [gpu] = parse_mig_list(L_MIXED)
    assert gpu.devices == (
        MigDevice("3g.40gb", 0, "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"),
        MigDevice("2g.20gb", 1, "MIG-56c30729-347f-5dd6-8da0-c3cc59e969e0"),
        MigDevice("1g.10gb", 2, "MIG-9d14fb21-4ae1-546f-a636-011582899c39"),
        MigDevice("1g.10gb", 3, "MIG-0f709664-740c-52b0-ae79-3e4c9ede6d3b"),
    )
    assert parse_mig(L_MIXED)["devices"][0]["devices"][0] == {
        "profile": "3g.40gb",
        "index": 0,
        "uuid": "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde",
    }


def test_l_crlf_older_mig_uuid_and_gpus_without_mig() -> None:
    crlf = L_MIXED.replace("\n", "\r\n")  # the NVIDIA sources had CRLF line ends (SOURCES.md)
    assert parse_mig_list(crlf) == parse_mig_list(L_MIXED)
    r450 = (
        "GPU 0: A100-SXM4-40GB (UUID: GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2)\n"
        "  MIG 3g.20gb Device 0: (UUID: MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2/1/0)\n"
        "GPU 1: A100-SXM4-40GB (UUID: GPU-1d4c3a5e-0000-1111-2222-333344445555)\n"
    )
    first, second = parse_mig_list(r450)
    assert first.devices == (MigDevice("3g.20gb", 0, "MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2/1/0"),)
    assert (second.index, second.devices) == (1, ())


# --- GFD / MIG manager labels -----------------------------------------------------------------------


def test_mixed_labels() -> None:
    labels = parse_mig_labels(json.loads(LABELS_MIXED))
    assert (labels.strategy, labels.config, labels.config_state, labels.capable) == (
        "mixed",
        "all-balanced",
        "success",
        True,
    )
    assert (labels.product, labels.gpu_count, labels.replicas, labels.sharing_strategy) == (
        "NVIDIA-H100-80GB-HBM3",
        1,
        0,
        "none",
    )
    assert labels.resources == (
        MigResource(
            "1g.10gb", 2, 9984, 16, 1, 1, 1, 1, 0, 1, 0, 1, "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "none"
        ),
        MigResource(
            "2g.20gb", 1, 20096, 32, 2, 2, 2, 2, 0, 2, 0, 1, "NVIDIA-H100-80GB-HBM3-MIG-2g.20gb", "none"
        ),
        MigResource(
            "3g.40gb", 1, 40320, 60, 3, 3, 3, 3, 0, 3, 0, 1, "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "none"
        ),
    )
    assert labels.resources[0].to_json() == {
        "profile": "1g.10gb",
        "count": 2,
        "memory_mib": 9984,
        "multiprocessors": 16,
        "slices_gi": 1,
        "slices_ci": 1,
        "engines_copy": 1,
        "engines_decoder": 1,
        "engines_encoder": 0,
        "engines_jpeg": 1,
        "engines_ofa": 0,
        "replicas": 1,
        "product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        "sharing_strategy": "none",
    }
    assert parse_mig_labels_json(LABELS_MIXED) == labels
    doc = parse_mig(LABELS_MIXED)
    assert doc == {"labels": labels.to_json()}
    json_round_trip(doc)


def test_single_all_disabled_labels() -> None:
    labels = parse_mig_labels_json(LABELS_SINGLE)
    assert labels.to_json() == {
        "strategy": "single",
        "config": "all-disabled",
        "config_state": "success",
        "capable": True,
        "product": "NVIDIA-H100-80GB-HBM3",
        "gpu_count": 1,
        "replicas": 1,
        "sharing_strategy": "none",
        "resources": [],
    }


def test_labels_in_a_node_object() -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": json.loads(LABELS_MIXED)},
    }
    assert parse_mig(json.dumps(node)) == parse_mig(LABELS_MIXED)
    assert parse_mig_labels_json(json.dumps(node, indent=None, separators=(",", ":"))).strategy == "mixed"


def test_single_strategy_mig_node_labels_its_profile_on_gpu_labels() -> None:
    """With the single strategy GFD labels the MIG devices as `nvidia.com/gpu.*`, the product
    ending in `-MIG-<profile>`; the media-extension profile is spelled `.me` in mixed labels."""
    labels = parse_mig_labels(
        {
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED",
            "nvidia.com/gpu.count": "7",
            "nvidia.com/gpu.memory": "9984",
            "nvidia.com/gpu.multiprocessors": "16",
            "nvidia.com/gpu.slices.gi": "1",
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
            "nvidia.com/mig-1g.10gb.me.count": "1",
        }
    )
    assert (labels.gpu_count, labels.replicas, labels.sharing_strategy) == (7, 4, "time-slicing")
    assert labels.resources == (
        MigResource("1g.10gb.me", count=1),
        MigResource(
            "1g.10gb",
            count=7,
            memory_mib=9984,
            multiprocessors=16,
            slices_gi=1,
            replicas=4,
            product="NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED",
            sharing_strategy="time-slicing",
        ),
    )


# --- parse_mig: which parts a text holds ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("nvidia-smi-mig-lgip-lgipp-h100-pcie-80gb-525-scaleway-docs.txt", {"lgip": 7, "lgipp": 7}),
        (
            "nvidia-smi-mig-lgip-lgipp-lgi-a30-all-allocated-free0-summer-lo-readme.txt",
            {"lgip": 4, "lgipp": 4, "lgi": 4},
        ),
        ("nvidia-smi-mig-lgip-h100-nvl-partial-gpu-operator-pr900.txt", {"lgip": 3}),
        ("nvidia-smi-mig-lgip-gb200-partial-gpu-operator-pr1303.txt", {"lgip": 4}),
        ("nvidia-smi-mig-lgip-b200-partial-mig-parted-pr187.txt", {"lgip": 4}),
        ("nvidia-smi-mig-lgip-rtx-pro-6000-blackwell-gfx-me-all-partial-cubecos-issue312.txt", {"lgip": 3}),
        ("nvidia-smi-L-h100-mig-single-all-1g.10gb-nvidia-docs.txt", {"devices": 1}),
        ("nvidia-smi-L-h100-mig-mixed-all-balanced-nvidia-docs.txt", {"devices": 1}),
        ("nvidia-smi-mig-cgi-lgi-L-h100-pcie-3g40gb-3x1g10gb-scaleway-docs.txt", {"lgi": 4, "devices": 1}),
    ],
)
def test_parse_mig_finds_the_parts_of_each_fixture(name: str, parts: dict[str, int]) -> None:
    doc = parse_mig(read(name))
    assert {k: len(v) for k, v in doc.items()} == parts
    json_round_trip(doc)


@pytest.mark.parametrize(
    "name",
    [
        "nvidia-smi-mig-enable-and-mig-device-table-h100-pcie-scaleway-docs-excerpt.txt",
        "mig-parted-example-config.yaml",
        "gpu-operator-default-mig-parted-config-configmap.yaml",
        "mig-supported-profiles-h100-a100-nvidia-docs-excerpt.md",
        "SOURCES.md",
    ],
)
def test_files_without_a_mig_part_are_parse_errors(name: str) -> None:
    """The nvidia-smi main table, its "MIG devices:" table, mig-parted configs and the docs' tables
    are none of the parts: no silent empty document."""
    with pytest.raises(ParseError, match="no MIG output"):
        parse_mig(read(name))


def test_each_parser_wants_its_part() -> None:
    with pytest.raises(ParseError, match="-lgip"):
        parse_lgip(L_SINGLE)
    with pytest.raises(ParseError, match="-lgipp"):
        parse_lgipp(GB200)
    with pytest.raises(ParseError, match="-lgi"):
        parse_lgi(H100)
    with pytest.raises(ParseError, match="nvidia-smi -L"):
        parse_mig_list(A30)
    with pytest.raises(ParseError, match="not GFD"):
        parse_mig_labels({"kubernetes.io/hostname": "n1"})


# --- hostile input ----------------------------------------------------------------------------------

LGIP_ROW = "|   0  MIG 1g.10gb       19     7/7        9.62       No     14     1     0   |"
LGI_ROW = "|   0  MIG 1g.6gb          14        3          0:1     |"
LGIPP_LINE = "GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1"
L_GPU = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4)"
HUGE = "9" * 5000

HOSTILE: dict[str, str] = {
    "empty": "",
    "blank lines": "\n \r\n\t\n",
    "binary bytes": bytes(range(256)).decode("latin-1") * 4,
    "random bytes": random.Random(1).randbytes(100_000).decode("utf-8", errors="replace"),
    "NUL in a row": H100.replace("7/7", "7\x00/7", 1),
    "5 MB line": "GPU  0 Profile ID 19 Placements: {" + "0," * 2_500_000 + "0}:1",
    "long line in a table": H100.replace(LGIP_ROW, LGIP_ROW[:-1] + " " * MAX_LINE_CHARS + "|"),
    "lgip cut after a profile's first line": H100[: H100.index("|" + " " * 61 + "1     1     0")],
    "lgip cut mid-row": H100[: H100.index(LGIP_ROW) + 40],
    "lgip cut inside the header": H100[: H100.index("Free/Total")],
    "lgip header only": H100[: H100.index("|   0  MIG")],
    "lgi cut mid-row": A30[: A30.index(LGI_ROW) + 30],
    "lgipp cut mid-line": LGIPP_LINE[:40],
    "-L cut mid-line": L_SINGLE[: L_SINGLE.index("(UUID: MIG-35f9") + 14],
    "-L GPU line cut before its UUID": L_GPU[:20] + "\n",
    "MIG line without its GPU": L_MIXED.split("\n", 1)[1],
    "MIG line after a prompt": L_GPU + "\n$ nvidia-smi -L\n  MIG 1g.10gb Device 0: (UUID: MIG-x)\n",
    "unicode digits in lgip id": H100.replace("19     7/7", "\u0661\u0669     7/7", 1),
    "unicode digits in free": H100.replace("7/7", "\u0667/7", 1),
    "unicode digits in lgipp": LGIPP_LINE.replace("ID 19", "ID \u0661\u0669"),
    "unicode digits in lgi": A30.replace("14        3", "14        \u0663", 1),
    "unicode digits in -L index": L_GPU.replace("GPU 0:", "GPU \u0660:"),
    "unicode digits in MIG index": L_MIXED.replace("Device  0:", "Device  \u0660:"),
    "fullwidth digits in memory": H100.replace("9.62", "\uff19.62", 1),
    "huge integer in lgip": H100.replace("19     7/7", HUGE + "     7/7", 1),
    "huge integer under the line limit": H100.replace("19     7/7", "9" * 4000 + "     7/7", 1),
    "huge integer in lgipp": LGIPP_LINE.replace("{0,", "{" + HUGE + ","),
    "huge placement size": LGIPP_LINE.replace(":1", ":" + "9" * 3000),
    "huge integer in lgi": A30.replace("0:1 ", "0:" + "9" * 3000 + " ", 1),
    "huge GPU index in -L": L_GPU.replace("GPU 0:", "GPU " + "9" * 3000 + ":"),
    "Free above Total": H100.replace("7/7", "8/7", 1),
    "negative total": H100.replace("7/7", "7/-7", 1),
    "memory not a number": H100.replace("9.62", "nan ", 1),
    "placement size 0": LGIPP_LINE.replace(":1", ":0"),
    "placement set damaged": LGIPP_LINE.replace("{0,1,", "{0,,1,"),
    "lgi placement size 0": A30.replace("0:1 ", "0:0 ", 1),
    "unknown lgip columns": H100.replace("P2P    SM", "SM     P2P", 1),
    "second line first": H100.replace(LGIP_ROW + "\n", "", 1),
    "two first lines": H100.replace(LGIP_ROW, LGIP_ROW + "\n" + LGIP_ROW, 1),
    "a damaged row": H100.replace("1g.20gb       15", "1g.20gb  15  15", 1),
    "many spaces before the UUID": L_GPU.replace(" (UUID", " " * 4000 + "(UUID"),
}

JSON_HOSTILE: dict[str, str] = {
    "not JSON": "{labels",
    "a JSON list": "[" + LABELS_MIXED + "]",
    "huge integer value": '{"nvidia.com/gpu.count": ' + HUGE + "}",
    "huge integer string": '{"nvidia.com/gpu.count": "' + HUGE + '"}',
    "unicode digits in a count": '{"nvidia.com/mig-1g.10gb.count": "\u0661\u0669"}',
    "superscript digit in a count": '{"nvidia.com/gpu.replicas": "\u00b2"}',
    "negative count": '{"nvidia.com/gpu.count": "-1"}',
    "capable not a boolean": '{"nvidia.com/mig.capable": "yes"}',
    "a value not a string": '{"nvidia.com/mig.strategy": 1}',
    "a nested value": '{"nvidia.com/mig.strategy": {"a": "b"}}',
    "Node without labels": '{"kind": "Node", "metadata": {"name": "n1"}}',
    "Node labels not an object": '{"kind": "Node", "metadata": {"labels": ["a"]}}',
    "no MIG or GPU label": '{"kubernetes.io/hostname": "n1"}',
    "empty object": "{}",
    "deep nesting": "{" + '"a":{' * 100_000 + "}" * 100_001,
    "over 4 MiB": '{"nvidia.com/mig.strategy": "' + "x" * MAX_INPUT_CHARS + '"}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_text_is_a_parse_error(name: str) -> None:
    text = HOSTILE[name]
    with pytest.raises(ParseError) as caught:
        parse_mig(text)
    assert caught.value.tool == "mig" and len(caught.value.excerpt) <= 200
    for parse in (parse_lgip, parse_lgipp, parse_lgi, parse_mig_list):
        with pytest.raises(ParseError):
            parse(text)


@pytest.mark.parametrize("name", sorted(JSON_HOSTILE))
def test_hostile_labels_are_a_parse_error(name: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_mig(JSON_HOSTILE[name])
    assert caught.value.tool == "mig"
    with pytest.raises(ParseError):
        parse_mig_labels_json(JSON_HOSTILE[name])


def test_label_mapping_with_bad_values_is_a_parse_error() -> None:
    base = json.loads(LABELS_MIXED)
    for key, value in [
        ("nvidia.com/mig-2g.20gb.memory", "20,096"),
        ("nvidia.com/mig-2g.20gb.count", "1e3"),
        ("nvidia.com/gpu.count", ""),
        ("nvidia.com/gpu.replicas", HUGE),
        ("nvidia.com/mig.capable", "True"),
    ]:
        with pytest.raises(ParseError, match=key.replace(".", r"\.")):
            parse_mig_labels({**base, key: value})
    with pytest.raises(ParseError):
        parse_mig_labels({"nvidia.com/gpu.count": None})  # type: ignore[dict-item]


def test_input_at_the_limits_still_parses() -> None:
    """A large valid input (thousands of lines up to the bounds) parses, in one linear pass."""
    many = "\n".join([LGIPP_LINE] * 50_000)
    assert len(parse_lgipp(many)) == 50_000
    long_set = "GPU  0 Profile ID 19 Placements: {" + ",".join(["7"] * 256) + "}:1"
    assert parse_lgipp(long_set)[0].starts == (7,) * 256
    spaced = H100.replace("|   0  MIG 1g.10gb", "|" + " " * 2000 + "0  MIG 1g.10gb", 1)
    assert rows(parse_lgip(spaced)) == rows(parse_lgip(H100))
    indented = "\n".join("    " + line + "   " for line in H100.splitlines())  # markdown indentation
    assert parse_mig(indented) == parse_mig(H100)


def test_damaged_outputs_never_raise_another_exception() -> None:
    """Mutations of every text fixture: a parse, or a ParseError, and what parses is still JSON."""
    rng = random.Random(20250301)
    for _ in range(2500):
        text = rng.choice(TEXT_SEEDS)
        kind = rng.random()
        if kind < 0.35:
            for _ in range(rng.randrange(1, 4)):
                i = rng.randrange(len(text))
                char = chr(rng.choice([0, 0x0661, 0xFF19, 0xFFFD, 0x2028, rng.randrange(32, 127)]))
                text = text[:i] + char + text[i + 1 :]
        elif kind < 0.6:
            text = text[: rng.randrange(len(text))]
        elif kind < 0.75:
            lines = text.splitlines(keepends=True)
            rng.shuffle(lines)
            text = "".join(lines).replace("\n", rng.choice(["\r\n", "\r", "\n\n"]))
        elif kind < 0.9:
            text = rng.choice(TEXT_SEEDS)[: rng.randrange(2000)] + text
        else:
            i = rng.randrange(len(text))
            text = text[:i] + rng.choice(["9" * rng.randrange(1, 6000), " " * 3000, "/", "|"]) + text[i:]
        with contextlib.suppress(ParseError):
            json_round_trip(parse_mig(text))
