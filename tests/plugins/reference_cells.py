"""What the fleet page's cells mean, computed the slow obvious way from every verdict row in Python:
the reference that `fleet_health.latest_cells`' SQL is checked against."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from fleetval.store import fleet_health as fh
from fleetval.store.repository import Store


def _aware(at: dt.datetime) -> dt.datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


def reference_cells(store: Store, *, from_run: int = 0) -> fh.Cells:
    """Per (node, layer): the verdict judged last (then the higher run) names the run; the cell is
    the worst of that run's verdicts there judged since its newest retest (RETEST_CRITERIA) where it
    has one, else within BATCH_WINDOW of the newest. Per node: its newest
    r2 verdicts (D-DEV-01/03 with a node, not an error): the worst judged at that moment."""
    rows: list[dict[str, Any]] = [
        {**r, "at": _aware(r["judged_at"])} for r in store.verdicts() if r["run_id"] >= from_run
    ]
    by_cell: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["criterion"] not in fh.TREND_CRITERIA:  # early warnings are not a layer's judgement
            by_cell[(r["node"] or r["subject"], fh.layer_of(r["criterion"]))].append(r)
    cells: dict[str, dict[str, fh.Cell]] = {}
    for (node, layer), verdicts in by_cell.items():
        newest = max(verdicts, key=lambda r: (r["at"], r["run_id"]))
        in_run = [r for r in verdicts if r["run_id"] == newest["run_id"]]
        retests = [r["at"] for r in in_run if r["criterion"] in fh.RETEST_CRITERIA]
        since = max(retests) if retests else newest["at"] - fh.BATCH_WINDOW
        batch = [r for r in in_run if r["at"] >= since]
        worst = max(fh.SEVERITY[r["result"]] for r in batch)
        cells.setdefault(node, {})[layer] = fh.Cell(
            fh.result_of(worst), newest["run_id"], newest["at"], len(batch)
        )
    r2: dict[str, fh.R2] = {}
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["criterion"] in fh.R2_CRITERIA and r["result"] != "error" and r["node"] is not None:
            by_node[r["node"]].append(r)
    for node, verdicts in by_node.items():
        newest = max(verdicts, key=lambda r: (r["at"], r["run_id"]))
        same = [r for r in verdicts if (r["at"], r["run_id"]) == (newest["at"], newest["run_id"])]
        worst = max(fh.SEVERITY[r["result"]] for r in same)
        r2[node] = fh.R2(
            newest["at"], fh.result_of(worst), max(r["criterion"] for r in same), newest["run_id"]
        )
    return fh.Cells(cells, r2, from_run)
