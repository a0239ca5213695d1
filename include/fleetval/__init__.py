"""fleetval: validates a Kubernetes GPU fleet layer by layer.

The domain package: parsers and judges are pure, policies are data, the store keeps raw output,
measurements and verdicts. It never imports Airflow; Airflow only decides when and where.
"""

from __future__ import annotations

__version__ = "0.1.0"
