"""`nvidia-smi` tables with bytes in front of a line, or a line between a row and its border: the
table must not end there and hand back fewer GPUs, MIG devices or processes (a tenant that sees
three MIG devices must never read as one that sees one). Each is a ParseError; the real tables
and a table cut after a complete row still parse."""

from __future__ import annotations

import pytest

from fleetval.errors import ParseError
from fleetval.mig.smi import parse_smi
from tests.fleetval.mig.test_smi import AZURE, SCALEWAY, read, smi_part

R560 = smi_part(AZURE)
MIG_ROW_2 = "|  0    5   0   1  |"
MIG_BAR1_1 = "|                  |                 0MiB / 65535MiB  |           |                       |"
MIG_BORDER = "+------------------+----------------------------------+-----------+-----------------------+"
GPU_ROW = "|   0  NVIDIA H100 NVL                On  |"
PROCESSES = "\n".join(
    [
        "| Processes:                                                                            |",
        "|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |",
        "|        ID   ID                                                             Usage      |",
        "|=======================================================================================|",
        "|    0    1    0      41233      C   python3 train.py                            9210MiB |",
        "|    0    5    0      25384      C   python3 neighbour.py                          26MiB |",
        "+---------------------------------------------------------------------------------------+",
    ]
)
PROCESS_ROW_2 = "|    0    5    0      25384"
# The R560 table with two processes in its Processes table (rows of the R535 layout's widths).
NO_PROCESSES = next(line for line in R560.splitlines() if "No running processes found" in line)
R560_BUSY = R560.replace(NO_PROCESSES, "\n".join(PROCESSES.splitlines()[4:6]))


def damaged(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1
    return text.replace(old, new, 1)


DAMAGED = {
    "two bytes before a MIG device row": damaged(R560, MIG_ROW_2, "\x00\x00" + MIG_ROW_2),
    "the MIG device row's frame replaced": damaged(R560, MIG_ROW_2, "\ufffd" + MIG_ROW_2[1:]),
    "two bytes before a border between MIG devices": damaged(
        R560, MIG_BAR1_1 + "\n" + MIG_BORDER, MIG_BAR1_1 + "\n\x00\x00" + MIG_BORDER
    ),
    "a blank line between a MIG device and its border": damaged(
        R560, MIG_BAR1_1 + "\n" + MIG_BORDER, MIG_BAR1_1 + "\n\n" + MIG_BORDER
    ),
    "a stray line between a MIG device and its border": damaged(
        R560, MIG_BAR1_1 + "\n" + MIG_BORDER, MIG_BAR1_1 + "\nxx\n" + MIG_BORDER
    ),
    "two bytes before the GPU row": damaged(R560, GPU_ROW, "\x00\x00" + GPU_ROW),
    "two bytes before a process row": damaged(PROCESSES, PROCESS_ROW_2, "\x00\x00" + PROCESS_ROW_2),
    "a stray line between process rows": damaged(PROCESSES, PROCESS_ROW_2, "xx\n" + PROCESS_ROW_2),
    "a Processes table without rows": PROCESSES[: PROCESSES.index("|    0    1")] + "\n$ echo done\n",
    # A title or header lost: its rows are no table's, and must not vanish with it.
    "the Processes title damaged": damaged(R560_BUSY, "| Processes:", "| Pr\x00cesses:"),
    "the MIG devices title damaged": damaged(R560, "| MIG devices:", "| MXG devices:"),
    "the GPU table's header damaged": damaged(R560, "| GPU  Name", "| PGU  Name"),
    "the empty Processes table's title damaged": damaged(R560, "| Processes:", "| Processes;"),
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_damage_inside_a_table_is_an_error_not_fewer_rows(name: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_smi(DAMAGED[name])
    assert caught.value.tool == "nvidia-smi"


def test_tables_still_end_where_their_output_ends() -> None:
    assert len(parse_smi(R560).mig_devices) == 3
    assert len(parse_smi(R560 + "\nroot@host:~# exit\n").mig_devices) == 3
    assert len(parse_smi(PROCESSES + "\n\n$ echo done\n").processes) == 2
    assert len(parse_smi(R560_BUSY).processes) == 2
    scaleway = parse_smi(read(SCALEWAY))  # tables between prompts, the last one ends the file
    assert (len(scaleway.gpus), len(scaleway.mig_devices)) == (2, 1)
    cut_after_a_device = R560[: R560.index(MIG_BAR1_1) + len(MIG_BAR1_1)]
    assert len(parse_smi(cut_after_a_device).mig_devices) == 1
    assert len(parse_smi(cut_after_a_device + "\n").mig_devices) == 1
    cut_after_a_process = PROCESSES[: PROCESSES.index("+---")]
    assert len(parse_smi(cut_after_a_process).processes) == 2
