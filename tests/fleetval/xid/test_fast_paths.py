"""The scan's shortcuts read what the full readers read: the one-match syslog/dmesg prefix, the
literal guards before field regexes, the inert-chatter memo and the line numbers counted by numpy.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from fleetval.xid import parser as xp
from fleetval.xid.parser import parse_xid, scan_xid_file

SYSLOG = "Dec  2 11:38:47 r01-n03 kernel: [  219.470994] "
DMESG = "[31543.449440] "


@pytest.mark.parametrize(
    "prefix",
    [
        SYSLOG,
        DMESG,
        "Dec 12 01:02:03 gpu-node.example.com kernel: [1.5] ",
        "Jan  1 00:00:00 worker4 kernel: [123456789012.123456789]",
        "[    0.000001]  ",
    ],
)
def test_the_one_match_prefixes_read_what_every_format_reads(prefix: str) -> None:
    assert xp._SYSLOG_PREFIX.match(prefix) or xp._DMESG_PREFIX.match(prefix)  # the shortcut is taken
    assert xp._parse_prefix(prefix) == xp._parse_prefix_any(prefix)


@pytest.mark.parametrize(
    "prefix",
    [
        "Dec  2 11:38:47.123 r01-n03 kernel: [  219.470994] ",  # fraction: a format of its own
        "Dec  2 11:38:47 2024-12-02T11:38:47Z kernel: [  219.4] ",  # ISO time as host
        "Dec  2 11:38:47 r01 kernel: [  219.4] [Mon Dec  2 11:38:47 2024] ",
        "node7: [  219.470994] ",  # launcher host
        " [  219.470994] ",
        "[Fri Aug 30 11:43:14 2024] ",
        "2024-12-02T11:38:47.123456+00:00 worker4 kernel: [  219.4] ",
    ],
)
def test_other_prefixes_are_left_to_every_format(prefix: str) -> None:
    assert not (xp._SYSLOG_PREFIX.match(prefix) or xp._DMESG_PREFIX.match(prefix))
    assert xp._parse_prefix(prefix) == xp._parse_prefix_any(prefix)


def test_random_syslog_prefixes_agree() -> None:
    rng = random.Random(14)
    alphabet = "abcXYZ019-._:[]/ T"
    for _ in range(2000):
        host = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        up = f"{rng.randint(0, 10**6)}.{rng.randint(0, 999999):06d}"
        prefix = f"{rng.choice(xp._MONTH_NAMES)} {rng.randint(1, 31):2d} 11:38:47 {host} kernel: [{up:>12}] "
        assert xp._parse_prefix(prefix) == xp._parse_prefix_any(prefix), prefix


# Lines where each guarded regex must still fire: a field, a trace in chatter, a repeated body.
LINES = [
    f"{SYSLOG}NVRM: Xid (PCI:0000:1b:00): 45, pid=1, name=x, Ch 0000000a caused by previous Xid 149",
    f"{SYSLOG}NVRM: Xid (PCI:0000:1b:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
    "RST: No, D-RST: Yes",
    f"{DMESG}NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 "
    "(Drain and Reset)",
    f"{SYSLOG}NVRM: GPU Board Serial Number: 1652822012345",
    f"{SYSLOG}NVRM: GPU Board Serial Number: 1652822012345",
    f"{SYSLOG}NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
    f"{SYSLOG}NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
    f"{SYSLOG}NVRM: GPU x (PCI:0000:3b:00): 13, pid='<unknown>', name=<unknown>, damaged",
    f"{SYSLOG}NVRM: GPU info XidCriticalError: Xid=48 on Device=GPU-1, the device will go unhealthy.",
    f"{SYSLOG}NVRM: The NVIDIA GPU 0000:b3:00.0",
    f"{SYSLOG}NVRM: (PCI ID: 10de:26b5) installed in this system has",
    f"{SYSLOG}NVRM: fallen off the bus and is not responding to commands.",
    f"{SYSLOG}NVRM: GPU Board Serial Number: 1652822012345",
]


def test_guarded_fields_and_traces_are_still_read() -> None:
    events = parse_xid("\n".join(LINES) + "\n")
    by_line = {e.line_no: e for e in events}
    assert by_line[1].caused_by == 149
    assert (by_line[2].containment, by_line[2].rst, by_line[2].d_rst) == ("contained", False, True)
    assert by_line[3].recovery_action == "Drain and Reset"
    assert by_line[8].kind == "unreadable"  # a record whose tag is damaged, inside chatter
    assert by_line[9].kind == "device_plugin" and by_line[9].xid == 48
    assert by_line[10].kind == "fell_off_bus"
    assert set(by_line) == {1, 2, 3, 8, 9, 10}  # repeated chatter stays inert


def test_chatter_does_not_hide_a_continuation() -> None:
    """A body remembered as inert is read again inside a multi-line message (there it continues)."""
    text = "\n".join(
        [
            f"{SYSLOG}NVRM: installed chatter",
            f"{SYSLOG}NVRM: GPU Board Serial Number: 1",
            f"{SYSLOG}NVRM: The NVIDIA GPU 0000:b3:00.0",
            f"{SYSLOG}NVRM: GPU Board Serial Number: 1",
            f"{SYSLOG}NVRM: fallen off the bus and is not responding to commands.",
        ]
    )
    (event,) = [e for e in parse_xid(text + "\n") if e.kind == "fell_off_bus"]
    assert "GPU Board Serial Number: 1" in event.message


@pytest.mark.parametrize("chunk_size", [64, 200, 1 << 20])
def test_line_numbers_of_a_dense_log(tmp_path: Path, chunk_size: int) -> None:
    rng = random.Random(3)
    lines = [
        rng.choice(LINES) if rng.random() < 0.3 else f"{SYSLOG}IPv6: eth0: link becomes ready"
        for _ in range(600)
    ]
    text = "\n".join(lines) + "\n"
    path = tmp_path / "kern.log"
    path.write_text(text)
    scanned = tuple(scan_xid_file(path, chunk_size=chunk_size))
    assert scanned == parse_xid(text, every_line=False)
    assert scanned and all(lines[e.line_no - 1].endswith(e.message[-20:]) for e in scanned if e.kind == "xid")
