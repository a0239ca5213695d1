"""DCGM: the diagnostic probe, its parser and judge, the simulated `dcgmi diag` output, and the
weekly health sweep built on them."""
