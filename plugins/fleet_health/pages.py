"""Each view of the fleet-health page as HTML: a query through `fleetval.store.fleet_health`, then a
Jinja2 template. No Airflow here (the bench renders these directly); `app` adds the routes and
Airflow's authentication.

Every verdict is shown as a badge with a colour and its word (or, in the dense heatmap, its
letter, spelled out in the legend and each cell's title), so nothing depends on colour alone.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import jinja2
from sqlalchemy import Engine

from fleetval.criteria import BY_ID, CATALOG_VERSION
from fleetval.store import fleet_health as fh

from .charts import busbw_chart, size_label

TEMPLATES: Final = Path(__file__).with_name("templates")
RACKS_PER_PAGE: Final = 64
COVERAGE_PER_PAGE: Final = 500
ATTENTION_LIMIT: Final = 100
LETTER: Final = {
    "pass": "P",
    "warn": "W",
    "inconclusive": "I",
    "fail": "F",
    "error": "E",
    "untested": "–",
}
VIEWS: Final = (
    ("fleet", "", "Fleet"),
    ("coverage", "coverage", "Coverage"),
    ("nccl", "nccl", "NCCL"),
    ("baselines", "baselines", "Baselines"),
    ("criteria", "criteria", "Criteria"),
    ("kueue", "kueue", "Kueue"),
    ("onboarding", "onboarding", "Onboarding"),
)


def _when(value: dt.datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _ago(value: dt.datetime | None, now: dt.datetime | None = None) -> str:
    if value is None:
        return "never"
    seconds = ((now or dt.datetime.now(dt.UTC)) - value).total_seconds()
    if seconds < 90:
        return "just now"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} d ago"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=jinja2.select_autoescape(("html",)),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters.update(when=_when, ago=_ago, pretty=_pretty, size=size_label)
_env.globals.update(LETTER=LETTER, RESULTS=fh.RESULTS, CATALOG_VERSION=CATALOG_VERSION)


def _render(template: str, *, base: str, view: str, title: str, **context: Any) -> str:
    def link(path: str = "", **query: Any) -> str:
        query = {k: v for k, v in query.items() if v not in (None, "", False)}
        return f"{base}/{path}" + (f"?{urlencode(query)}" if query else "")

    return _env.get_template(template).render(
        base=base, view=view, title=title, views=VIEWS, link=link, now=dt.datetime.now(dt.UTC), **context
    )


# --- fleet ----------------------------------------------------------------------------------------
def fleet(
    engine: Engine,
    *,
    base: str,
    layer: str | None = None,
    page: int = 1,
    problems: bool = False,
    horizon_days: int = fh.DEFAULT_HORIZON_DAYS,
    cache: fh.FleetCells | None = None,
) -> str:
    grid = fh.fleet_grid(engine, horizon_days=horizon_days, cache=cache)
    horizon_days = cache.horizon_days or horizon_days if cache else horizon_days
    if layer not in grid.layers:
        layer = None

    racks = grid.inventory.by_rack
    state_of = {node: grid.state(node, layer) for node in grid.inventory.rack_of}
    rows: list[dict[str, Any]] = []
    for rack, nodes in racks.items():
        states = [(n, state_of[n]) for n in nodes]
        bad = sum(1 for _, s in states if s != "pass")
        if problems and not bad:
            continue
        rows.append({"rack": rack, "nodes": states, "bad": bad})
    pages = max(1, math.ceil(len(rows) / RACKS_PER_PAGE))
    page = min(max(1, page), pages)
    shown = rows[(page - 1) * RACKS_PER_PAGE : page * RACKS_PER_PAGE]
    titles = {
        node: f"{node}: "
        + (
            ", ".join(f"{lay} {c.result}" for lay, c in sorted(grid.cells.get(node, {}).items()))
            or "no verdict"
        )
        for row in shown
        for node, _ in row["nodes"]
    }
    attention = []
    for node, cells in grid.cells.items():
        for lay, cell in cells.items():
            if lay in grid.layers and fh.SEVERITY[cell.result] >= fh.SEVERITY["fail"]:
                attention.append((node, grid.inventory.rack_of.get(node, ""), lay, cell))
    attention.sort(key=lambda a: (-fh.SEVERITY[a[3].result], -(a[3].at.timestamp() if a[3].at else 0)))
    totals = Counter(state_of.values())
    return _render(
        "fleet.html",
        base=base,
        view="fleet",
        title="Fleet",
        grid=grid,
        counts=grid.counts(),
        totals=totals,
        layer=layer,
        rows=shown,
        racks=len(racks),
        matching=len(rows),
        page=page,
        pages=pages,
        problems=problems,
        titles=titles,
        attention=attention[:ATTENTION_LIMIT],
        attention_total=len(attention),
        horizon_days=horizon_days,
    )


# --- node -----------------------------------------------------------------------------------------
def node(engine: Engine, name: str, *, base: str) -> str:
    data = fh.node_page(engine, name)
    latest: dict[str, dict[str, Any]] = {}
    for v in reversed(data.verdicts):  # oldest first: the newest run per layer wins
        lay = fh.layer_of(v["criterion"])
        entry = latest.get(lay)
        if entry is None or entry["run_id"] != v["run_id"]:
            latest[lay] = {
                "run_id": v["run_id"],
                "result": v["result"],
                "at": v["judged_at"],
                "run_key": v["run_key"],
            }
        elif fh.SEVERITY[v["result"]] > fh.SEVERITY[entry["result"]]:
            entry["result"] = v["result"]
    nccl_links = _nccl_links_for(engine, data)
    return _render(
        "node.html",
        base=base,
        view="fleet",
        title=name,
        data=data,
        latest=[
            (lay, latest[lay])
            for lay in (*fh.NODE_LAYERS, "scheduling", "safety", "job", "other")
            if lay in latest
        ],
        nccl_links=nccl_links,
    )


def _nccl_links_for(engine: Engine, data: fh.NodePage) -> list[dict[str, str]]:
    """The NCCL chart links for a node's intra-node verdicts (profile and scope from what they
    were judged against)."""
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for v in data.verdicts:
        if v["criterion"] not in ("D-NET-NCCL-01", "D-NET-NCCL-02"):
            continue
        against = v.get("judged_against") or {}
        profile, scope = against.get("profile"), against.get("scope")
        if profile and scope:
            seen.setdefault((profile, scope), {"profile": profile, "scope": scope})
    return list(seen.values())


# --- NCCL -----------------------------------------------------------------------------------------
def nccl(
    engine: Engine,
    *,
    base: str,
    profile: str | None = None,
    scope: str | None = None,
    subject: str | None = None,
) -> str:
    scopes = fh.nccl_scopes(engine)
    if (profile is None or scope is None) and scopes:
        profile, scope = scopes[0]["profile"], scopes[0]["scope"]
    listing: dict[str, Any] = {"run": None, "subjects": [], "total": 0, "criterion": ""}
    curve = None
    chart = ""
    if profile and scope:
        listing = fh.nccl_subjects(engine, profile=profile, scope=scope)
        if not subject and listing["subjects"]:
            subject = listing["subjects"][0]["subject"]
        if subject:
            curve = fh.nccl_curve(engine, profile=profile, scope=scope, subject=subject)
            chart = busbw_chart(
                curve.points,
                curve.baseline,
                title=f"{subject}: busbw against message size, {profile} {scope}",
            )
    table = _points_table(curve.points if curve else [])
    return _render(
        "nccl.html",
        base=base,
        view="nccl",
        title="NCCL",
        scopes=scopes,
        profile=profile,
        scope=scope,
        subject=subject,
        listing=listing,
        curve=curve,
        chart=chart,
        table=table,
    )


def _points_table(points: list[dict[str, Any]]) -> dict[str, Any]:
    repeats = sorted({str(p["repeat"]) for p in points})
    by_size: dict[int, dict[str, float]] = {}
    for p in points:
        by_size.setdefault(int(p["size"]), {})[str(p["repeat"])] = float(p["busbw_gbps"])
    return {"repeats": repeats, "rows": sorted(by_size.items())}


# --- baselines ------------------------------------------------------------------------------------
def baselines(engine: Engine, *, base: str) -> str:
    series: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in fh.baselines(engine):
        series.setdefault((row["profile"], row["metric"], row["scope"]), []).append(row)
    return _render("baselines.html", base=base, view="baselines", title="Baselines", series=series)


# --- coverage -------------------------------------------------------------------------------------
def coverage(
    engine: Engine,
    *,
    base: str,
    page: int = 1,
    horizon_days: int = fh.DEFAULT_HORIZON_DAYS,
    cache: fh.FleetCells | None = None,
) -> str:
    cov = fh.coverage(engine, horizon_days=horizon_days, cache=cache)
    horizon_days = cache.horizon_days or horizon_days if cache else horizon_days
    max_age = int(BY_ID["D-DEV-03"].parameters.get("max_age_days", 7))
    buckets: Counter[str] = Counter()
    rows: list[tuple[float, str, str, dict[str, Any] | None]] = []
    for node_name, rack in cov.inventory.rack_of.items():
        age = cov.age_days(node_name)
        if age is None:
            bucket = "stale" if node_name in set(cov.stale) else "never"
            rows.append((math.inf, node_name, rack, None))
        else:
            bucket = "fresh" if age <= max_age else ("due" if age <= 30 else "old")
            rows.append((age, node_name, rack, cov.last_r2[node_name]))
        buckets[bucket] += 1
    rows.sort(key=lambda r: (-r[0], fh.natural_key(r[1])))
    pages = max(1, math.ceil(len(rows) / COVERAGE_PER_PAGE))
    page = min(max(1, page), pages)
    stale = set(cov.stale)
    return _render(
        "coverage.html",
        base=base,
        view="coverage",
        title="Coverage",
        cov=cov,
        buckets=buckets,
        max_age=max_age,
        rows=rows[(page - 1) * COVERAGE_PER_PAGE : page * COVERAGE_PER_PAGE],
        stale=stale,
        page=page,
        pages=pages,
        total=len(rows),
        skipped=cov.inventory.skipped,
        horizon_days=horizon_days,
    )


# --- criteria -------------------------------------------------------------------------------------
def criteria(engine: Engine, *, base: str) -> str:
    rows = fh.criteria_matrix(engine)
    implemented = sum(1 for r in rows if r.implemented_by)
    return _render(
        "criteria.html",
        base=base,
        view="criteria",
        title="Criteria",
        rows=rows,
        implemented=implemented,
    )


# --- Kueue ----------------------------------------------------------------------------------------
def kueue(engine: Engine, *, base: str) -> str:
    runs = fh.kueue_results(engine)
    counts = fh.run_result_counts(engine, [r.id for r in runs[1:]])
    scenarios: list[dict[str, Any]] = []
    if runs:
        by_scenario: dict[str, dict[str, Any]] = {}
        for v in runs[0].verdicts:
            name = str(v["subject"]).removeprefix("kueue/")
            entry = by_scenario.setdefault(
                name,
                {
                    "scenario": name,
                    "title": (v["evidence"] or {}).get("title", ""),
                    "verdicts": [],
                    "against": v["judged_against"] or {},
                },
            )
            entry["verdicts"].append(v)
        scenarios = sorted(by_scenario.values(), key=lambda s: s["scenario"])
    return _render(
        "kueue.html", base=base, view="kueue", title="Kueue", runs=runs, counts=counts, scenarios=scenarios
    )


# --- onboarding -----------------------------------------------------------------------------------
def onboarding(engine: Engine, *, base: str) -> str:
    runs = fh.onboarding_reports(engine)
    counts = fh.run_result_counts(engine, [r.id for r in runs])
    reports = {r.id: fh.report_of(r) for r in runs}
    return _render(
        "onboarding.html",
        base=base,
        view="onboarding",
        title="Onboarding",
        runs=runs,
        counts=counts,
        reports=reports,
        is_mapping=lambda v: isinstance(v, Mapping),
    )


def not_found(*, base: str, what: str) -> str:
    return _render("not_found.html", base=base, view="", title="Not found", what=what)


def unavailable(*, base: str, why: str) -> str:
    return _render("unavailable.html", base=base, view="", title="Store unavailable", why=why)
