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


def test_an_h200_by_its_gfd_label_on_its_recorded_tables(capsys: pytest.CaptureFixture[str]) -> None:
    """The MIG checks of an H200 node (GFD's `nvidia.com/gpu.product=NVIDIA-H200`), on the profile
    tables recorded on a real H200 (driver 580.159.04)."""
    code, out, _ = run(capsys, "parse", "mig", str(MIG / "nvidia-smi-mig-lgip-h200-580.159.04.txt"))
    assert code == 0
    assert [(p["name"], p["profile_id"], p["instances_total"], p["memory_gib"]) for p in out["lgip"]] == [
        ("1g.18gb", 19, 7, 16.0),
        ("1g.18gb+me", 20, 1, 16.0),
        ("1g.35gb", 15, 4, 32.5),
        ("2g.35gb", 14, 3, 32.5),
        ("3g.71gb", 9, 2, 69.75),
        ("4g.71gb", 5, 1, 69.75),
        ("7g.141gb", 0, 1, 140.0),
    ]
    code, out, _ = run(capsys, "parse", "mig", str(MIG / "nvidia-smi-mig-lgipp-h200-580.159.04.txt"))
    assert code == 0 and {p["profile_id"]: p["starts"] for p in out["lgipp"]}[9] == [0, 4]
    code, out, _ = run(capsys, "parse", "mig", str(MIG / "nvidia-smi-L-h200-580.159.04.txt"))
    assert code == 0 and out["devices"][0]["name"] == "NVIDIA H200"
    code, out, _ = run(capsys, "mig", "check", "--gpu", "NVIDIA-H200", "3g.71gb", "3g.71gb")
    assert code == 0 and out["gpu"] == "H200-141GB" and out["allowed"] is True
    code, out, _ = run(capsys, "mig", "check", "--gpu", "NVIDIA-H200", *["1g.18gb"] * 8)
    assert code == 0 and out["allowed"] is False and any("at most 7" in r for r in out["reasons"])
    code, out, _ = run(capsys, "mig", "check", "--gpu", "NVIDIA-H200-MIG-1g.18gb", *["1g.18gb"] * 7)
    assert code == 0 and out["allowed"] is True


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
