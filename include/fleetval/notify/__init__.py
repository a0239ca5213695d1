"""On-call notifications: what changed in the fleet since the last notice (`events`), what to tell
whom and when (`policy`), in each receiver's format (`payloads`) — pure — and one evaluation
against the store (`evaluation`: the ledger is `fleetval.store.notifications`'). Airflow's
notifiers deliver (`dags/fleet_notifications.py`)."""
