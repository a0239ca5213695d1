"""pyproject.toml declares every run-time dependency of the product (the `fleetval` package).

Fast: every third-party import in include/fleetval is a declared distribution, and the list of CLI
commands below is the CLI's. Slow (one clean venv for the module): `pip install` of the project with
the lock as constraints, then `fleetval --help`, every command's `--help`, an import of every
product module and of every third-party module the product imports (lazy ones too), and the cheap
commands that need no cluster end to end (a SQLite store stands in for PostgreSQL).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.paths import FIXTURES, ROOT

PACKAGE = ROOT / "include" / "fleetval"
CONSTRAINTS = ROOT / "constraints-3.11.txt"
# Import name -> distribution, where they differ (anything else: the import name is the distribution).
DISTRIBUTION = {
    "yaml": "pyyaml",
    "kubernetes_validate": "kubernetes-validate",
    "prometheus_client": "prometheus-client",
}
# Every command path of `fleetval` (groups too). A new command is added here, so its --help runs
# in the clean venv (test_command_list_is_the_clis fails until it is).
COMMANDS = {
    ("parse",),
    ("judge",),
    ("db",),
    ("db", "upgrade"),
    ("sim",),
    ("sim", "run"),
    ("sim", "serve"),
    ("sim", "load"),
    ("sim", "inject-xid"),
    ("mig",),
    ("mig", "catalog"),
    ("mig", "check"),
    ("scenario",),
    ("scenario", "list"),
    ("scenario", "check"),
    ("scenario", "run"),
    ("drill",),
    ("drill", "run"),
    ("verdicts",),
    ("nodes",),
    ("cluster",),
    ("cluster", "up"),
    ("cluster", "down"),
    ("cluster", "restart"),
    ("cluster", "compare"),
    ("cluster", "kubelet"),
    ("metrics",),
    ("metrics", "serve"),
    ("criteria",),
}
# Run in the clean venv: each import statement (argv[1], JSON), then every product module; prints
# every failure, not just the first.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
failed = []
for statement in json.loads(sys.argv[1]):
    try:
        exec(statement, {})
    except Exception as exc:
        failed.append(f"{statement}: {type(exc).__name__}: {exc}")
import fleetval
if not fleetval.__file__.startswith(sys.prefix):
    failed.append(f"fleetval imported from {fleetval.__file__}, not the venv")
for module in pkgutil.walk_packages(fleetval.__path__, "fleetval.", onerror=failed.append):
    if module.name.startswith("fleetval.store.migrations"):
        continue  # Alembic's env.py runs only inside a migration (`db upgrade` runs them)
    try:
        importlib.import_module(module.name)
    except Exception as exc:
        failed.append(f"{module.name}: {type(exc).__name__}: {exc}")
print("\\n".join(map(str, failed)))
sys.exit(1 if failed else 0)
"""
# The store reaches PostgreSQL through psycopg, declared but never imported by name: an engine
# loads the driver without connecting.
POSTGRES_DRIVER = (
    "from fleetval.store.engine import make_engine; "
    "make_engine('postgresql+psycopg2://fleetval@127.0.0.1/fleetval').dialect.dbapi.connect"
)
PIP_TIMEOUT_S = 600
COMMAND_TIMEOUT_S = 120


