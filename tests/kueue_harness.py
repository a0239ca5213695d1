"""What the Kueue scenario harness gets wrong on a Kueue that behaves as Kueue does: the real one
(v0.17) and the simulated one, which models the same pod-group rules. The harness ends a job by
deleting its pods and resubmits a preempted job once none of its pods is left; Kueue keeps a
retriable pod group's Workload admitted with its quota when its pods are deleted (its
`kueue.x-k8s.io/managed` finalizer keeps them, Failed), never lets the pods of a preempted group go
until replacements exist, and releases a victim's quota only when its pods have ended (their grace
period). Each expectation below fails for one of those reasons, on both backends; the table shrinks
when the harness ends jobs as Kueue's users do."""

from __future__ import annotations

from typing import Final

K1: Final = "finish deletes a retriable pod group's pods: its Workload stays admitted, with its quota"
K2: Final = "the preempted group's pods stay (finalizer) until replaced: the runner never resubmits it"
K3: Final = "the preemptor waits for the victim's 30 s grace period (bound 10 s)"

HARNESS_FAILURES: Final = {  # (scenario, step) -> the harness assumption that broke
    ("d-sched-01-02-quota", 8): K1,
    ("d-sched-04-no-reclaim", 8): K1,
    ("d-sched-05-preempt-resume", 3): K3,
    ("d-sched-05-preempt-resume", 5): K2,
    ("d-sched-05-preempt-resume", 7): K2,
    ("d-sched-06-gang", 5): K1,
    ("x-01-priority-order", 7): K1,
    ("x-01-priority-order", 9): K1,
    ("x-01-priority-order", 11): K1,
    ("x-01-priority-order", 12): K1,
    ("x-02-strict-fifo", 8): K1,
    ("x-06-mig-profiles", 5): K1,
}
