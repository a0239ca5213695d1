"""Paths the tests share (importable without side effects, unlike conftest)."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"
FIXTURES = ROOT / "tests" / "fixtures"
KNOWN_POOLS = {"default_pool", "fleetval_node_diagnosis"}
DEMO_FLEET = ROOT / "include" / "fleetval" / "sim" / "fleets" / "demo.yaml"
