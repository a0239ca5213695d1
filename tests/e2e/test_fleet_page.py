"""The fleet-health page on the session's Airflow (api-server with the repository's plugins), over a
store filled through its write path (the bench's fleet at 64 nodes):

- Airflow's authentication holds on every route: anonymous 401, a bad token 403, a viewer's token
  200; no route changes state (every other method 405, for a viewer and an admin alike);
- in a real browser (Debian's chromium driven by Playwright, no browser download): log in on the
  UI's login page as the viewer, open the page inside the UI (its navigation entry, the iframe),
  then every view directly, check what each says, and save a screenshot of each.

Screenshots go to $FLEETVAL_TEST_ARTIFACTS/fleet-page/ when set, else to the test's tmp folder; the
test prints where. Without chromium the test fails (make test installs it: `make tools`).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from bench.fleet_page import KUEUE_SCENARIOS, fill
from fleetval.sim.airflow_run import ADMIN, VIEWER, LocalAirflow
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import Store
from tests.e2e.conftest import _recreate

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
ROUTES = ("/", "/node/r0000-n01", "/nccl", "/baselines", "/coverage", "/criteria", "/kueue", "/onboarding")


@pytest.fixture(scope="module")
def page_airflow(local_airflow: tuple[LocalAirflow, str], pg_server_url: str) -> LocalAirflow:
    """The session's Airflow over a fresh store holding a 64-node fleet's history."""
    airflow, url = local_airflow
    _recreate(pg_server_url, url)
    engine = make_engine(url)
    upgrade(engine)
    fill(Store(engine), nodes=64, weekly=2, nccl=1, seed=5)
    engine.dispose()
    return airflow


def request(
    airflow: LocalAirflow, method: str, path: str, token: str | None = None, body: Any = None
) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else (b"" if method != "GET" else None)
    req = urllib.request.Request(airflow.base + path, method=method, data=data)
    req.add_header("Content-Type", "application/json")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def test_every_route_needs_airflows_authentication_and_none_changes_state(page_airflow: LocalAirflow) -> None:
    airflow = page_airflow
    viewer, admin = airflow.token(VIEWER), airflow.token(ADMIN)
    for route in ROUTES:
        path = "/fleet" + route
        assert request(airflow, "GET", path)[0] == 401, path
        assert request(airflow, "GET", path, token="not-a-jwt")[0] == 403, path
        status, body = request(airflow, "GET", path, token=viewer)
        assert status == 200 and "Fleet health" in body, (path, status, body[:300])
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            for token in (viewer, admin):
                assert request(airflow, method, path, token=token)[0] == 405, (method, path)
    # the viewer may read DAGs but not trigger one: Airflow's own roles, which the page relies on
    trigger = request(
        airflow, "POST", "/api/v2/dags/weekly_health_sweep/dagRuns", token=viewer, body={"logical_date": None}
    )
    assert trigger[0] == 403, trigger

    plugins = json.loads(request(airflow, "GET", "/api/v2/plugins", token=admin)[1])["plugins"]
    (ours,) = [p for p in plugins if p["name"] == "fleetval_fleet_health"]
    assert ours["fastapi_apps"][0]["url_prefix"] == "/fleet"
    assert ours["external_views"][0]["url_route"] == "fleet-health"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = os.environ.get("FLEETVAL_TEST_ARTIFACTS")
    folder = pathlib.Path(root) / "fleet-page" if root else tmp_path_factory.mktemp("fleet-page")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (pathlib.Path(CHROMIUM).exists() or shutil.which("chromium")):
        pytest.fail(
            f"{CHROMIUM} is missing: the fleet page's browser test drives Debian's chromium. "
            "`make tools` (part of `make test`) installs it as root: apt-get install chromium"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw, tempfile.TemporaryDirectory(prefix="fleetval-chromium-") as profile:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=shutil.which("chromium") or CHROMIUM,
            headless=True,
            args=list(CHROMIUM_FLAGS),
            viewport={"width": 1400, "height": 1000},
        )
        try:
            yield context
        finally:
            context.close()


def test_a_viewer_logs_in_and_reads_every_view_in_a_real_browser(
    page_airflow: LocalAirflow, browser: Any, artifacts: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from playwright.sync_api import expect

    airflow = page_airflow
    page = browser.new_page()
    page.set_default_timeout(60_000)

    # the UI's login page (simple auth manager), as a person would
    page.goto(airflow.base + "/")
    page.wait_for_selector('input[name="username"]')
    page.fill('input[name="username"]', VIEWER)
    page.fill('input[name="password"]', airflow.passwords()[VIEWER])
    page.click('button[type="submit"]')
    page.wait_for_url(lambda url: "/auth/login" not in url)

    # the page in Airflow's navigation, opened inside the UI
    nav = page.get_by_role("link", name="Fleet health")
    expect(nav.first).to_be_visible()
    nav.first.click()
    page.wait_for_url("**/plugin/fleet-health")
    frame = page.frame_locator("iframe").first
    expect(frame.locator("#grid")).to_be_visible()
    expect(frame.locator("h2").first).to_have_text("Fleet")
    assert frame.locator("#grid a.cell").count() == 64
    page.screenshot(path=str(artifacts / "00-inside-airflow.png"), full_page=True)

    views = {
        "01-fleet": ("/fleet/", ["Racks × nodes", "64 nodes in 4 racks", "By layer"]),
        "02-fleet-problems": ("/fleet/?layer=device&problems=1", ["with a node not passing"]),
        "03-node": ("/fleet/node/r0000-n01", ["r0000-n01", "Verdict history", "Latest per layer"]),
        "04-nccl": ("/fleet/nccl", ["NCCL busbw against message size", "baseline min–max", "pass threshold"]),
        "05-baselines": ("/fleet/baselines", ["promoted", "retired", "candidate"]),
        "06-coverage": ("/fleet/coverage", ["Days since each node's last DCGM r2", "never tested"]),
        "07-criteria": ("/fleet/criteria", ["D-DEV-03", "checked today", "weekly_health_sweep/"]),
        "08-kueue": ("/fleet/kueue", [KUEUE_SCENARIOS[0][0], "v0.19.2"]),
        "09-onboarding": ("/fleet/onboarding", ["rack_onboarding/manual__r0000", "in_service"]),
    }
    for name, (path, texts) in views.items():
        page.goto(airflow.base + path)
        body = page.locator("main")
        for text in texts:
            expect(body).to_contain_text(text)
        page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)

    # a cell is a link to its node; the chart is drawn
    page.goto(airflow.base + "/fleet/")
    page.locator("#grid a.cell").first.click()
    expect(page.locator("h2").first).to_have_text("r0000-n01")
    page.goto(airflow.base + "/fleet/nccl")
    assert page.locator("svg.chart polyline.series").count() == 3
    with capsys.disabled():
        print(f"\nfleet page screenshots: {artifacts}")
    assert len(list(artifacts.glob("*.png"))) == len(views) + 1
