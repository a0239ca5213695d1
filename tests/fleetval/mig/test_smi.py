"""`nvidia-smi` with MIG devices: the parser on NVIDIA's real R525 and R560 outputs, and the
simulator's rendering of the same values back to the real bytes."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fleetval.errors import ParseError
from fleetval.mig import simulated as sim
from fleetval.mig.catalog import catalog, check_layout
from fleetval.mig.smi import parse_smi
from tests.paths import FIXTURES

MIG = FIXTURES / "mig"
AZURE = "nvidia-smi-mig-lgip-lgipp-smi-h100-nvl-560-azure-alizeechen11-readme.txt"
SCALEWAY = "nvidia-smi-mig-enable-and-mig-device-table-h100-pcie-scaleway-docs-excerpt.txt"
SCALEWAY_CGI = "nvidia-smi-mig-cgi-lgi-L-h100-pcie-3g40gb-3x1g10gb-scaleway-docs.txt"
A30 = "nvidia-smi-mig-lgip-lgipp-lgi-a30-all-allocated-free0-summer-lo-readme.txt"
LIST_MIXED = "nvidia-smi-L-h100-mig-mixed-all-balanced-nvidia-docs.txt"


def read(name: str) -> str:
    return (MIG / name).read_text(encoding="utf-8")


def smi_part(name: str) -> str:
    """The `nvidia-smi` output of a fixture (the Azure one also holds -lgip and -lgipp)."""
    text = read(name)
    if name != AZURE:
        return text
    header = text.index("| NVIDIA-SMI")
    return text[text.rindex("\n", 0, header - 1) + 1 :]


def test_r560_table_of_three_mig_devices() -> None:
    report = parse_smi(smi_part(AZURE))
    assert report.driver_version == "560.35.03"
    assert report.tables == {"gpus", "mig", "processes"}
    [gpu] = report.gpus
    assert (gpu.index, gpu.name, gpu.mig_mode, gpu.memory_used_mib, gpu.memory_total_mib) == (
        0,
        "NVIDIA H100 NVL",
        "Enabled",
        64,
        95830,
    )
    assert [(d.gi, d.dev, d.memory_used_mib, d.memory_total_mib, d.sm) for d in report.mig_devices] == [
        (1, 0, 38, 47488, 60),
        (5, 1, 13, 22144, 26),
        (13, 2, 13, 11008, 16),
    ]
    assert report.mig_devices[0].engines == (3, 0, 3, 0, 3)
    assert report.mig_devices[2].bar1_total_mib == 16383
    assert report.processes == ()


def test_r525_container_given_one_mig_device() -> None:
    report = parse_smi(read(SCALEWAY))
    assert report.driver_version == "525.125.06"
    # Two runs in the excerpt: the host before MIG (memory shown), the container (N/A on MIG).
    assert [(g.mig_mode, g.memory_used_mib) for g in report.gpus] == [("Disabled", 0), ("Enabled", None)]
    [device] = report.mig_devices
    assert (
        device.gpu,
        device.gi,
        device.ci,
        device.dev,
        device.memory_used_mib,
        device.memory_total_mib,
    ) == (
        0,
        7,
        0,
        0,
        6,
        9856,
    )
    assert "processes" not in report.tables  # the excerpt leaves the Processes table out


def test_process_rows_are_read_by_tokens() -> None:
    # The Processes table's layout (R535, 87 columns), with rows of a MIG GPU and of a whole GPU.
    text = "\n".join(
        [
            "| Processes:                                                                            |",
            "|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |",
            "|        ID   ID                                                             Usage      |",
            "|=======================================================================================|",
            "|    0    1    0      41233      C   python3 train.py                            9210MiB |",
            "|    0   N/A  N/A     25384      C   nvidia-cuda-mps-server                        26MiB |",
            "+---------------------------------------------------------------------------------------+",
        ]
    )
    first, second = parse_smi(text).processes
    assert (first.gi, first.ci, first.pid, first.name, first.memory_mib) == (
        1,
        0,
        41233,
        "python3 train.py",
        9210,
    )
    assert (second.gi, second.ci, second.type) == (None, None, "C")


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        pytest.param(
            lambda t: t.replace("38MiB / 47488MiB", "38MiB / lots"), "unreadable memory", id="memory"
        ),
        pytest.param(
            lambda t: t.replace("|  0    5   0   1  |", "|  0    5   X   1  |"),
            "unreadable MIG device",
            id="ids",
        ),
        pytest.param(lambda t: t.replace("60      0 |", "60      0  "), "closing bar|four cells", id="bar"),
        pytest.param(
            lambda t: t.replace("|              Enabled |", "|              Maybe |"), "MIG mode", id="mode"
        ),
        pytest.param(
            lambda t: t.replace("|  No running processes found", "|  0 x y z C p 1MiB"),
            "process row",
            id="process",
        ),
        pytest.param(
            lambda t: t.replace("  38MiB / 47488MiB", "99999MiB / 47488MiB"), "above its total", id="used"
        ),
        pytest.param(
            lambda t: t[: t.index("|                  |                 0MiB / 65535MiB")], "cut", id="cut"
        ),
        pytest.param(lambda t: "hello\n", "no nvidia-smi", id="nothing"),
        pytest.param(lambda t: t + "x" * 5000, "line over", id="long"),
    ],
)
def test_a_damaged_table_is_a_parse_error_never_fewer_rows(damage: object, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_smi(damage(smi_part(AZURE)))  # type: ignore[operator]


# --- the simulator renders the same bytes ------------------------------------------------------------


def test_the_simulated_table_is_the_real_one_byte_for_byte() -> None:
    gpu = catalog()["H100-94GB"]

    def attrs(name: str, memory: int) -> sim.DeviceAttrs:
        profile = gpu.profile(name)
        assert profile is not None
        return dataclasses.replace(sim.device_attrs(gpu, profile, 95830), memory_mib=memory)

    rendered = sim.render_smi(
        driver="560.35.03",
        gpus=[sim.SmiGpuRow(0, "NVIDIA H100 NVL", "00000001:00:00.0", True, 64, 95830, 31, 62, 400)],
        devices=[
            sim.SmiDeviceRow(0, 1, 0, 0, 38, attrs("3g.47gb", 47488)),
            sim.SmiDeviceRow(0, 5, 0, 1, 13, attrs("1g.24gb", 22144)),
            sim.SmiDeviceRow(0, 13, 0, 2, 13, attrs("1g.12gb", 11008)),
        ],
    )
    assert rendered.split("\n", 1)[1] == smi_part(AZURE)
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}", rendered.split("\n", 1)[0])


def test_device_attributes_are_the_real_ones() -> None:
    nvl = catalog()["H100-94GB"]
    for name, memory, sm in [("3g.47gb", 47488, 60), ("1g.24gb", 22144, 26), ("1g.12gb", 11008, 16)]:
        profile = nvl.profile(name)
        assert profile is not None
        got = sim.device_attrs(nvl, profile, 95830)
        assert (got.memory_mib, got.sm) == (memory, sm)  # -lgip GiB -> the table's MiB
    h100 = catalog()["H100-80GB"]
    pcie = h100.profile("1g.10gb")
    assert pcie is not None and round(9.62 * 1024 / 128) * 128 == 9856  # the R525 table's 1g.10gb
    assert sim.device_attrs(h100, pcie, 81559).memory_mib == 9984  # GFD's label on the SXM (R550)


def test_gi_ids_are_the_drivers() -> None:
    # Every real -lgi / MIG devices table at hand: (GPU, layout) -> the GI IDs the driver gave.
    nvl = catalog()["H100-94GB"]
    placed = check_layout(nvl, ["3g.47gb", "1g.24gb", "1g.12gb"]).placement  # the Azure -cgi 9,15,19
    assert [sim.gi_id(8, nvl.profile(n).placement_size, s) for n, s in placed] == [1, 5, 13]  # type: ignore[union-attr]
    lgi = re.findall(r"MIG (\S+)\s+\d+\s+(\d+)\s+(\d+):(\d+)", read(SCALEWAY_CGI))
    assert [(int(gi), sim.gi_id(8, int(size), int(start))) for _, gi, start, size in lgi] == [
        (7, 7),
        (8, 8),
        (9, 9),
        (2, 2),
    ]
    a30 = re.findall(r"MIG (\S+)\s+\d+\s+(\d+)\s+(\d+):(\d+)", read(A30))
    assert [(int(gi), sim.gi_id(4, int(size), int(start))) for _, gi, start, size in a30] == [
        (3, 3),
        (4, 4),
        (5, 5),
        (6, 6),
    ]


def test_list_lines_are_nvidias() -> None:
    lines = read(LIST_MIXED).splitlines()
    gpu = re.fullmatch(r"GPU 0: (.+) \(UUID: (\S+)\)", lines[0])
    assert gpu and sim.list_line(0, gpu.group(1), gpu.group(2)) == lines[0] + "\n"
    for index, line in enumerate(lines[1:]):
        m = re.fullmatch(r"  MIG (\S+)\s+Device\s+\d+: \(UUID: (\S+)\)", line)
        assert m and sim.mig_list_line(m.group(1), index, m.group(2)) == line + "\n"


def test_instances_sort_by_gi_and_refuse_what_cannot_be_held() -> None:
    h100 = catalog()["H100-80GB"]
    made = sim.instances(h100, 3, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, salt="s")
    assert [(i.profile, i.start, i.gi) for i in made] == [
        ("3g.40gb", 4, 2),
        ("2g.20gb", 0, 3),
        ("1g.10gb", 2, 9),
        ("1g.10gb", 3, 10),
    ]
    assert len({i.uuid for i in made}) == 4 and all(i.gpu == 3 for i in made)
    assert sim.instances(h100, 0, {"1g.10gb": 8}, salt="s") == []
