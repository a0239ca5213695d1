"""`fleetval parse mig`, `mig catalog`, `mig check`, `judge sharing`: JSON out, one-line errors."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from fleetval.cli import main
from tests.paths import FIXTURES

MIG = FIXTURES / "mig"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_parse_catalog_and_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "parse", "mig", str(MIG / "nvidia-smi-mig-lgip-lgipp-h100-pcie-80gb-525-scaleway-docs.txt")
    )
    assert code == 0 and [p["name"] for p in out["lgip"]][:2] == ["1g.10gb", "1g.10gb+me"] and out["lgipp"]
    code, out, _ = run(capsys, "mig", "catalog", "--gpu", "NVIDIA-H100-80GB-HBM3")
    assert code == 0 and list(out) == ["H100-80GB"]
    code, out, _ = run(
        capsys, "mig", "check", "--gpu", "H100-80GB", "3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"
    )
    assert code == 0 and out["allowed"] is True
    code, out, _ = run(
        capsys, "mig", "check", "--gpu", "H100-80GB", "2g.20gb", "2g.20gb", "2g.20gb", "2g.20gb"
    )
    assert code == 0 and out["allowed"] is False and any("at most 3" in r for r in out["reasons"])
    code, out, _ = run(
        capsys, "mig", "check", "--gpu", "0x233510DE", "1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"
    )
    assert code == 0 and out["gpu"] == "H200-141GB" and out["allowed"] is True  # by PCI device id
    code, out, _ = run(capsys, "mig", "catalog", "--gpu", "B200-180GB")
    assert out["B200-180GB"]["device_ids"] == ["0x290110DE"]
    code, out, err = run(capsys, "mig", "check", "--gpu", "Voodoo-5", "1g.10gb")
    assert code == 1 and out is None and err.startswith("error: ") and err.count("\n") == 1


def test_parse_mig_refuses_what_is_not_mig_output(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    other = tmp_path / "x.txt"
    other.write_text("hello\n")
    code, out, err = run(capsys, "parse", "mig", str(other))
    assert code == 1 and out is None and err.startswith("error: mig: ")


def test_judge_sharing(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    labels = json.loads((MIG / "gfd-node-labels-h100-mig-single-all-disabled-nvidia-docs.json").read_text())
    node = tmp_path / "node.json"
    node.write_text(
        json.dumps(
            {"metadata": {"name": "n1", "labels": labels}, "status": {"capacity": {"nvidia.com/gpu": "4"}}}
        )
    )
    code, out, _ = run(capsys, "judge", "sharing", str(node))
    [verdict] = out["verdicts"]
    assert code == 0 and (verdict["subject"], verdict["result"]) == ("n1", "fail")
    node.write_text("[1, 2")
    code, out, _ = run(capsys, "judge", "sharing", str(node), "--node", "n2")
    assert (
        code == 0 and out["verdicts"][0]["result"] == "inconclusive"
    )  # unreadable evidence: judged, not an error
