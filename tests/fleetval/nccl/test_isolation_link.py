"""Isolation through the suite's steps (tests/nccl_lab.py) when a *link* is bad: a sweep pair
fails while both its nodes pass with others. The link is reported (`bad_links`, `warn` on both
members), no node is blamed; and how the search reads a probe (majority of its repeats)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from fleetval.fleet.spec import load_fleet_spec
from fleetval.nccl import baselines as nccl_baselines
from fleetval.nccl import isolation as nccl_isolation
from fleetval.nccl.simulated_run import nccl_output
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import Store
from tests.nccl_lab import NETLAB, PROFILE, Lab, sweep

HEALTHY = ["r01-n01", "r01-n03", "r01-n05", "r02-n02", "r02-n04", "r02-n06"]
LINK = ("r01-n03", "r02-n04")  # a sweep pair: node i with node i + 3 of the rack-ordered list


@pytest.fixture
def lite(tmp_path: pathlib.Path) -> Iterator[tuple[Store, Lab]]:
    engine = make_engine(f"sqlite:///{tmp_path}/fleetval.db")
    upgrade(engine)
    yield Store(engine), Lab()
    engine.dispose()


def test_a_bad_link_is_reported_as_the_link_and_blames_no_node(
    lite: tuple[Store, Lab], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, cluster = lite
    reference = sweep(store, cluster, run_key="reference", nodes=HEALTHY, dry_run=True)
    for scope in ("intra-8", "inter-2x8"):
        store.promote_baseline(
            nccl_baselines.establish_baseline(store, reference, PROFILE, scope).baseline_id
        )

    # IB completion errors on the probes of this one pair only: what a bad cable between them does
    broken = load_fleet_spec(NETLAB.read_text() + f"  - {{node: {LINK[0]}, kind: nccl.errors}}\n")

    def output(fleet: Any, probe: Any, *, seed_salt: str) -> str:
        linked = set(probe.params["nodes"]) == set(LINK)
        return nccl_output(broken if linked else fleet, probe, seed_salt=seed_salt)

    monkeypatch.setattr("tests.nccl_lab.nccl_output", output)  # what Lab.run calls
    run_id = sweep(store, cluster, run_key="link", nodes=HEALTHY, dry_run=True)

    isolation = store.run_meta(run_id)["isolation"]
    assert isolation["failed_pairs"] == [list(LINK)]
    assert (isolation["bad"], isolation["undetermined"]) == ([], [])
    assert isolation["bad_links"] == [list(LINK)] and isolation["policy"] == nccl_isolation.POLICY.policy_id
    # the failing pair was probed again (not stored over the sweep's verdicts), and failed again
    again = [g for g in isolation["groups"] if set(g["nodes"]) == set(LINK)]
    assert len(again) >= nccl_isolation.POLICY.link_margin and not any(g["healthy"] for g in again)
    rows = {(r["criterion"], r["subject"]): r for r in store.verdicts(run_id)}
    assert rows[("D-NET-NCCL-03", "+".join(LINK))]["result"] == "fail"  # the sweep's verdict stays
    for node in LINK:
        verdict = rows[("D-NET-NCCL-02", node)]
        assert (verdict["result"], verdict["rule_id"]) == ("warn", "nccl.isolation.bad_link")
        assert verdict["evidence"]["bad_links"] == [list(LINK)]
    assert not [r for r in rows.values() if r["rule_id"] == "nccl.isolation.located"]
    assert store.run_meta(run_id)["gate"]["result"] == "fail"  # the failing pair still halts


def _verdict(
    criterion: str, result: str, repeats: list[str] | None = None
) -> tuple[str, str, dict[str, Any]]:
    evidence = {"repeats": [{"repeat": i, "result": r} for i, r in enumerate(repeats)]} if repeats else {}
    return criterion, result, evidence


@pytest.mark.parametrize(
    ("verdicts", "healthy"),
    [
        ([_verdict("D-NET-NCCL-02", "pass", ["pass", "pass", "pass"])], True),
        # one repeat of three below the baseline: the judge fails the pair, the search reads a pass
        ([_verdict("D-NET-NCCL-02", "fail", ["pass", "fail", "pass"])], True),
        ([_verdict("D-NET-NCCL-03", "fail", ["fail", "fail", "pass"])], False),
        ([_verdict("D-NET-NCCL-TRANSPORT", "fail")], False),  # no per-repeat evidence: as judged
        ([_verdict("D-NET-NCCL-04", "fail")], False),  # the spread over the repeats: as judged
        ([_verdict("D-NET-NCCL-02", "inconclusive", ["inconclusive"] * 3)], True),
    ],
)
def test_a_probe_is_read_by_the_majority_of_its_repeats(
    verdicts: list[tuple[str, str, dict[str, Any]]], healthy: bool
) -> None:
    assert nccl_isolation.majority_healthy(verdicts) is healthy


def test_link_verdicts_name_the_other_end() -> None:
    report = nccl_isolation.IsolationReport(
        failed_pairs=[["a", "b"], ["c", "d"]],
        bad=["c"],
        undetermined=[],
        probes_used=7,
        nodes_considered=6,
        bad_links=[["a", "b"]],
    )
    verdicts = {v.subject: v for v in nccl_isolation.isolation_verdicts(report)}
    assert set(verdicts) == {"a", "b", "c"}
    assert verdicts["c"].result.value == "fail" and verdicts["c"].evidence["bad_links"] == []
    assert "fails with b" in verdicts["a"].reason and "fails with a" in verdicts["b"].reason
    assert (
        report.to_json()["bad_links"] == [["a", "b"]] and report.to_json()["failed_pairs"]
    )  # old fields stay