def _third_party_imports() -> dict[str, set[tuple[str, str]]]:
    """Top-level third-party import name -> (module path, import statement) of each use in the
    package, lazy imports inside functions included."""
    found: dict[str, set[tuple[str, str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top != "fleetval" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add((str(path.relative_to(ROOT)), ast.unparse(node)))
    return found


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {canonicalize_name(Requirement(req).name) for req in project["dependencies"]}


def _cli_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    commands: set[tuple[str, ...]] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                commands.add((*prefix, name))
                commands |= _cli_commands(sub, (*prefix, name))
    return commands


def test_product_imports_are_declared() -> None:
    declared = _declared()
    missing = {
        top: sorted(f"{path}: {statement}" for path, statement in uses)
        for top, uses in _third_party_imports().items()
        if canonicalize_name(DISTRIBUTION.get(top, top)) not in declared
    }
    assert not missing, f"imported by include/fleetval but not in [project].dependencies: {missing}"


def test_command_list_is_the_clis() -> None:
    from fleetval.cli import build_parser

    assert _cli_commands(build_parser()) == COMMANDS


class Venv:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.work = root.parent / "work"
        self.work.mkdir()
        # Nothing from the repo or the user's site: only what the install put in the venv.
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        self.env["PYTHONNOUSERSITE"] = "1"

    def run(self, *argv: str | Path, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in argv],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def fleetval(self, *argv: str | Path) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin / "fleetval", *argv)

    def site_package(self) -> Path:
        out = self.run(
            self.bin / "python", "-c", "import fleetval, os; print(os.path.dirname(fleetval.__file__))"
        )
        assert out.returncode == 0, out.stderr
        return Path(out.stdout.strip())


def _explain(out: subprocess.CompletedProcess[str]) -> str:
    command = " ".join(out.args)[:500]
    return f"{command} exited {out.returncode}\nstdout: {out.stdout[-3000:]}\nstderr: {out.stderr[-3000:]}"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    base = tmp_path_factory.mktemp("clean-install")
    # Built from a copy of what the package is made of: a build in the checkout would write build/
    # and egg-info there, and a stale egg-info's SOURCES.txt can add files package-data lacks.
    src = base / "src"
    src.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", src)
    shutil.copytree(
        ROOT / "include", src / "include", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    )
    env = Venv(base / "venv")
    started = time.monotonic()
    made = subprocess.run(
        [sys.executable, "-m", "venv", env.root], capture_output=True, text=True, timeout=120, check=False
    )
    assert made.returncode == 0, _explain(made)
    # The lock as constraints: the versions the rest of the suite tests. The pip cache is kept.
    pip = env.run(
        env.bin / "pip",
        "install",
        "--disable-pip-version-check",
        "-c",
        CONSTRAINTS,
        src,
        timeout=PIP_TIMEOUT_S,
    )
    assert pip.returncode == 0, _explain(pip)
    print(f"clean venv and pip install: {time.monotonic() - started:.1f} s")
    return env


@pytest.mark.parametrize("command", [(), *sorted(COMMANDS)], ids=lambda c: "/".join(c) or "fleetval")
def test_installed_help(venv: Venv, command: tuple[str, ...]) -> None:
    out = venv.fleetval(*command, "--help")
    assert out.returncode == 0, _explain(out)
    assert out.stdout.startswith(f"usage: {' '.join(('fleetval', *command))}"), _explain(out)
    assert not out.stderr, _explain(out)


def test_installed_imports(venv: Venv) -> None:
    """Every product module, every third-party import the product makes (lazy ones are where an
    undeclared dependency hides: `--help` never reaches them) and the PostgreSQL driver."""
    statements = sorted({statement for uses in _third_party_imports().values() for _, statement in uses})
    out = venv.run(venv.bin / "python", "-c", IMPORT_ALL, json.dumps([*statements, POSTGRES_DRIVER]))
    assert out.returncode == 0, _explain(out)


def test_installed_commands_run(venv: Venv) -> None:
    """The commands that need no cluster, on the data the package ships: its scenarios against its
    CRDs, its MIG catalog, its migrations on a SQLite store, its fleet specs."""
    pkg = venv.site_package()
    assert pkg.is_relative_to(venv.root), pkg
    shipped = sorted(p.name for p in (pkg / "kueue" / "scenarios").glob("*.yaml"))
    assert shipped == sorted(p.name for p in (PACKAGE / "kueue" / "scenarios").glob("*.yaml"))
    db = f"sqlite:///{venv.work / 'store.db'}"
    runs = [
        ("criteria",),
        ("mig", "catalog"),
        ("mig", "check", "--gpu", "H100-80GB", "3g.40gb", "1g.10gb"),
        ("scenario", "list"),
        ("scenario", "check", *(pkg / "kueue" / "scenarios" / name for name in shipped)),
        (
            "parse",
            "xid",
            FIXTURES
            / "xid"
            / "device-plugin-xid69-critical-device-marked-unhealthy-k8s-device-plugin-issue189.log",
        ),
        (
            "judge",
            "nccl",
            FIXTURES / "nccl" / "all_reduce_perf-2node-p5-16gpu-efa-slurm-awsome.txt",
            "--baseline",
            "100",
        ),
        ("db", "upgrade", "--db", db),
        ("sim", "load", pkg / "sim" / "fleets" / "mini.yaml", "--db", db),
        ("nodes", "--db", db),
    ]
    for argv in runs:
        out = venv.fleetval(*argv)
        assert out.returncode == 0, _explain(out)
        assert out.stdout.strip(), _explain(out)
