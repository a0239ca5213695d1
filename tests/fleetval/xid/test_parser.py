"""parse_xid / scan_xid_file against every real Xid log in tests/fixtures/xid (SOURCES.md there),
plus the line formats the driver source documents and the streaming scanner's chunk edges."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleetval.errors import ParseError
from fleetval.xid.parser import (
    XidEvent,
    normalize_pci,
    parse_xid,
    scan_xid_file,
    xid_log_to_json,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "xid"
CATALOGS = {"xid-catalog-mapping-nvsentinel.csv", "xid-catalog-nvidia-docs-selected-rows.txt"}
UUID_4E = "GPU-4e391288-897c-ba5d-6944-dfbea55ebcfa"
UUID_8A = "GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d"
UNK = "'<unknown>'"


def read(name: str) -> str:
    return (FIXTURES / name).read_bytes().decode("utf-8")


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


# (line_no, kind, xid, pci, gpu_uuid, pid, process, caused_by, timestamp)
Row = tuple[int, str, int | None, str | None, str | None, int | None, str | None, int | None, str | None]

EXPECTED: dict[str, list[Row]] = {
    "device-plugin-xid69-critical-device-marked-unhealthy-k8s-device-plugin-issue189.log": [
        (1, "device_plugin", 69, None, "GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8", None, None, None,
         "2020/08/10 19:09:42"),
    ],
    "fallen-off-bus-without-xid-dmesg-570-nvsentinel-issue155.log": [
        (1, "fell_off_bus", 79, "0000:b3:00", None, None, None, None, "1843.308145"),
    ],
    "xid13-xid109-sm-warp-exception-ctx-switch-timeout-gpud-pr46.log": [
        (2, "xid", 13, "0000:cb:00", None, None, None, None, "Fri Aug 30 11:43:09 2024"),
        (3, "xid", 13, "0000:cb:00", None, None, None, None, "Fri Aug 30 11:43:09 2024"),
        (4, "xid", 13, "0000:cb:00", None, None, None, None, "Fri Aug 30 11:43:09 2024"),
        (5, "xid", 109, "0000:cb:00", None, 1797828, "pt_main_thread", None, "Fri Aug 30 11:43:14 2024"),
    ],
    "xid145-149-nvlink5-kmsg-inputs-gpud-pr1174.log": [
        (1, "xid", 149, "0019:01:00", None, None, None, None, None),
        (2, "xid", 149, "0000:00:00", None, None, None, None, None),
        (3, "xid", 145, "0018:01:00", None, None, None, None, None),
    ],
    "xid149-154-nvlink5-netir-recovery-action-gb200-gpud-testcases.log": [
        (1, "xid", 149, "0009:01:00", None, None, None, None, "171167.620236"),
        (2, "xid", 154, "0009:01:00", None, None, None, None, "171167.621162"),
        (3, "xid", 149, "0008:01:00", None, None, None, None, "171167.630899"),
        (4, "xid", 154, "0019:01:00", None, None, None, None, "171167.897562"),
        (5, "xid", 149, "0009:01:00", None, None, None, None, "171167.969026"),
        (6, "xid", 149, "0009:01:00", None, None, None, None, "171168.109293"),
        (7, "xid", 149, "0008:01:00", None, None, None, None, "171168.409446"),
        (8, "xid", 154, "0018:01:00", None, None, None, None, "171168.537473"),
        (9, "xid", 154, "0008:01:00", None, None, None, None, "171168.601459"),
    ],
    "xid31-mmu-fault-format-variants-issues.log": [
        (5, "xid", 31, "0000:01:00", UUID_4E, 13705, "UnrealEditor", None, "365.969681"),
        (7, "xid", 31, "0000:0c:00", None, 11461, None, None, None),
        (10, "xid", 31, "0000:01:00", UUID_8A, None, None, None, "31543.449443"),
        (12, "xid", 13, "0000:01:00", UUID_8A, None, None, None, "31609.615230"),
        (13, "xid", 13, "0000:01:00", UUID_8A, None, None, None, "31609.615231"),
        (14, "xid", 13, "0000:01:00", UUID_8A, None, None, None, "31609.615232"),
        (15, "xid", 13, "0000:01:00", UUID_8A, None, None, None, "31609.615374"),
        (16, "xid", 32, "0000:01:00", UUID_8A, None, None, None, "31609.615516"),
    ],
    "xid32-xid31-legacy-2015-format-channel-id-engmask-bumblebee-issue677.log": [
        (1, "xid", 32, "0000:01:00", None, None, None, None, "24128.828315"),
        (2, "xid", 32, "0000:01:00", None, None, None, None, "24128.828608"),
        (3, "xid", 31, "0000:01:00", None, None, None, None, "24128.834365"),
    ],
    "xid45-burst-then-hung-task-state-D-gpud-pr117-excerpt.log": [
        (n, "xid", 45, "0000:61:00", None, 1496200, "distprovers-gpu", None, "Sat Oct 12 18:35:32 2024")
        for n in range(1, 7)
    ],
    "xid48-dbe-xid64-page-retirement-rminitadapter-failed-gpu-operator-issue1146.log": [
        (4, "xid", 48, "0000:07:00", None, None, None, None, "Dec  2 11:38:47"),
        (5, "xid", 64, "0000:07:00", None, None, None, None, "Dec  2 11:38:47"),
    ],
    "xid63-row-remapper-a100-mlengineering.log": [
        (1, "xid", 63, "0000:10:1c", None, 1896, None, None, None),
    ],
    "xid74-nvlink-fatal-message-format-nvsentinel-design-doc.log": [
        (1, "xid", 74, "0003:00:00", None, None, None, None, "449410.332316"),
    ],
    "xid79-fallen-off-bus-variants-gpud-testcases.log": [
        (1, "xid", 79, "0000:05:00", None, None, None, None, "111111111.111"),
        (2, "xid", 79, "0000:01:00", None, None, None, None, None),
        (3, "fell_off_bus", 79, "0000:18:00", None, None, None, None, None),
        (6, "fell_off_bus", 79, "0000:29:00", None, None, None, None, None),
        (7, "xid", 14, "0000:03:00", None, None, None, None, "..."),
    ],
    "xid94-95-contained-uncontained-format-examples-nvidia-driver-source.txt": [
        (3, "xid", 94, "0000:01:00", None, 7194, None, None, None),
        (6, "xid", 94, "0000:01:00", None, 7062, None, None, None),
        (9, "xid", 95, "0000:01:00", None, 7062, None, None, None),
    ],
}  # fmt: skip


def row(e: XidEvent) -> Row:
    return (e.line_no, e.kind, e.xid, e.pci, e.gpu_uuid, e.pid, e.process, e.caused_by, e.timestamp)


def test_every_log_fixture_has_expectations() -> None:
    logs = {p.name for p in FIXTURES.iterdir() if p.suffix in {".log", ".txt", ".csv"}} - CATALOGS
    assert logs == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_events(name: str) -> None:
    assert [row(e) for e in parse_xid(read(name))] == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scan_equals_parse_on_fixture(name: str) -> None:
    assert tuple(scan_xid_file(FIXTURES / name)) == parse_xid(read(name))


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 257, 4096])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scan_chunk_edges(name: str, chunk_size: int) -> None:
    """Tiny chunks force lines across chunk edges and buffer growth; nothing may change."""
    assert tuple(scan_xid_file(FIXTURES / name, chunk_size=chunk_size)) == parse_xid(read(name))


def test_messages_and_details() -> None:
    by_line = {
        e.line_no: e
        for e in parse_xid(read("xid13-xid109-sm-warp-exception-ctx-switch-timeout-gpud-pr46.log"))
    }
    assert by_line[2].message == (
        "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
    )
    assert by_line[5].message == "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"
    assert by_line[5].epoch_s == utc(2024, 8, 30, 11, 43, 14)
    assert by_line[5].uptime_s is None

    legacy = parse_xid(read("xid32-xid31-legacy-2015-format-channel-id-engmask-bumblebee-issue677.log"))
    assert legacy[0].message == "Channel ID 00000000 intr 00004000"
    assert legacy[2].message == "Ch 00000003, engmask 00000101, intr 10000000"
    assert legacy[2].uptime_s == pytest.approx(24128.834365)


def test_syslog_prefix_host_and_no_year() -> None:
    dbe = parse_xid(read("xid48-dbe-xid64-page-retirement-rminitadapter-failed-gpu-operator-issue1146.log"))[
        0
    ]
    assert (dbe.host, dbe.epoch_s, dbe.uptime_s) == ("worker4", None, pytest.approx(219.470994))
    assert dbe.message.startswith("An uncorrectable double bit error (DBE) has been detected on GPU")


def test_multiline_fell_off_bus() -> None:
    (ev,) = parse_xid(read("fallen-off-bus-without-xid-dmesg-570-nvsentinel-issue155.log"))
    assert ev.inferred and ev.uptime_s == pytest.approx(1843.308145)
    assert ev.message == (
        "The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has "
        "fallen off the bus and is not responding to commands."
    )


def test_recovery_action_and_containment() -> None:
    events = parse_xid(read("xid149-154-nvlink5-netir-recovery-action-gb200-gpud-testcases.log"))
    assert [e.recovery_action for e in events if e.xid == 154] == [
        "Drain and Reset",
        "GPU Reset Required",
        "GPU Reset Required",
        "GPU Reset Required",
    ]
    cont = parse_xid(read("xid94-95-contained-uncontained-format-examples-nvidia-driver-source.txt"))
    assert [(e.containment, e.rst, e.d_rst, e.gpu_instance) for e in cont] == [
        ("contained", False, False, 5),
        ("contained", False, False, None),
        ("uncontained", True, False, None),
    ]


# Formats from the driver source (kernel_rc.c krcReportXid): " caused by previous Xid %d" after the
# message, and "PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u" attribution.
def test_caused_by_suffix() -> None:
    text = (
        "[171168.902112] NVRM: Xid (PCI:0009:01:00): 45, pid=81234, name=python3, "
        "Ch 0000000a caused by previous Xid 149\n"
    )
    (ev,) = parse_xid(text)
    assert (ev.xid, ev.caused_by, ev.pid, ev.process) == (45, 149, 81234, "python3")
    assert ev.message == "Ch 0000000a caused by previous Xid 149"


def test_mig_compute_instance_attribution() -> None:
    (ev,) = parse_xid("NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01): 94, pid=7194, name=x, Contained: ...")
    assert (ev.pci, ev.gpu_instance, ev.compute_instance, ev.pid) == ("0000:01:00", 5, 1, 7194)


@pytest.mark.parametrize(
    ("line", "timestamp", "epoch_s", "uptime_s", "host"),
    [
        ("[ 1234.567890] NVRM: Xid", "1234.567890", None, 1234.56789, None),
        ("4,1234,5678901234,-;NVRM: Xid", "5678901234", None, 5678.901234, None),
        ("[Sat Oct  5 08:01:02 2024] NVRM: Xid", "Sat Oct  5 08:01:02 2024", utc(2024, 10, 5, 8, 1, 2), None,
         None),
        ("2024-10-12T18:35:32.500000+00:00 gpu-07 kernel: NVRM: Xid", "2024-10-12T18:35:32.500000+00:00",
         utc(2024, 10, 12, 18, 35, 32) + 0.5, None, "gpu-07"),
        ("2024-10-12T20:35:32+0200 gpu-07 kernel: NVRM: Xid", "2024-10-12T20:35:32+0200",
         utc(2024, 10, 12, 18, 35, 32), None, "gpu-07"),
        ("2024-10-12T18:35:32,123456+00:00 NVRM: Xid", "2024-10-12T18:35:32,123456+00:00",
         utc(2024, 10, 12, 18, 35, 32) + 0.123456, None, None),
        ("Oct 12 18:35:32 gpu-07 kernel: NVRM: Xid", "Oct 12 18:35:32", None, None, "gpu-07"),
        ("Oct 12 18:35:32.123456 gpu-07 kernel: [ 9.5] NVRM: Xid", "Oct 12 18:35:32.123456", None, 9.5,
         "gpu-07"),
        ("r01-n03: [   12.000001] NVRM: Xid", "12.000001", None, 12.000001, "r01-n03"),
        ("r01-n03: Oct 12 18:35:32 gpu-07 kernel: NVRM: Xid", "Oct 12 18:35:32", None, None, "r01-n03"),
        ("kernel: NVRM: Xid", None, None, None, None),
        ("0: [ 5.000000] NVRM: Xid", "5.000000", None, 5.0, None),
        ("NVRM: Xid", None, None, None, None),
    ],
    ids=["kmsg", "dev-kmsg", "dmesg-T", "journal-iso", "iso-offset", "dmesg-iso", "syslog", "syslog-precise",
         "pdsh", "pdsh-syslog", "journal-cat", "srun", "bare"],
)  # fmt: skip
def test_timestamp_and_host_prefixes(
    line: str, timestamp: str | None, epoch_s: float | None, uptime_s: float | None, host: str | None
) -> None:
    (ev,) = parse_xid(
        line + " (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    assert (ev.xid, ev.pci, ev.pid, ev.process) == (79, "0000:3b:00", None, None)
    assert ev.timestamp == timestamp
    assert ev.epoch_s == (pytest.approx(epoch_s) if epoch_s is not None else None)
    assert ev.uptime_s == (pytest.approx(uptime_s) if uptime_s is not None else None)
    assert ev.host == host


@pytest.mark.parametrize(
    "line",
    [
        "[ 12.0] NVRM: Xid (PCI:0000:3b",
        "[ 12.0] NVRM: Xid (PCI:0000:3b:00): ",
        "[ 12.0] NVRM: Xid (PCI:0000:3b:00) 79, GPU has fallen off the bus.",
        "[ 12.0] NVRM: Xid: something new",
    ],
    ids=["cut-in-pci", "cut-before-number", "no-colon", "new-shape"],
)
def test_unreadable_xid_line_is_an_event(line: str) -> None:
    (ev,) = parse_xid(f"[ 11.0] NVRM: GPU at PCI:0000:3b:00: GPU-aa\n{line}\n")
    assert (ev.kind, ev.xid, ev.line_no, ev.uptime_s) == ("unreadable", None, 2, 12.0)
    assert ev.message.startswith("Xid")
    if "0000:3b:00" in line:
        assert (ev.pci, ev.gpu_uuid) == ("0000:3b:00", "GPU-aa")


def test_non_xid_lines_are_ignored() -> None:
    text = read("xid48-dbe-xid64-page-retirement-rminitadapter-failed-gpu-operator-issue1146.log")
    assert all(e.line_no in (4, 5) for e in parse_xid(text))
    assert (
        parse_xid("[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.158.01\nXid 79 mentioned\n")
        == ()
    )


def test_broken_multiline_message_is_unreadable_not_dropped() -> None:
    # Was: no event. A message about a GPU that does not end in "fallen off the bus" (interrupted
    # here; or "is not supported by the driver") is no evidence of health: inconclusive. So is a
    # later line of that message out of its sequence.
    text = (
        "NVRM: The NVIDIA GPU 0000:18:00.0\n"
        "[ 5.0] usb 1-1: new device\n"
        "NVRM: installed in this system is not supported\n"
    )
    assert [(e.kind, e.xid, e.pci, e.line_no) for e in parse_xid(text)] == [
        ("unreadable", None, "0000:18:00", 1),
        ("unreadable", None, None, 3),
    ]
    lone = parse_xid("NVRM: fallen off the bus and is not responding to commands.\n")
    assert [(e.kind, e.xid, e.pci) for e in lone] == [("fell_off_bus", 79, None)]


def test_uuid_map_is_per_host_and_backfilled() -> None:
    text = (
        "a: [ 1.0] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\n"
        "a: [ 2.0] NVRM: GPU at PCI:0000:3b:00: GPU-aaaa\n"
        "b: [ 3.0] NVRM: GPU at PCI:0000:3b:00: GPU-bbbb\n"
        "b: [ 4.0] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\n"
    )
    assert [(e.host, e.gpu_uuid) for e in parse_xid(text)] == [("a", "GPU-aaaa"), ("b", "GPU-bbbb")]


def test_scan_streams_without_backfill(tmp_path: Path) -> None:
    text = "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 13, x\n[ 2.0] NVRM: GPU at PCI:0000:3b:00: GPU-aaaa\n"
    path = tmp_path / "k.log"
    path.write_text(text)
    assert [e.gpu_uuid for e in scan_xid_file(path)] == [None]
    assert [e.gpu_uuid for e in parse_xid(text)] == ["GPU-aaaa"]


def test_scan_odd_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(ParseError, match="no readable kernel-log line"):  # was: no events (a pass)
        list(scan_xid_file(empty))

    raw = (
        b"noise \xff\xfe line\r\n"
        + b"x" * 5000
        + b"\r\n[ 7.0] NVRM: Xid (PCI:0000:3B:00): 48, pid='<unknown>', name=<unknown>, DBE \xff\r\n"
        + b"[ 8.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."  # no final newline
    )
    path = tmp_path / "odd.log"
    path.write_bytes(raw)
    text = raw.decode("utf-8", errors="replace")
    for chunk in (16, 1 << 20):
        events = tuple(scan_xid_file(path, chunk_size=chunk))
        assert events == parse_xid(text)
        assert [(e.line_no, e.xid, e.pci) for e in events] == [(3, 48, "0000:3b:00"), (4, 79, "0000:3b:00")]
        assert events[0].message == "DBE \ufffd"


def test_to_json_contract() -> None:
    events = parse_xid(read("xid13-xid109-sm-warp-exception-ctx-switch-timeout-gpud-pr46.log"))
    doc = xid_log_to_json(events)
    first = doc["events"][3]
    contract = ["xid", "pci", "gpu_uuid", "pid", "process", "caused_by", "timestamp", "message"]
    assert list(first)[: len(contract)] == contract
    assert (first["xid"], first["pid"], first["process"]) == (109, 1797828, "pt_main_thread")
    assert [XidEvent.from_json(e) for e in doc["events"]] == list(events)


def test_normalize_pci() -> None:
    assert normalize_pci("PCI:0000:3B:00") == "0000:3b:00"
    assert normalize_pci("0000:b3:00.0") == "0000:b3:00"
    with pytest.raises(ValueError, match="not a PCI address"):
        normalize_pci("3b:00.0")


# ---------------------------------------------------------------------------------------------
# No silent pass: what an attacker found (each case was dropped, passed or crashed before)

DBE = "NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error"
LINK = "NVRM: Xid (PCI:0000:3b:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)"


def kinds(text: str) -> list[tuple[int, str, int | None]]:
    return [(e.line_no, e.kind, e.xid) for e in parse_xid(text)]


def test_every_nvrm_tag_of_a_line_is_read() -> None:
    assert kinds(f"[ 5.000000] NVRM: {DBE}\n") == [(1, "xid", 48)]
    assert kinds("[ 5.000000] NVRM: NVRM: Xid (PCI:0000:3b:00): 48, x\n") == [(1, "xid", 48)]
    (ev,) = parse_xid("[ 5.000000] NVRM: NVRM: Xid (PCI:0000:3b:00): 48, x\n")
    assert ev.uptime_s == 5.0  # the line's stamp


def test_two_records_joined_on_one_line_are_both_read_each_with_its_stamp() -> None:
    text = f"[ 5.000000] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception [ 6.500000] {LINK}\n"
    events = parse_xid(text)
    assert [(e.line_no, e.xid, e.uptime_s) for e in events] == [(1, 13, 5.0), (1, 145, 6.5)]
    assert tuple(scan_xid_file_text(text)) == events


def scan_xid_file_text(text: str, chunk_size: int = 64) -> tuple[XidEvent, ...]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.log"
        path.write_bytes(text.encode())
        return tuple(scan_xid_file(path, chunk_size=chunk_size))


@pytest.mark.parametrize("end", ["\r", "\r\n", "\n"], ids=["cr", "crlf", "lf"])
def test_every_line_end_ends_a_line(end: str) -> None:
    text = end.join(["[ 1.000000] usb 1-1: new device", f"[ 5.000000] {DBE}", f"[ 6.000000] {LINK}", ""])
    assert kinds(text) == [(2, "xid", 48), (3, "xid", 145)]
    for chunk in (7, 64, 1 << 20):
        assert scan_xid_file_text(text, chunk) == parse_xid(text)


@pytest.mark.parametrize(
    "text",
    ["", " ", "\n", "\x00" * 16, "\ufffd" * 8, "\x8f\x03\xff garbage \x7f", "[0] [0] [0]\n", "NVRM: " * 50,
     "45,ROBUST_CHANNEL_PREEMPTIVE_REMOVAL,WORKFLOW_XID_45,NONFATAL\n", "a" * 40_000 + "\n"],
    ids=["empty", "space", "newline", "nul", "replacement", "binary", "brackets", "tags", "table", "long"],
)  # fmt: skip
def test_no_readable_kernel_log_is_a_parse_error_not_no_events(text: str) -> None:
    with pytest.raises(ParseError, match="no readable kernel-log line"):
        parse_xid(text)
    with pytest.raises(ParseError, match="no readable kernel-log line"):
        scan_xid_file_text(text)


def test_a_readable_log_without_xid_is_no_events() -> None:
    text = read("xid45-burst-then-hung-task-state-D-gpud-pr117-excerpt.log").split("\n", 6)[6]
    assert parse_xid(text) == () == scan_xid_file_text(text)
    assert parse_xid("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.158.01\n") == ()


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: Xid (PCI:0000:3b:00): 13, pid=" + "9" * 5000 + ", name=x, Graphics Exception",
        "NVRM: Xid (PCI:0000:3b:00): " + "9" * 5000 + ", Graphics Exception",
        "NVRM: Xid (PCI:0000:3b:00 GPU-I:" + "9" * 5000 + "): 94, pid=1, Contained: CE",
        "4,1234," + "9" * 5000 + ",-;NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
        "NVRM: Xid (PCI:0000:3b:00): 45, Ch 0000000a caused by previous Xid " + "9" * 5000,
        "2020/08/10 19:09:42 XidCriticalError: Xid=" + "9" * 5000 + " on Device=GPU-1, the device",
        "[ " + "9" * 400 + ".5] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
        "[Fri Aug 30 11:43:09 0000] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
        "0001-01-01T00:00:00+23:59 NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
        "NVRM: Xid (PCI:0000:3b:00): \u0661\u0663, Graphics Exception",
        "NVRM: Xid (PCI:0000:3b:00): \u00b2, Graphics Exception",
    ],
    ids=["pid", "xid", "gpu-instance", "kmsg-usec", "caused-by", "plugin", "uptime", "year-0", "year-1",
         "arabic-indic", "superscript"],
)  # fmt: skip
def test_odd_numbers_never_raise_anything_but_parse_error_nor_read_as_an_xid(line: str) -> None:
    events = parse_xid(line + "\n")
    assert events and all(isinstance(e, XidEvent) for e in events)
    for e in events:
        assert e.xid is None or e.xid == 13  # a bad number is unreadable, never a valid Xid
        assert e.uptime_s is None or e.uptime_s < 1e13
    if "\u0661" in line or "\u00b2" in line:
        assert [e.kind for e in events] == ["unreadable"]


@pytest.mark.parametrize(
    "after", ["", "\n", "\n[ 9.000000] usb 1-1: new device\n"], ids=["cut", "lf", "more"]
)
def test_a_record_cut_inside_its_xid_number_is_unreadable_not_a_smaller_xid(after: str) -> None:
    """145 cut to 14 was read as Xid 14 (ignore: a warn) instead of 145 (cordon)."""
    text = f"[ 1.000000] NVRM: GPU at PCI:0000:3b:00: GPU-aa\n[ 5.000000] {LINK[:30]}{after}"
    assert LINK[:30].endswith("): 14")
    assert kinds(text)[0] == (2, "unreadable", None)
    assert kinds(f"[ 5.000000] {LINK[:31]}\n") == [(1, "unreadable", None)]  # "145" without its ","
    assert kinds(f"[ 5.000000] {LINK[:32]}\n") == [(1, "xid", 145)]  # "145," is the whole number


def test_caused_by_at_the_end_of_a_cut_text_is_unreadable() -> None:
    line = "[ 5.000000] NVRM: Xid (PCI:0009:01:00): 45, pid=1, name=p, Ch 0000000a caused by previous Xid 14"
    assert [(e.kind, e.caused_by) for e in parse_xid(line + "\n")] == [("xid", 14)]  # the line ended
    assert [(e.kind, e.caused_by) for e in parse_xid(line)] == [("unreadable", None)]  # maybe "149"
    assert [(e.kind, e.caused_by) for e in parse_xid(line + "9x\n")] == [("unreadable", None)]


def test_a_cut_last_line_is_unreadable_unless_it_holds_a_record() -> None:
    head = f"[ 1.000000] usb 1-1: new device\n[ 5.000000] {DBE}\n"
    assert kinds(head) == [(2, "xid", 48)]
    assert kinds(head + "[ 6.000000] NV") == [(2, "xid", 48), (3, "unreadable", None)]
    assert kinds(head + "[ 6.000000] NVRM: GPU at PCI:0000:3b:00: GPU-a") == [
        (2, "xid", 48),
        (3, "unreadable", None),
    ]
    assert kinds(head + f"[ 6.000000] {DBE[:60]}") == [(2, "xid", 48), (3, "xid", 48)]  # "48," is in
    for text in (head + "[ 6.000000] NV", head + f"[ 6.000000] {DBE[:60]}"):
        assert scan_xid_file_text(text) == parse_xid(text)


@pytest.mark.parametrize(
    "line",
    [
        "[ 5.000000] NVRx: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, DBE",
        "[ 5.000000] NVRM: Xud (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, DBE",
        "[ 5.000000] NVRM: Xid (PCI:0000:3b:00) 48, pid='<unknown>', name=<unknown>, DBE",
        "[ 5.000000] NVRM: \x93Xid (0000:3b:00): 48, DBE",
        "[ 5.000000] NVRM: Xid (PCI:0000:3b:00): 4x8, DBE",
        "[ 5.000000] NVRM: GPU has fallxn off the bus.",
        "[ 5.000000] NVRM: The NVIDIA PGU 0000:3b:00.0",
        "[ 5.000000] NVRM: (PCI ID: 10de:26b5) installed in this system has",
        "2020/08/10 19:09:42 XidCriticalErorr: Xid=69 on Device=GPU-7540a9b3, the device will go unhealthy.",
        "2020/08/10 19:09:42 XidCriticalError: Xdi=69 on Device=GPU-7540a9b3, the device will go unhealthy.",
        "2020/08/10 19:09:42 XidCriticalError: Xid=69 on Devcie=GPU-7540a9b3, the device will go unhealthy.",
        "[ 4.000000] NVRM: GPU at PCI:0000:3b:00: GPU-aa [ 5.000000] NVRx: Xid (PCI:0000:3b:00): 48, DBE",
    ],
    ids=["tag", "keyword", "colon", "junk-before-keyword", "number", "fell-off-word", "gpu-message-start",
         "gpu-message-middle", "plugin-key", "plugin-xid", "plugin-device", "joined-damaged-tag"],
)  # fmt: skip
def test_a_damaged_record_is_unreadable_never_dropped(line: str) -> None:
    assert [e.kind for e in parse_xid(line + "\n")] == ["unreadable"]
    assert scan_xid_file_text(line + "\n") == parse_xid(line + "\n")


@pytest.mark.parametrize(
    "line",
    [
        "[449410.332316] VNRM: iXd (CPI:0003:00:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal",
        "[449410.332316] VNRM: iXd (PCI:0003:00:00): nan, pid='<unknown>', name=<unknown>, NVLink: fatal",
        "2020/08/10 19:09:42 iXdCriticalError: iXd=69 on Devcie=GPU-7540a9b3, the device will go unhealthy.",
        "[ 5.000000] NVRx: GPU has fallen off the bux.",
    ],
    ids=["tag-keyword-attribution", "tag-keyword-number", "plugin-three-words", "fell-off-tag-and-word"],
)
def test_a_record_with_tag_and_keyword_damaged_is_still_unreadable_for_parse_xid(line: str) -> None:
    """Beyond the scan's two markers: parse_xid looks at every line (the scan, for speed, does not)."""
    text = f"[ 1.000000] usb 1-1: new device\n{line}\n"
    assert [(e.line_no, e.kind) for e in parse_xid(text)] == [(2, "unreadable")]
    assert parse_xid(text, every_line=False) == () == scan_xid_file_text(text)


