"""Xid: kernel-log parser, the decision table, the judge, remediation steps (cordon, DCGM r3) and
the simulated kernel lines."""
