"""Baselines: statistics over stored measurements of our own reference nodes (never spec sheets).

`fleetval.baselines.nccl` derives an NCCL busbw baseline (per message size and a headline number)
from measurement rows with pandas; promotion and versioning live in the store.
"""

from __future__ import annotations
