"""Every view of the fleet-health page rendered from a store filled through its write path (the
bench's fleet at 64 nodes), on PostgreSQL and SQLite: what it says, and that no verdict is told by
colour alone."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest

from bench.fleet_page import KUEUE_SCENARIOS, fill, node_names
from fleet_health import pages
from fleetval.criteria import CRITERIA, IMPLEMENTED_BY
from fleetval.store import fleet_health as fh
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import Store
from tests.conftest import _fresh_pg_db
from tests.plugins.reference_cells import reference_cells

BADGE = re.compile(r'<span class="badge r-([a-z]+)">([^<]*)</span>')
CELL = re.compile(
    r'<a class="cell r-([a-z]+)" href="([^"]+)" title="([^"]*)" aria-label="([^"]*)">([^<]*)</a>'
)
RESULT_WORDS = {
    "pass",
    "warn",
    "inconclusive",
    "fail",
    "error",
    "untested",
    "promoted",
    "candidate",
    "retired",
}


@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One filled store per backend for the module (filling is the slow part; views only read)."""
    if request.param == "sqlite":
        urls: Iterator[str] = iter([f"sqlite:///{tmp_path_factory.mktemp('pages')}/fleetval.db"])
    else:
        urls = _fresh_pg_db(request.getfixturevalue("pg_server_url"))
    url = next(urls)
    engine = make_engine(url)
    upgrade(engine)
    store = Store(engine)
    fill(store, nodes=64, weekly=2, nccl=1, seed=3)
    yield store
    engine.dispose()
    next(urls, None)  # drops the PostgreSQL database


def words_match_colours(html: str) -> int:
    """Every badge's text names its class's result (a count may come first): readable without colour."""
    badges = BADGE.findall(html)
    for cls, text in badges:
        assert cls in RESULT_WORDS, cls
        assert text.split()[-1] == cls or cls in text, (cls, text)
    return len(badges)


def test_the_fleet_heatmap_shows_every_node_with_a_letter_its_result_and_a_link(fleet: Store) -> None:
    html = pages.fleet(fleet.engine, base="/fleet")
    cells = CELL.findall(html)
    assert len(cells) == 64
    for cls, href, title, label, letter in cells:
        node = href.removeprefix("/fleet/node/")
        assert node in node_names(64) and title.startswith(f"{node}: ")
        assert label == f"{node} {cls}" and letter == pages.LETTER[cls]
    assert words_match_colours(html) >= 6
    for result, letter in pages.LETTER.items():  # the legend spells every letter out
        assert f'<span class="cell r-{result}">{letter}</span> {result}' in html
    assert "64 nodes in 4 racks" in html and 'id="layers"' in html


def test_the_bench_fleets_cells_equal_a_plain_recomputation(fleet: Store) -> None:
    """The bench's fleet (weekly sweeps with GPU records, NCCL pairs and blame, Xid runs judged in
    two steps, Kueue, onboarding): the cells' SQL against Python over every verdict."""
    assert fh.latest_cells(fleet.engine) == reference_cells(fleet)
    cold = fh.FleetCells(fleet.engine, horizon_days=None).get()
    assert cold == reference_cells(fleet, from_run=cold.from_run)


def test_the_problem_filter_keeps_racks_with_a_node_not_passing(fleet: Store) -> None:
    everything = CELL.findall(pages.fleet(fleet.engine, base="/fleet", layer="device"))
    problems = pages.fleet(fleet.engine, base="/fleet", layer="device", problems=True)
    racks_with_problems = {href.split("/")[-1][:5] for cls, href, *_ in everything if cls != "pass"}
    shown = CELL.findall(problems)
    assert {href.split("/")[-1][:5] for _, href, *_ in shown} == racks_with_problems
    assert len(shown) == 16 * len(racks_with_problems)


def test_a_node_page_has_history_events_and_time_to_cordon(fleet: Store) -> None:
    xid_node = next(v["node"] for v in fleet.verdicts(criterion="D-DEV-05"))
    html = pages.node(fleet.engine, xid_node, base="/fleet")
    assert f">{xid_node}</h2>" in html
    assert 'id="ttc"' in html and "Xid 79" in html and 'id="history"' in html
    assert re.search(r'<td class="num">\d+\.\d</td>', html)  # seconds to cordon
    words_match_colours(html)
    unknown = pages.node(fleet.engine, "no-such-node", base="/fleet")
    assert "No verdict names this node" in unknown


def test_the_nccl_view_plots_the_worst_subject_against_the_baseline_band(fleet: Store) -> None:
    html = pages.nccl(fleet.engine, base="/fleet")
    assert "<svg" in html and 'class="band"' in html and 'class="threshold"' in html
    assert html.count('class="series') == 3  # one line per repeat
    assert "pass threshold: 90 % of" in html and 'id="subjects"' in html
    inter = pages.nccl(fleet.engine, base="/fleet", profile="h100-sxm-ndr", scope="inter-2x8")
    assert "r0000-n01+r0002-n01" in inter


def test_baselines_show_every_version_and_its_status(fleet: Store) -> None:
    html = pages.baselines(fleet.engine, base="/fleet")
    statuses = [cls for cls, _ in BADGE.findall(html)]
    assert (
        statuses.count("promoted") == 2
        and statuses.count("retired") == 1
        and statuses.count("candidate") == 1
    )
    words_match_colours(html)


def test_coverage_lists_nodes_never_tested_and_the_age_of_each_r2(fleet: Store) -> None:
    html = pages.coverage(fleet.engine, base="/fleet")
    never = re.search(r'<p class="mono" id="never">(.*?)</p>', html, re.S)
    assert never is not None and "r00" in never.group(1)  # the bench's never-idle node
    assert html.count("/fleet/node/") >= 64
    words_match_colours(html)


def test_the_criteria_matrix_marks_what_is_not_implemented(fleet: Store) -> None:
    html = pages.criteria(fleet.engine, base="/fleet")
    for c in CRITERIA:
        assert f'<tr id="{c.id}">' in html
    assert html.count(">not implemented<") == len([c for c in CRITERIA if c.id not in IMPLEMENTED_BY])
    words_match_colours(html)


def test_kueue_and_onboarding_views(fleet: Store) -> None:
    html = pages.kueue(fleet.engine, base="/fleet")
    for name, _ in KUEUE_SCENARIOS:
        assert name in html
    assert "v0.19.2" in html and 'id="kueue-runs"' in html
    assert words_match_colours(html) > len(KUEUE_SCENARIOS)
    onboarding = pages.onboarding(fleet.engine, base="/fleet")
    assert "rack_onboarding/manual__r0000" in onboarding and "in_service" in onboarding


@pytest.mark.parametrize(
    "render",
    [
        lambda e: pages.fleet(e, base="/f"),
        lambda e: pages.node(e, "x", base="/f"),
        lambda e: pages.nccl(e, base="/f"),
        lambda e: pages.baselines(e, base="/f"),
        lambda e: pages.coverage(e, base="/f"),
        lambda e: pages.criteria(e, base="/f"),
        lambda e: pages.kueue(e, base="/f"),
        lambda e: pages.onboarding(e, base="/f"),
    ],
)
def test_every_view_renders_an_empty_store(tmp_path, render: Callable[..., str]) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(f"sqlite:///{tmp_path}/empty.db")
    upgrade(engine)
    html = render(engine)
    assert html.startswith("<!doctype html>") and "</html>" in html
    engine.dispose()
