"""A DAG file whose imports load the KubernetesPodOperator, or @task, names their module itself.

The dag-processor's manager imports the `airflow.*` modules a DAG file names at top level
(`parsing_pre_import_modules`) and forks each parse from itself; modules reached only through
fleetval_airflow are imported again by every parse. The Kubernetes clients the operator pulls in
cost about 2.7 s of CPU per parse, @task's machinery (`airflow.sdk.task` is a lazy name: naming
`airflow.sdk` does not load it) about 0.06 s (bench/dag_parse_cost.py). Read from the source: no
import.
"""

from __future__ import annotations

import ast
import pathlib
from functools import cache

import pytest

from tests.paths import DAGS, ROOT

INCLUDE = ROOT / "include"

KPO_MODULE = "airflow.providers.cncf.kubernetes.operators.pod"
HEAVY = "airflow.providers.cncf.kubernetes"
TASK_MODULE = "airflow.sdk.definitions.decorators"  # where the lazy `airflow.sdk.task` lives
OURS = ("fleetval", "fleetval_airflow")


def top_level_imports(tree: ast.Module) -> set[str]:
    """Modules imported at module level (not in functions, not under TYPE_CHECKING)."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from fleetval_airflow import weekly_tasks` imports the submodule
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def source_of(module: str) -> pathlib.Path | None:
    """The file of one of our modules, found without importing it (None: not a module)."""
    base = INCLUDE.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@cache
def loads_kpo(module: str) -> bool:
    """Whether importing `module` (one of ours) imports the Kubernetes provider, transitively."""
    path = source_of(module)
    if path is None:
        return False
    imports = top_level_imports(ast.parse(path.read_text()))
    if any(name.startswith(HEAVY) for name in imports):
        return True
    return any(loads_kpo(name) for name in imports if name.split(".")[0] in OURS and name != module)


@cache
def uses_task(module: str) -> bool:
    """Whether importing `module` (one of ours) loads @task (`from airflow.sdk import task`)."""
    path = source_of(module)
    if path is None:
        return False
    tree = ast.parse(path.read_text())
    if any(
        isinstance(node, ast.ImportFrom)
        and node.module == "airflow.sdk"
        and any(alias.name == "task" for alias in node.names)
        for node in tree.body
    ):
        return True
    imports = top_level_imports(tree)
    return any(uses_task(name) for name in imports if name.split(".")[0] in OURS and name != module)


def test_the_task_modules_use_task() -> None:
    # The check below can fail: the weekly sweep's tasks are found to use @task.
    assert uses_task("fleetval_airflow.weekly_tasks")
    assert not uses_task("fleetval_airflow.defaults")


def test_the_probe_pod_module_loads_the_operator() -> None:
    # The check below can fail: the module every probe DAG uses is found to load the provider.
    assert loads_kpo("fleetval_airflow.probe_pod")
    assert not loads_kpo("fleetval_airflow.weekly_tasks")


@pytest.mark.parametrize(
    "dag_file",
    [p.name for p in sorted(DAGS.glob("*.py"))],
)
def test_a_dag_file_that_loads_the_operator_names_it(dag_file: str) -> None:
    imports = top_level_imports(ast.parse((DAGS / dag_file).read_text()))
    if any(loads_kpo(name) for name in imports if name.split(".")[0] in OURS):
        assert KPO_MODULE in imports, f"{dag_file}: add `import {KPO_MODULE}  # noqa: F401`"


@pytest.mark.parametrize(
    "dag_file",
    [p.name for p in sorted(DAGS.glob("*.py"))],
)
def test_a_dag_file_whose_tasks_use_task_names_its_module(dag_file: str) -> None:
    imports = top_level_imports(ast.parse((DAGS / dag_file).read_text()))
    if any(uses_task(name) for name in imports if name.split(".")[0] in OURS):
        assert TASK_MODULE in imports, f"{dag_file}: add `import {TASK_MODULE}  # noqa: F401`"
