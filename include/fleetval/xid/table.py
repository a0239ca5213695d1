"""The Xid decision table (D-DEV-06): what an Xid means for the GPU, the job and the node.

Per Xid the table holds NVIDIA's catalog columns and fleetval's decision, one row of
`xid_table.csv` (next to this module) each; an abbreviated sample of that data file:

    xid,mnemonic,nvidia_immediate_action,nvidia_severity,class,resolution,node_action,rule_id
    13,ROBUST_CHANNEL_GR_EXCEPTION / ...,RESTART_APP,NONFATAL,application,restart_app,none,xid.13.gr_exception
    48,ROBUST_CHANNEL_GPU_ECC_DBE,WORKFLOW_XID_48,FATAL,memory,workflow_xid_48,cordon,xid.48.ecc_dbe
    79,ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS,RESTART_BM,FATAL,device,reboot,cordon,xid.79.fell_off_bus

Source (the version this table follows, `XID_TABLE_VERSION`): NVIDIA's Xid catalog
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Xid 1..162, rows linked to
"CUDA 12.7; GPU driver R565") in the machine-readable form NVIDIA ships with NVSentinel
(`xiderrorsmapping.csv` @6f8b0fc, fixture `xid/xid-catalog-mapping-nvsentinel.csv`).

The rules in words:
- **node_action**: `cordon` exactly when NVIDIA marks the Xid FATAL (GPU reset, reboot, the Xid 48
  and NVLink workflows, "report issue"); everything NVIDIA marks NONFATAL (restart the app,
  ignore, the Xid 45 workflow) leaves the node in service. Cordon is what D-DEV-02 needs to run r3.
- **resolution**: NVIDIA's immediate action, lower-cased (`RESTART_BM` → `reboot`).
- **class**: application / device / link / memory / driver, by what the mnemonic names.
- **Xid 154** is judged by the recovery action printed in its line (`... to 0x4 (Drain and
  Reset)`): any action other than `None` needs the GPU drained, so it cordons.
- **Repeats** (`REPEAT_RULES`): an "application" fault that keeps coming back to one GPU is a GPU
  fault. Lines closer than `burst_gap_s` are one burst (one app crash prints several Xid 13 lines in
  the same second); `min_bursts` bursts within `window_s` cordon. NVSentinel escalates Xid 13/31
  at 2 in 24 h (to a diagnostic, not a cordon); we cordon at 3, because a cordon takes the node
  away from every tenant. Xid 45 never escalates on its own: it is the driver's teardown of an
  aborted app (NVSentinel#1710 escalated a 45 storm into 672 events on 3 nodes). Bursts are
  counted on each clock (wall clock; kernel uptime per host) separately; when lines on other
  clocks or with no time could make up the missing bursts, the rule's `undecided_rule_id` says so
  (inconclusive): the times were evidence the rule needed.
- **Root cause** (`REROOTED_XIDS`): only Xid 45 is judged by the Xid its line names as "caused by
  previous Xid N". The catalog (fixture `xid-catalog-nvidia-docs-selected-rows.txt`) documents 45 as
  "Preemptive cleanup, due to previous errors" with "Not Solo: IGNORE (follow other Xid)", and the
  driver prints the suffix only on ROBUST_CHANNEL_PREEMPTIVE_REMOVAL (45). Any other Xid is judged
  by its own number, whatever its line says (an Xid 79 "caused by previous Xid 13" still cordons).
- **Unknown Xid** (not in the catalog): class `unknown`, node action `none`, result
  `inconclusive`: we cannot judge it, and an unknown number is not evidence of health.
- **Unreadable Xid line** (`NVRM: Xid` that does not parse): `inconclusive`, node action `none`.
- **Unreadable log** (no readable kernel-log line at all: empty, binary, garbage): `inconclusive`,
  node action `none`, rule `xid.log.unreadable`: no readable log is not a healthy log.
- **Dedup**: one decision per (GPU, rule) per `dedup_window_s`, so a storm is one decision.
"""

from __future__ import annotations

import csv
import enum
import io
import re
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Final

from fleetval.errors import PolicyError

