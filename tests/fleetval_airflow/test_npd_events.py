"""node-problem-detector as the Xid source: its rule matches the kernel lines NVIDIA's driver prints,
and its Events (folded, combined, replayed by client-go's recorder) become one inbox row per
occurrence, never fewer and never twice."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import pytest
from kubernetes import client, config
from sqlalchemy import select

from fleetval.store.models import XidInbox
from fleetval_airflow.triggers.xid_inbox import NPD_REASON, copy_npd_events
from tests.paths import FIXTURES, ROOT

NPD_CONFIG = json.loads((ROOT / "deploy" / "node-problem-detector-xid.json").read_text())
T0 = dt.datetime(2026, 11, 30, 8, 0, 0, tzinfo=dt.UTC)


def _kernel_messages(name: str) -> list[str]:
    """The kernel messages of a fixture without syslog/kmsg prefixes (what NPD's kmsg watcher matches)."""
    text = (FIXTURES / "xid" / name).read_text()
    return [line[line.index("NVRM:") :].strip() for line in text.splitlines() if "NVRM:" in line]


def _matches(message: str) -> bool:
    # NPD anchors a rule's pattern at both ends ("^" + pattern + "\z") against the message.
    [rule] = NPD_CONFIG["rules"]
    return re.fullmatch(rule["pattern"], message) is not None


def test_the_npd_rule_matches_every_xid_format_and_nothing_else() -> None:
    assert NPD_CONFIG["source"] == "fleetval-xid-monitor"  # not kernel-monitor's spam budget
    assert NPD_CONFIG["rules"][0]["reason"] == NPD_REASON
    xid_lines = [
        m
        for name in (
            "xid79-fallen-off-bus-variants-gpud-testcases.log",
            "xid32-xid31-legacy-2015-format-channel-id-engmask-bumblebee-issue677.log",
            "xid48-dbe-xid64-page-retirement-rminitadapter-failed-gpu-operator-issue1146.log",
        )
        for m in _kernel_messages(name)
        if "Xid" in m
    ]
    legacy = [m for m in xid_lines if m.startswith("NVRM: Xid (0000:")]
    assert legacy, "the fixture holds the legacy form without 'PCI:'"
    assert [m for m in xid_lines if not _matches(m)] == []
    for other in (
        "Out of memory: Killed process 1234 (python)",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
    ):
        assert not _matches(other)


def _event(kube: Any, name: str, node: str, message: str, **fields: Any) -> None:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
        "reason": NPD_REASON,
        "message": message,
        "type": "Warning",
        "source": {"component": "fleetval-xid-monitor", "host": node},
        "firstTimestamp": T0.isoformat().replace("+00:00", "Z"),
        "lastTimestamp": T0.isoformat().replace("+00:00", "Z"),
        "count": 1,
        **fields,
    }
    kube.core.create_namespaced_event("default", body)


def _rows(kube: Any) -> list[tuple[str, str, str]]:
    with kube.store.engine.connect() as conn:
        rows = conn.execute(select(XidInbox.source_key, XidInbox.node, XidInbox.line)).all()
    return sorted((str(k), str(n), str(line)) for k, n, line in rows)


@pytest.mark.postgres
def test_folded_combined_and_replayed_events_become_one_row_per_occurrence(sim_kube: Any) -> None:
    kube = sim_kube()
    product = client.CoreV1Api(config.new_client_from_config(config_file=str(kube.kubeconfig)))
    xid13 = "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python, Graphics Exception"
    later = (T0 + dt.timedelta(hours=3)).isoformat().replace("+00:00", "Z")
    # client-go folded three identical lines into count=3 of one Event
    _event(kube, "r01-n01.1", "r01-n01", xid13, count=3, lastTimestamp=later)
    # more than 10 similar events in 600 s: one combined Event, the newest message
    xid31 = "NVRM: Xid (PCI:0000:5e:00): 31, pid=7, name=train, Ch 00000010, intr 00000000. MMU Fault"
    _event(kube, "r01-n02.1", "r01-n02", f"(combined from similar events): {xid31}", count=2)
    # an Event on something else than a node is not a kernel line
    _event(kube, "pod.1", "x", xid13, involvedObject={"kind": "Pod", "name": "x", "namespace": "default"})
    assert copy_npd_events(kube.store.engine, product) == 5
    rows = _rows(kube)
    assert [(n, line.split(" kernel: ")[1]) for _, n, line in rows] == [
        ("r01-n01", xid13),
        ("r01-n01", xid13),
        ("r01-n01", xid13),
        ("r01-n02", xid31),
        ("r01-n02", xid31),
    ]
    stamps = sorted(line.split(" ")[0] for _, n, line in rows if n == "r01-n01")
    assert stamps == ["2026-11-30T08:00:00+00:00", "2026-11-30T11:00:00+00:00", "2026-11-30T11:00:00+00:00"]

    # NPD restarted with lookback: the same kernel line replayed as a new Event adds nothing
    _event(kube, "r01-n01.2", "r01-n01", xid13)
    # the folded Event's count grew: only the new repeat is added
    kube.core.patch_namespaced_event("r01-n01.1", "default", {"count": 4})
    assert copy_npd_events(kube.store.engine, product) == 1
    assert copy_npd_events(kube.store.engine, product) == 0
    assert len(_rows(kube)) == 6
