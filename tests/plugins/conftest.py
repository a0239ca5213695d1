"""The fleet-health plugin's tests: its package lives in plugins/ (on sys.path in Airflow's
processes, as here)."""

from __future__ import annotations

import sys

from tests.paths import ROOT

PLUGINS = ROOT / "plugins"
if str(PLUGINS) not in sys.path:
    sys.path.insert(0, str(PLUGINS))
