"""Probes in general: the pod a probe runs in, and its raw output kept before it is judged."""