XID_TABLE_VERSION: Final = "nvidia-xid-catalog@nvsentinel-6f8b0fc+fleetval.2"
"""NVIDIA Xid catalog (as mirrored by NVSentinel at 6f8b0fc) + fleetval decision revision 2
(2: only Xid 45 follows its root cause; repeats counted per clock, undecidable ones inconclusive;
an unreadable log is inconclusive)."""

XID_DOCUMENT: Final = MappingProxyType(
    {
        "catalog": "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html",
        "mapping": "NVIDIA/NVSentinel distros/kubernetes/nvsentinel/charts/gpu-health-monitor/"
        "xiderrorsmapping.csv@6f8b0fcfa8e502bdda78fabf96facef729a9285b",
        "linkage": "CUDA 12.7; GPU driver R565",
    }
)


class XidClass(enum.StrEnum):
    APPLICATION = "application"
    DEVICE = "device"
    LINK = "link"
    MEMORY = "memory"
    DRIVER = "driver"
    UNKNOWN = "unknown"


class NodeAction(enum.StrEnum):
    CORDON = "cordon"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class XidRule:
    """One row of the table: the decision for one Xid number (or a synthetic row, `xid` None)."""

    xid: int | None
    mnemonic: str
    nvidia_immediate_action: str
    nvidia_severity: str
    xid_class: XidClass
    resolution: str
    node_action: NodeAction
    rule_id: str


@dataclass(frozen=True, slots=True)
class RepeatRule:
    """Escalation: `min_bursts` bursts of `xids` on one GPU within `window_s` → `node_action`;
    `undecided_rule_id` when the lines' times cannot show whether they do (inconclusive)."""

    rule_id: str
    xids: frozenset[int]
    min_bursts: int
    window_s: float
    burst_gap_s: float
    resolution: str
    node_action: NodeAction
    reason: str
    undecided_rule_id: str


@dataclass(frozen=True, slots=True, eq=False)
class XidTable:
    """The whole policy: per-Xid rows, synthetic rows, repeat rules and windows."""

    version: str
    rules: MappingProxyType[int, XidRule]
    unknown: XidRule
    unreadable: XidRule
    unreadable_log: XidRule
    recovery_actions: MappingProxyType[str, XidRule]
    recovery_unknown: XidRule
    repeat_rules: tuple[RepeatRule, ...]
    rerooted_xids: frozenset[int]
    dedup_window_s: float
    lookback_s: float

    def rule_for(self, xid: int) -> XidRule:
        """The row for `xid`; the conservative default row for an Xid the catalog lacks."""
        return self.rules.get(xid, self.unknown)

    def recovery_rule(self, action: str | None) -> XidRule:
        """The decision for an Xid 154 whose line says the recovery action changed to `action`."""
        if action is None:
            return self.recovery_unknown
        return self.recovery_actions.get(action.strip().lower(), self.recovery_unknown)


_RULE_ID = re.compile(r"^xid\.[a-z0-9_]+(\.[a-z0-9_]+)+$")
_COLUMNS = (
    "xid",
    "mnemonic",
    "nvidia_immediate_action",
    "nvidia_severity",
    "class",
    "resolution",
    "node_action",
    "rule_id",
)


def load_rules(text: str) -> dict[int, XidRule]:
    """Rows of a table CSV (lines starting `#` are comments); an inconsistent table is a PolicyError."""
    body = "".join(line for line in io.StringIO(text) if not line.startswith("#"))
    reader = csv.DictReader(io.StringIO(body))
    if tuple(reader.fieldnames or ()) != _COLUMNS:
        raise PolicyError(f"xid table: columns {reader.fieldnames} != {list(_COLUMNS)}")
    rules: dict[int, XidRule] = {}
    seen_ids: set[str] = set()
    for row in reader:
        try:
            xid = int(row["xid"])
            rule = XidRule(
                xid=xid,
                mnemonic=row["mnemonic"],
                nvidia_immediate_action=row["nvidia_immediate_action"],
                nvidia_severity=row["nvidia_severity"],
                xid_class=XidClass(row["class"]),
                resolution=row["resolution"],
                node_action=NodeAction(row["node_action"]),
                rule_id=row["rule_id"],
            )
        except (ValueError, TypeError) as exc:
            raise PolicyError(f"xid table: bad row {row}: {exc}") from exc
        if xid in rules:
            raise PolicyError(f"xid table: Xid {xid} listed twice")
        if not _RULE_ID.match(rule.rule_id) or not rule.rule_id.startswith(f"xid.{xid}."):
            raise PolicyError(f"xid table: rule id {rule.rule_id!r} for Xid {xid} is not xid.{xid}.<name>")
        if rule.rule_id in seen_ids:
            raise PolicyError(f"xid table: rule id {rule.rule_id!r} used twice")
        if not rule.resolution:
            raise PolicyError(f"xid table: Xid {xid} has no resolution")
        seen_ids.add(rule.rule_id)
        rules[xid] = rule
    return rules


