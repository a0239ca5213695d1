"""The domain package's layout holds: folders import only folders below them, and never loop.

A tool's knowledge (probe, parser, judge, simulated output, suite steps) lives in its own folder
(`dcgm`, `xid`, `nccl`, …) above the foundations it shares with the others; the simulator sits
above the tools it runs, and the entry points above everything. A new layer is one new folder at
the tools' level plus its DAG.
"""

from __future__ import annotations

import ast
import graphlib
from collections import defaultdict

from tests.paths import ROOT

PACKAGE = ROOT / "include" / "fleetval"
# Lowest first. A unit is a top-level module or folder of `fleetval`.
LEVELS: list[set[str]] = [
    {"__init__", "errors", "records", "criteria", "pinned_images"},
    {"nodes", "fleet", "policy", "k8s", "store", "settings"},  # settings: defaults from pinned_images
    {"cli_base"},  # what every unit's commands share: argument types, reading input, JSON out
    {"probes", "remediation"},
    {
        "nvidia_smi",
        "dcgm",
        "xid",
        "nccl",
        "kueue",
        "mig",
        "ckpt",
        "gpu_operator",
        "trends",
        "metrics",
        "notify",
    },
    {"onboarding"},  # composes the tools' checks: rack onboarding
    {"sim"},
    {"cli"},
]
LEVEL = {unit: i for i, units in enumerate(LEVELS) for unit in units}


def unit_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


def fleetval_imports() -> dict[str, set[tuple[str, str]]]:
    """unit → {(imported unit, importing file)} over every module, type-checking imports included."""
    edges: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "store" and "migrations" in rel.parts:
            continue
        unit = rel.parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                names = [node.module] if node.module != "fleetval" else names[1:]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("fleetval."):
                    target = unit_of(name)
                    if target != unit:
                        edges[unit].add((target, str(rel)))
    return edges


def test_every_unit_has_a_level() -> None:
    units = {
        p.name.removesuffix(".py")
        for p in PACKAGE.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert units == set(LEVEL), "place the new module or folder in LEVELS"


def test_no_unit_imports_a_unit_above_it() -> None:
    upward = sorted(
        f"{where} imports fleetval.{target}"
        for unit, targets in fleetval_imports().items()
        for target, where in targets
        if LEVEL[target] > LEVEL[unit]
    )
    assert upward == []


def test_folders_never_import_each_other_in_a_loop() -> None:
    graph = {unit: {target for target, _ in targets} for unit, targets in fleetval_imports().items()}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the loop


def _builds_sql(node: ast.AST) -> bool:
    """An import that can build or run SQL (an Engine to pass on, or an exception to catch, cannot)."""
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] == "sqlalchemy" for a in node.names)
    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
        return node.module != "sqlalchemy.exc" and any(a.name != "Engine" for a in node.names)
    return False


def test_sql_lives_in_the_store() -> None:
    outside = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] != "store"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _builds_sql(node)
    )
    assert outside == []
