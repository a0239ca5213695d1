"""render_xid_lines: real line shapes and texts, and render → parse → judge round trips."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetval.xid.judge import judge_xid
from fleetval.xid.parser import parse_xid
from fleetval.xid.simulated import MESSAGES, STYLES, render_xid_lines
from fleetval.xid.table import XID_TABLE, NodeAction

FIXTURES = Path(__file__).parents[2] / "fixtures" / "xid"
UUID = "GPU-5f3a0000-1111-2222-3333-444455556666"
T0 = 1_733_139_527.25  # 2024-12-02T11:38:47.25Z
NODE = "r01-n05"

# One real line per style, from the fixtures, with the prefix shape each style must reproduce.
SHAPES = {
    "kmsg": r"\[\s*\d+\.\d{6}\] NVRM: ",
    "dmesg-T": r"\[(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\] NVRM: ",
    "syslog": r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: \[\s*\d+\.\d{6}\] NVRM: ",
    "iso": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00 \S+ kernel: NVRM: ",
}
REAL = {
    "kmsg": "xid74-nvlink-fatal-message-format-nvsentinel-design-doc.log",
    "dmesg-T": "xid45-burst-then-hung-task-state-D-gpud-pr117-excerpt.log",
    "syslog": "xid48-dbe-xid64-page-retirement-rminitadapter-failed-gpu-operator-issue1146.log",
}


def all_fixture_text() -> str:
    paths = sorted([*FIXTURES.glob("*.log"), *FIXTURES.glob("*.txt")])
    return "\n".join(p.read_bytes().decode("utf-8") for p in paths)


@pytest.mark.parametrize("code", sorted(MESSAGES))
def test_messages_are_real_captures(code: int) -> None:
    assert MESSAGES[code] in all_fixture_text()


@pytest.mark.parametrize("style", sorted(REAL))
def test_prefix_shape_matches_the_real_fixture(style: str) -> None:
    real = (FIXTURES / REAL[style]).read_text()
    assert re.search("^" + SHAPES[style], real, re.M)


@pytest.mark.parametrize("style", STYLES)
def test_line_shapes(style: str) -> None:
    text = render_xid_lines(
        code=79, gpu_pci="0000:3b:00", gpu_uuid=UUID, count=2, start_epoch_s=T0, style=style, host=NODE
    )
    lines = text.splitlines()
    assert text.endswith("\n") and len(lines) == 3
    assert all(re.match(SHAPES[style], line) for line in lines)
    assert lines[0].endswith(f"NVRM: GPU at PCI:0000:3b:00: {UUID}")
    assert lines[1].endswith(
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("code", [13, 31, 45, 48, 63, 74, 79, 94, 95, 109, 119, 149, 154])
def test_round_trip(style: str, code: int) -> None:
    text = render_xid_lines(
        code=code, gpu_pci="0000:3B:00.0", gpu_uuid=UUID, count=3, start_epoch_s=T0, pid=4242,
        process="pt_main_thread", style=style, host=NODE, interval_s=0.5,
    )  # fmt: skip
    events = parse_xid(text)
    assert [(e.xid, e.pci, e.gpu_uuid, e.pid, e.process, e.kind) for e in events] == [
        (code, "0000:3b:00", UUID, 4242, "pt_main_thread", "xid")
    ] * 3
    if style == "iso":
        assert [e.epoch_s for e in events] == [T0, T0 + 0.5, T0 + 1.0]
    if style == "dmesg-T":
        assert [e.epoch_s for e in events] == [int(T0), int(T0 + 0.5), int(T0 + 1.0)]
    if style in ("kmsg", "syslog"):
        assert [e.uptime_s for e in events] == [3600.0, 3600.5, 3601.0]
        assert all(e.epoch_s is None for e in events)
    if style in ("syslog", "iso"):
        assert {e.host for e in events} == {NODE}

    j = judge_xid(events, node=NODE)
    # One burst on one GPU: the table's node action, no repeat escalation; the rendered Xid 154
    # says "to 0x4 (Drain and Reset)", which cordons.
    expected = NodeAction.CORDON if code == 154 else XID_TABLE.rule_for(code).node_action
    assert j.node_action is expected
    assert {v.subject for v in j.to_verdicts()} == {UUID}


@pytest.mark.parametrize("style", ["kmsg", "dmesg-T", "syslog", "iso"])
def test_repeated_app_faults_round_trip_to_cordon(style: str) -> None:
    """Three Xid 13 crashes an hour apart on one GPU: the repeat rule cordons; two do not."""
    text = render_xid_lines(
        code=13, gpu_pci="0000:3b:00", gpu_uuid=UUID, count=3, start_epoch_s=T0, style=style, interval_s=3600
    )
    j = judge_xid(parse_xid(text), node=NODE)
    assert (j.node_action, j.node_rule_id) == (NodeAction.CORDON, "xid.repeat.app_fault")
    two = render_xid_lines(
        code=13, gpu_pci="0000:3b:00", gpu_uuid=UUID, count=2, start_epoch_s=T0, style=style, interval_s=3600
    )
    assert judge_xid(parse_xid(two), node=NODE).node_action is NodeAction.NONE


def test_45_storm_round_trip() -> None:
    text = "".join(
        render_xid_lines(
            code=45, gpu_pci=f"0000:{bus:02x}:00", gpu_uuid=f"GPU-{bus}", count=200, start_epoch_s=T0,
            pid=7, process="python", style="iso", interval_s=5.0,
        )
        for bus in (0x1B, 0x3B, 0x5B)
    )  # fmt: skip
    j = judge_xid(parse_xid(text), node=NODE)
    assert j.node_action is NodeAction.NONE
    assert len(j.decisions) == 3 * 1  # 200 × 5 s < 1 h: one decision per GPU


def test_caused_by_and_fallback_message() -> None:
    text = render_xid_lines(
        code=45, gpu_pci="0000:3b:00", gpu_uuid=UUID, start_epoch_s=T0, style="iso", caused_by=149
    )
    (ev,) = parse_xid(text)
    assert ev.caused_by == 149 and ev.message == "Ch 0000000a caused by previous Xid 149"
    assert judge_xid([ev], node=NODE).node_action is NodeAction.CORDON

    (unknown,) = parse_xid(render_xid_lines(code=119, gpu_pci="0000:3b:00", gpu_uuid=UUID, start_epoch_s=T0))
    assert unknown.message == "GSP_RPC_TIMEOUT"
    (odd,) = parse_xid(render_xid_lines(code=999, gpu_pci="0000:3b:00", gpu_uuid=UUID, start_epoch_s=T0))
    assert (odd.xid, odd.message) == (999, "Xid 999")


def test_pid_without_process_and_boot_time() -> None:
    text = render_xid_lines(
        code=31, gpu_pci="0000:3b:00", gpu_uuid=UUID, start_epoch_s=T0, pid=12, boot_epoch_s=T0 - 5.0
    )
    (ev,) = parse_xid(text)
    assert (ev.pid, ev.process, ev.uptime_s) == (12, None, 5.0)


def test_deterministic_and_validated() -> None:
    kwargs = {"code": 48, "gpu_pci": "0000:3b:00", "gpu_uuid": UUID, "start_epoch_s": T0}
    assert render_xid_lines(**kwargs) == render_xid_lines(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown style"):
        render_xid_lines(code=48, gpu_pci="0000:3b:00", gpu_uuid=UUID, start_epoch_s=T0, style="json")
    with pytest.raises(ValueError, match="count"):
        render_xid_lines(code=48, gpu_pci="0000:3b:00", gpu_uuid=UUID, start_epoch_s=T0, count=0)
    with pytest.raises(ValueError, match="PCI"):
        render_xid_lines(code=48, gpu_pci="3b", gpu_uuid=UUID, start_epoch_s=T0)
