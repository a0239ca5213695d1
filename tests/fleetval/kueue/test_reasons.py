"""The waiting reason (D-SCHED-07) and the reason mode, on real Kueue Workloads and describe output."""

from __future__ import annotations

import datetime as dt

import pytest

from fleetval.errors import ParseError
from fleetval.kueue.parse import parse_workload
from fleetval.kueue.reasons import GRANULAR, LEGACY, detect_mode, reason_matches, waiting_reason
from tests.paths import FIXTURES

KUEUE = FIXTURES / "kueue"
NOW = dt.datetime(2024, 2, 11, 4, 50, tzinfo=dt.UTC)


def read(name: str) -> dict:
    return parse_workload((KUEUE / name).read_text())


@pytest.mark.parametrize(
    ("name", "state", "reason", "message"),
    [
        ("workload-admitted-status-docs.yaml", "Admitted", "Admitted", "The workload is admitted"),
        (
            "workload-pending-insufficient-quota-docs.yaml",
            "Pending",
            "Pending",
            "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor "
            "in ClusterQueue",
        ),
        (
            "workload-inadmissible-localqueue-missing-docs.yaml",
            "Pending",
            "Inadmissible",
            "LocalQueue user-queue doesn't exist",
        ),
        (
            # Evicted=True while QuotaReserved=False: the eviction is done, the job waits again.
            "workload-preempted-evicted-pending-docs.yaml",
            "Pending",
            "Pending",
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
            "default-flavor, 9 more needed",
        ),
        ("workload-quota-reserved-admissioncheck-pending-docs.yaml", "WaitingForAdmissionChecks", None, None),
        (
            "workload-requeuestate-podsreadytimeout-backoff-docs.yaml",
            "Backoff",
            None,
            "requeue at 2024-02-11T04:51:03Z",
        ),
        (
            "workload-describe-pending-didnt-fit-v1alpha2-docs.txt",
            "Pending",
            "Pending",
            "workload didn't fit",
        ),
        (
            "workload-describe-finished-jobfinished-v1alpha2-docs.txt",
            "Finished",
            "JobFinished",
            "Job finished successfully",
        ),
    ],
)
def test_waiting_reason_of_real_workloads(
    name: str, state: str, reason: str | None, message: str | None
) -> None:
    assert waiting_reason(read(name), NOW).to_json() == {"state": state, "reason": reason, "message": message}


def test_backoff_ends_when_the_requeue_time_passes() -> None:
    later = NOW + dt.timedelta(minutes=5)
    assert (
        waiting_reason(read("workload-requeuestate-podsreadytimeout-backoff-docs.yaml"), later).state
        == "Queued"
    )


def test_a_workload_without_conditions_is_queued_not_an_error() -> None:
    assert waiting_reason({"status": {}}, NOW).state == "Queued"
    assert waiting_reason({}, NOW).state == "Queued"


def test_deactivated_and_evicting_come_before_admitted() -> None:
    evicting = {
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "QuotaReserved",
                    "message": "Quota reserved",
                },
                {
                    "type": "Admitted",
                    "status": "True",
                    "reason": "Admitted",
                    "message": "The workload is admitted",
                },
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "Preempted",
                    "message": "Preempted to accommodate",
                },
            ]
        }
    }
    assert waiting_reason(evicting, NOW).state == "Evicting"
    assert waiting_reason({**evicting, "spec": {"active": False}}, NOW).state == "Deactivated"


def test_describe_events_are_read_in_order() -> None:
    events = read("workload-events-pending-resource-unavailable-in-clusterqueue-xpk-issue603.txt")["events"]
    assert [(e["type"], e["reason"], e["from"]) for e in events] == [
        ("Warning", "Pending", "kueue-admission")
    ] * 2
    assert (
        events[1]["message"]
        == "couldn't assign flavors to pod set job: resource memory unavailable in ClusterQueue"
    )
    assert events[0]["age"] == "4m23s (x3 over 4m23s)"


def test_the_reason_mode_is_read_from_what_the_cluster_wrote() -> None:
    assert detect_mode([read("workload-pending-insufficient-quota-docs.yaml")]) == LEGACY
    assert detect_mode([read("workload-admitted-status-docs.yaml")]) is None
    granular = {
        "status": {"conditions": [{"type": "Admitted", "status": "False", "reason": "NoReservation"}]}
    }
    assert detect_mode([granular]) == GRANULAR
    assert reason_matches("waiting_for_quota", "WaitingForQuota", GRANULAR)
    assert not reason_matches("waiting_for_quota", "Pending", GRANULAR)
    assert not reason_matches("waiting_for_quota", "WaitingForQuota", LEGACY)
    assert reason_matches("exceeds_quota", "ExceedsMaxQuota", None) and reason_matches(
        "exceeds_quota", "Pending", None
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "kind: Pod\n",
        "status: [1]\n",
        "status:\n  conditions:\n  - type: QuotaReserved\n    status: maybe\n",
        "{not json",
        "\x00\x01\x02",
        "- a\n- b\n",
    ],
)
def test_what_is_not_a_workload_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_workload(text)
