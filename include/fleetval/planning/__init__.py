"""Planning: which probes to run, in which grouping, to learn the most from the fewest runs."""

from __future__ import annotations