def test_device_plugin_formats_from_its_source() -> None:
    """k8s-device-plugin's log formats (internal/rm/health.go and older plugin sources)."""
    lines = [
        "XidCriticalError: Xid=48 on Device=GPU-aa; marking device as unhealthy.",
        "XidCriticalError: Xid=79 on GPU=GPU-bb, the device will go unhealthy.",
        "XidCriticalError: Xid=95, All devices will go unhealthy.",
        "Skipping non-nvmlEventTypeXidCriticalError event: {Device:{Handle:0x1} EventType:8}",
    ]
    events = parse_xid("".join(f"2024/10/12 18:35:32 {line}\n" for line in lines))
    assert [(e.kind, e.xid, e.gpu_uuid) for e in events] == [
        ("device_plugin", 48, "GPU-aa"),
        ("device_plugin", 79, "GPU-bb"),
        ("device_plugin", 95, None),
    ]


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_scan_counts_lines_of_a_big_file_as_parse_does(tmp_path: Path, end: str) -> None:
    """Chunks of a MiB (lines counted in bulk) and line ends of every kind: same line numbers."""
    noise = "[ 1.000000] IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready"
    lines = [noise] * 30_000
    lines[12_345] = f"[ 2.000000] {DBE}"
    lines[29_000] = f"[ 3.000000] {LINK}"
    text = end.join(lines) + end
    path = tmp_path / "big.log"
    path.write_bytes(text.encode())
    for chunk in (1 << 20, 100_003):
        events = tuple(scan_xid_file(path, chunk_size=chunk))
        assert events == parse_xid(text)
        assert [(e.line_no, e.xid) for e in events] == [(12_346, 48), (29_001, 145)]