def _synthetic(rule_id: str, xid_class: XidClass, resolution: str, node_action: NodeAction) -> XidRule:
    return XidRule(None, "", "", "", xid_class, resolution, node_action, rule_id)


# Xid 154's recovery action strings, as the catalog lists them ("None", "Drain P2P", "Drain and
# Reset", "GPU Reset Required", "Node Reboot Required"). Every action but None needs the GPU
# drained of work first, which is a cordon.
_RECOVERY_ACTIONS: Final = {
    "none": _synthetic("xid.154.recovery.none", XidClass.DRIVER, "ignore", NodeAction.NONE),
    "drain p2p": _synthetic("xid.154.recovery.drain_p2p", XidClass.DRIVER, "drain_p2p", NodeAction.CORDON),
    "drain and reset": _synthetic(
        "xid.154.recovery.drain_and_reset", XidClass.DRIVER, "reset_gpu", NodeAction.CORDON
    ),
    "gpu reset required": _synthetic(
        "xid.154.recovery.gpu_reset_required", XidClass.DRIVER, "reset_gpu", NodeAction.CORDON
    ),
    "node reboot required": _synthetic(
        "xid.154.recovery.node_reboot_required", XidClass.DRIVER, "reboot", NodeAction.CORDON
    ),
}

REPEAT_RULES: Final = (
    RepeatRule(
        rule_id="xid.repeat.app_fault",
        xids=frozenset({13, 31}),
        min_bursts=3,
        window_s=24 * 3600.0,
        burst_gap_s=180.0,
        resolution="run_diag",
        node_action=NodeAction.CORDON,
        reason="graphics-engine/MMU faults keep recurring on one GPU: NVIDIA notes these can be hardware",
        undecided_rule_id="xid.repeat.app_fault.undecided",
    ),
    RepeatRule(
        rule_id="xid.repeat.contained_memory",
        xids=frozenset({94}),
        min_bursts=3,
        window_s=24 * 3600.0,
        burst_gap_s=180.0,
        resolution="reset_gpu",
        node_action=NodeAction.CORDON,
        reason="contained memory errors keep recurring on one GPU: NVIDIA recommends a GPU reset",
        undecided_rule_id="xid.repeat.contained_memory.undecided",
    ),
)

# Xids judged by the Xid their line names in " caused by previous Xid N" (see the module text).
REROOTED_XIDS: Final = frozenset({45})


def build_table() -> XidTable:
    """The shipped table, from `xid_table.csv` and the synthetic rows above."""
    text = resources.files("fleetval.xid").joinpath("xid_table.csv").read_text(encoding="utf-8")
    return XidTable(
        version=XID_TABLE_VERSION,
        rules=MappingProxyType(load_rules(text)),
        unknown=_synthetic("xid.unknown", XidClass.UNKNOWN, "contact_support", NodeAction.NONE),
        unreadable=_synthetic("xid.unreadable", XidClass.UNKNOWN, "investigate", NodeAction.NONE),
        unreadable_log=_synthetic("xid.log.unreadable", XidClass.UNKNOWN, "investigate", NodeAction.NONE),
        recovery_actions=MappingProxyType(_RECOVERY_ACTIONS),
        recovery_unknown=_synthetic(
            "xid.154.recovery.unknown", XidClass.DRIVER, "follow_recovery_action", NodeAction.NONE
        ),
        repeat_rules=REPEAT_RULES,
        rerooted_xids=REROOTED_XIDS,
        # An hour: longer than any storm, shorter than one cordon → r3 → uncordon cycle.
        dedup_window_s=3600.0,
        # Events older than a day before `as_of` were judged when they happened.
        lookback_s=24 * 3600.0,
    )


XID_TABLE: Final = build_table()
