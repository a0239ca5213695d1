"""Event triggers (AssetWatcher sources) for the event-driven DAGs; run in the triggerer."""
