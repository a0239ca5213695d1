"""fleetval's reference training job for checkpoint drills (its own package: it needs PyTorch,
which fleetval's Airflow image does not carry)."""
