"""Early warning from trends: a node's history across sweeps → `warn` before a hard failure.

Pure functions, no I/O: `history` (the records), `stats` (robust slope, monotonicity, reset-aware
increments), `rules` (the rules and thresholds as data), `judge` (the verdicts) and `replay` (a
simulated fleet replayed sweep by sweep, for the bench and the tests).
"""
