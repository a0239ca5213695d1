"""The catalog's "implemented by" is the code's: an id that a judge, policy or shipped scenario
emits is listed as implemented, and an id listed as implemented is emitted somewhere."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from fleetval.criteria import BY_ID, IMPLEMENTED_BY
from tests.paths import ROOT

PACKAGE = ROOT / "include" / "fleetval"
CATALOG = PACKAGE / "criteria.py"
ID_PATTERN = re.compile(r"\b[DF]-[A-Z0-9]+(?:-[A-Z0-9]+)*\b")


def _ids_in_python(path: Path) -> set[str]:
    """Criterion ids as string constants: a docstring naming one does not count."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and node.value in BY_ID
    }


def emitted_ids() -> dict[str, set[str]]:
    """criterion id → the package files (code, scenarios, tables) that emit it."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*")):
        if path == CATALOG or path.suffix not in (".py", ".yaml", ".csv"):
            continue
        if path.suffix == ".py":
            ids = _ids_in_python(path)
        else:
            ids = {i for i in ID_PATTERN.findall(path.read_text(encoding="utf-8")) if i in BY_ID}
        for criterion in ids:
            found.setdefault(criterion, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_emitted_criterion_is_listed_as_implemented() -> None:
    unlisted = {c: sorted(files) for c, files in emitted_ids().items() if c not in IMPLEMENTED_BY}
    assert unlisted == {}, "emitted but the catalog says not checked yet"


def test_every_criterion_listed_as_implemented_is_emitted() -> None:
    assert sorted(set(IMPLEMENTED_BY) - set(emitted_ids())) == []


def test_implemented_by_names_catalog_ids_only() -> None:
    assert sorted(set(IMPLEMENTED_BY) - set(BY_ID)) == []
