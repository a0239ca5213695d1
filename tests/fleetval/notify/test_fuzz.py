"""The notification policy over random histories of a fleet: whatever the sequence of quarantines
and returns, no evaluation crashes, a storm never becomes a page per node, every incident that
opened is announced once per channel at most per opening, and a fleet that stops changing goes
quiet."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from fleetval.notify.policy import DEFAULT_POLICY, Channel
from tests.fleetval.notify.sim import T0, Notifier, node_names, snapshot
from tests.fuzz import fuzz_settings

NODES = node_names(24)
STEP = dt.timedelta(minutes=10)

histories = st.lists(st.sets(st.sampled_from(NODES)), min_size=1, max_size=12)


@fuzz_settings(200)
@given(histories)
def test_random_histories_never_page_per_node_in_a_storm_and_settle(history: list[set[str]]) -> None:
    notifier = Notifier()
    now = T0
    for quarantined in history:
        planned = notifier.evaluate(snapshot(NODES, quarantined, now=now), now)
        for channel in Channel:
            singles = [
                n
                for n in planned.notices
                if n.channel is channel and n.count == 1 and not n.resolves and n.kind == "quarantine"
            ]
            # At or past the storm threshold, the openings of one evaluation are one summary.
            assert len(singles) < DEFAULT_POLICY.storm_threshold, (channel, len(singles))
            sent = [n for n in planned.notices if n.channel is channel and not n.suppressed]
            keys = Counter((n.dedup_key, n.resolves) for n in sent)
            assert all(c == 1 for c in keys.values()), keys  # never the same message twice at once
        now += STEP
    # The fleet stops changing: the next evaluations say nothing.
    last = history[-1]
    for _ in range(2):
        planned = notifier.evaluate(snapshot(NODES, last, now=now), now)
        assert [n for n in planned.notices if n.kind == "quarantine" and not n.suppressed] == []
        now += STEP
