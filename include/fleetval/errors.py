"""Typed errors. A parse error becomes an `inconclusive` verdict upstream, never a pass."""

from __future__ import annotations


class FleetvalError(Exception):
    """Base of every error fleetval raises on purpose."""


class ParseError(FleetvalError):
    """Tool output that cannot be read: truncated, garbage, or an unknown format.

    Carries the tool, a reason and a short excerpt of the offending input so a verdict can
    quote what could not be read.
    """

    def __init__(self, tool: str, reason: str, excerpt: str = "") -> None:
        self.tool = tool
        self.reason = reason
        self.excerpt = excerpt[:200]
        super().__init__(f"{tool}: {reason}" + (f" (near: {self.excerpt!r})" if self.excerpt else ""))


class SpecError(FleetvalError):
    """A fleet spec, scenario or form input that is not valid."""


class PolicyError(FleetvalError):
    """A policy table or threshold that is inconsistent."""
