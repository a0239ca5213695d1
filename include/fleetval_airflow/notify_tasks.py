"""Tasks of `fleet_notifications`: evaluate (read the store, plan, record) and deliver (send what
is pending through each channel's notifier)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import task

from fleetval.store.engine import outage_is_one_line


@task
@outage_is_one_line
def evaluate() -> dict[str, Any]:
    """The fleet now against the ledger; the notices planned and recorded (pending, suppressed by
    the rate limit, or shadow), one line each."""
    from fleetval.notify import evaluation
    from fleetval.notify.policy import policy_from_settings
    from fleetval.settings import NotifySettings
    from fleetval_airflow import config, notifiers

    settings = NotifySettings.from_env()
    policy = policy_from_settings(settings)
    channels = notifiers.configured(settings.channels)
    planned = evaluation.evaluate(config.store().engine, policy, channels)
    for n in planned.notices:
        state = "suppressed" if n.suppressed else "shadow" if planned.shadow else "pending"
        action = "resolve" if n.resolves else "trigger"
        print(f"{n.channel.value:<9} {action:<7} {state:<10} {n.dedup_key}  {n.title}")
    names = [c.value for c in channels] or "none"
    print(f"policy {policy.id}; channels {names}; {len(planned.notices)} notices")
    return {
        "policy": policy.id,
        "shadow": planned.shadow,
        "channels": [c.value for c in channels],
        "notices": len(planned.notices),
        "suppressed": sum(n.suppressed for n in planned.notices),
    }


@task
@outage_is_one_line
def deliver() -> dict[str, Any]:
    """Send every pending notice through its channel's notifier, oldest first. A channel without
    its connection is skipped; a failed send stays pending (the next run tries again, up to
    `MAX_ATTEMPTS`) and turns this task red. Shadow mode sends nothing."""
    from fleetval.settings import NotifySettings
    from fleetval.store import notifications as ledger_store
    from fleetval_airflow import config, notifiers

    settings = NotifySettings.from_env()
    engine = config.store().engine
    outbox = ledger_store.pending(engine)
    if settings.shadow:
        print(f"shadow mode: {len(outbox)} pending notices left unsent")
        return {"sent": 0, "pending": len(outbox)}
    available = {c.value for c in notifiers.configured({o.channel for o in outbox})}
    sent, failed = 0, []
    for outgoing in outbox:
        now = dt.datetime.now(dt.UTC)
        if outgoing.channel not in available:
            ledger_store.mark(engine, outgoing, now=now, skipped=True)
            continue
        try:
            notifiers.notifier_for(outgoing.channel, outgoing.payload).notify({})
        except Exception as exc:  # any receiver's or provider's failure: recorded, retried later
            why = f"{type(exc).__name__}: {exc}"[:1000]
            status = ledger_store.mark(engine, outgoing, now=now, error=why)
            failed.append(f"{outgoing.channel} {outgoing.dedup_key}: {why} ({status})")
            continue
        ledger_store.mark(engine, outgoing, now=now)
        sent += 1
    print(f"{sent} sent, {len(failed)} failed")
    if failed:
        raise RuntimeError("notices not delivered:\n" + "\n".join(failed))
    return {"sent": sent, "failed": 0}
