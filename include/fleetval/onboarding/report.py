"""The onboarding summary: per node what the gate found and what was done, the refused nodes, the
answers, the baselines. Stored in the run (`runs.meta["report"]`, read back with
`fleetval.store.onboarding`) and printed in the last task's log (`render`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

from fleetval.onboarding.approval import Answer, Decision
from fleetval.onboarding.gate import GateReport
from fleetval.onboarding.plan import OnboardingPlan
from fleetval.onboarding.request import OnboardingRequest

REPORT_VERSION: Final = "onboarding-report/1"
MAX_LINES: Final = 200


def build_report(
    *,
    run_key: str,
    request: OnboardingRequest,
    plan: OnboardingPlan,
    gate: GateReport | None,
    decisions: Mapping[str, Decision],
    answer: Answer | None,
    baselines: Mapping[str, Any],
    stages: Mapping[str, Any],
    still_cordoned: Sequence[str] = (),
) -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    # A dry run changed nothing: it says what it would have done.
    admitted_word, held_word = (
        ("would be admitted", "would be held") if request.dry_run else ("admitted", "held")
    )
    for name in plan.nodes:
        node_gate = gate.nodes.get(name) if gate is not None else None
        decision = decisions.get(name)
        nodes[name] = {
            "result": node_gate.result.value if node_gate else "error",
            "decision": (admitted_word if decision.admit else held_word) if decision else held_word,
            "state": decision.state if decision else "held",
            "why": decision.why if decision else "the gate did not decide (its task did not complete)",
            "stages": node_gate.stages if node_gate else {},
            "findings": [f.to_json() for f in node_gate.findings] if node_gate else [],
            "still_cordoned": name in still_cordoned,
        }
    admitted = sorted(n for n, v in nodes.items() if v["decision"] == admitted_word)
    return {
        "version": REPORT_VERSION,
        "run_key": run_key,
        "rack": plan.rack,
        "selected_by": plan.selected_by,
        "dry_run": request.dry_run,
        "request": request.to_json(),
        "counts": dict(Counter(v["result"] for v in nodes.values())),
        "admitted": admitted,
        "held": sorted(n for n in nodes if n not in admitted),
        "nodes": nodes,
        "refused": plan.refused,
        "withheld": plan.withheld,
        "approval": answer.to_json() if answer else None,
        "baselines": dict(baselines),
        "stages": {
            name: {k: v for k, v in state.items() if k in ("enabled", "nodes", "rounds", "notes", "judged")}
            for name, state in stages.items()
        },
    }


def render(report: Mapping[str, Any]) -> str:
    """The report as the task log shows it: one line per node, then the rest."""
    dry = " (dry run: nothing was changed)" if report.get("dry_run") else ""
    lines = [
        f"rack {report['rack']}: {len(report['nodes'])} node(s) onboarded by {report['selected_by']}{dry}",
        f"admitted {len(report['admitted'])}, held {len(report['held'])}; results "
        + ", ".join(f"{k} {v}" for k, v in sorted(report["counts"].items())),
        "",
        f"{'node':<24} {'result':<13} {'decision':<17} why",
    ]
    for name, node in sorted(report["nodes"].items())[:MAX_LINES]:
        cordoned = " (still cordoned)" if node.get("still_cordoned") else ""
        lines.append(f"{name:<24} {node['result']:<13} {node['decision']:<17} {node['why']}{cordoned}")
    if len(report["nodes"]) > MAX_LINES:
        lines.append(f"… {len(report['nodes']) - MAX_LINES} more in the stored report")
    for title, key in (("refused", "refused"), ("withheld by the action budget (F-SAFE-01)", "withheld")):
        if report.get(key):
            lines += ["", f"{title}:"] + [f"  {n}: {r}" for n, r in sorted(report[key].items())[:MAX_LINES]]
    approval = report.get("approval")
    if approval:
        lines += [
            "",
            f"approval: {approval['how']}; "
            f"approved {approval['approved'] or 'none'}, held {approval['held'] or 'none'}",
        ]
    baselines = report.get("baselines") or {}
    if baselines.get("candidates"):
        lines += ["", f"baseline candidates: {baselines.get('how', '')}"]
        promoted = set(baselines.get("promoted") or ())
        for c in baselines["candidates"]:
            state = "promoted" if c["baseline_id"] in promoted else "left a candidate"
            lines.append(
                f"  #{c['baseline_id']} {c['profile']} {c['scope']} {c['busbw_gbps']:.2f} GB/s "
                f"v{c['version']}: {state}"
            )
    return "\n".join(lines)
