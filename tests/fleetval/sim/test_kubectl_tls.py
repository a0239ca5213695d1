"""kubectl works against `fleetval sim serve` with the kubeconfig it writes, as the docs show.

kubectl (client-go) sends a bearer token over https only: against a plain-http server every
command fails with "You must be logged in to the server". So `sim serve` serves TLS with its own
CA in the kubeconfig, kept in the state folder and reused while valid.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fleetval.sim.kube.tls import BUNDLE_NAME, RENEW_BEFORE, VALID_FOR, server_tls
from tests.paths import DEMO_FLEET, ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLEETS = ROOT / "include" / "fleetval" / "sim" / "fleets"
STATE_DIR = ".fleetval-sim"  # `sim serve`'s default --state-dir, which the docs' lines name
DOC_PORT = "6443"  # the port the docs serve on; the test takes a free one
KUBECTL_TIMEOUT_S = 60
SERVE_TIMEOUT_S = 60


def doc_kubectl_lines() -> list[tuple[str, str]]:
    """(doc, command) for each kubectl line of a fenced shell block that uses a kubeconfig of
    `sim serve`'s state folder."""
    found = []
    for doc in DOCS:
        in_shell = False
        for line in doc.read_text(encoding="utf-8").splitlines():
            fence = re.match(r"\s*```(\w*)", line)
            if fence:
                in_shell = not in_shell and fence.group(1) in {"bash", "sh", "shell", "console"}
                continue
            command = line.strip().removeprefix("$ ")
            if in_shell and command.startswith("kubectl ") and f"{STATE_DIR}/" in command:
                found.append((str(doc.relative_to(ROOT)), command))
    return found


DOC_LINES = doc_kubectl_lines()


def kubeconfig_fleets(command: str) -> set[str]:
    return set(re.findall(rf"{re.escape(STATE_DIR)}/([\w.-]+)\.kubeconfig", command))


def fleet_spec(name: str) -> Path:
    """The shipped fleet spec named `name` (a doc's `.fleetval-sim/NAME.kubeconfig`)."""
    for path in sorted(FLEETS.glob("*.yaml")):
        if yaml.safe_load(path.read_text(encoding="utf-8")).get("name") == name:
            return path
    raise AssertionError(f"no fleet named {name!r} in {FLEETS.relative_to(ROOT)}")


@pytest.fixture(scope="module")
def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl is not on PATH (Debian: apt-get install kubernetes-client)")
    return path


class Served:
    """`fleetval sim serve` running in `cwd`, its state in cwd/.fleetval-sim."""

    def __init__(self, cwd: Path, spec: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fleetval.cli", "sim", "serve", str(spec), "--time-scale", "0"],
            cwd=cwd,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        lines: list[str] = []
        while not lines or lines[-1] != "}\n":
            line = self.proc.stdout.readline()
            assert line, f"sim serve exited ({self.proc.wait(SERVE_TIMEOUT_S)}) before serving"
            lines.append(line)
        self.info: dict[str, str] = json.loads("".join(lines))
        self.kubeconfig = cwd / self.info["kubeconfig"]  # printed relative to cwd

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        # its handler is set before it prints: a SIGTERM at any time after is a clean stop
        assert self.proc.wait(timeout=SERVE_TIMEOUT_S) == 0


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Served]]]:
    """A folder where `sim serve` serves each fleet the docs' kubectl lines name (and the demo)."""
    cwd = tmp_path_factory.mktemp("sim-kubectl")
    fleets = {"demo"}.union(*(kubeconfig_fleets(command) for _doc, command in DOC_LINES))
    served: dict[str, Served] = {}
    try:
        for name in sorted(fleets):
            served[name] = Served(cwd, fleet_spec(name))
        yield cwd, served
    finally:
        for server in served.values():
            server.stop()


def run_kubectl(kubectl: str, cwd: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["HOME"] = str(cwd)  # kubectl's discovery cache, and no ~/.kube/config of the user's
    return subprocess.run(
        [kubectl, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=KUBECTL_TIMEOUT_S,
        check=False,
    )


def test_sim_serve_is_https_with_its_ca_in_the_kubeconfig(workdir: tuple[Path, dict[str, Served]]) -> None:
    cwd, served = workdir
    info = served["demo"].info
    assert info["server"].startswith("https://127.0.0.1:")
    assert served["demo"].kubeconfig.resolve() == (cwd / STATE_DIR / "demo.kubeconfig").resolve()
    cluster = yaml.safe_load(served["demo"].kubeconfig.read_text())["clusters"][0]["cluster"]
    assert cluster["server"] == info["server"]
    bundle = (cwd / STATE_DIR / BUNDLE_NAME).read_bytes()
    assert base64.b64decode(cluster["certificate-authority-data"]) in bundle
    assert (cwd / STATE_DIR / BUNDLE_NAME).stat().st_mode & 0o077 == 0  # it holds the server's key


def test_kubectl_lists_the_fleets_nodes(kubectl: str, workdir: tuple[Path, dict[str, Served]]) -> None:
    cwd, _ = workdir
    result = run_kubectl(
        kubectl,
        cwd,
        [
            "--kubeconfig",
            f"{STATE_DIR}/demo.kubeconfig",
            "get",
            "nodes",
            "-L",
            "fleetval.io/rack,nvidia.com/gpu.product",
        ],
    )
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[0] == "NAME" and header.split()[-2:] == ["RACK", "GPU.PRODUCT"]
    nodes = {row.split()[0]: row.split()[-2:] for row in rows}
    assert len(nodes) == 16
    assert nodes["r01-n01"] == ["r01", "NVIDIA-H100-80GB-HBM3"]
    assert nodes["r02-n08"][0] == "r02"


def test_the_docs_show_kubectl_against_sim_serve() -> None:
    """The extraction below still finds the docs' lines (a reworded doc keeps being tested)."""
    assert any(doc == "docs/backends.md" for doc, _ in DOC_LINES), DOC_LINES


@pytest.mark.parametrize(("doc", "command"), DOC_LINES, ids=[f"{d}: {c}" for d, c in DOC_LINES])
def test_docs_kubectl_line_runs(
    kubectl: str, workdir: tuple[Path, dict[str, Served]], doc: str, command: str
) -> None:
    cwd, served = workdir
    port = served["demo"].info["server"].rsplit(":", 1)[1]
    args = shlex.split(command.replace(f":{DOC_PORT}", f":{port}"), comments=True)
    result = run_kubectl(kubectl, cwd, args[1:])
    assert result.returncode == 0, f"{doc}: {command}\n{result.stderr}"


def test_certificates_are_reused_while_valid_and_replaced_before_they_expire(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    first = server_tls(tmp_path, now)
    assert server_tls(tmp_path, now + dt.timedelta(days=30)).ca_pem == first.ca_pem
    renewed = server_tls(tmp_path, now + VALID_FOR - RENEW_BEFORE)
    assert renewed.ca_pem != first.ca_pem
    (tmp_path / BUNDLE_NAME).write_text("damaged")
    assert server_tls(tmp_path, now).ca_pem not in (first.ca_pem, renewed.ca_pem)


def test_a_restarted_sim_serve_keeps_its_ca(tmp_path: Path) -> None:
    def ca_of(served: Served) -> str:
        config = yaml.safe_load(served.kubeconfig.read_text())
        return str(config["clusters"][0]["cluster"]["certificate-authority-data"])

    first = Served(tmp_path, DEMO_FLEET)
    first.stop()
    first_ca = ca_of(first)
    second = Served(tmp_path, DEMO_FLEET)
    second.stop()
    assert ca_of(second) == first_ca
