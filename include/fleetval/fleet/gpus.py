"""Identities of simulated GPUs: UUIDs and PCI addresses derived from the fleet's seed and the
node name only, so every part of the simulator (nodes, probe output, kernel lines) agrees."""

from __future__ import annotations

import hashlib
import uuid
from typing import Final

# PCI bus ids of the eight GPUs of an HGX H100 baseboard as the driver prints them.
HGX_PCI_BUSES: Final = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")


def gpu_uuid(seed: int, node: str, index: int) -> str:
    digest = hashlib.sha256(f"{seed}/{node}/{index}".encode()).digest()
    return f"GPU-{uuid.UUID(bytes=digest[:16])}"


def gpu_pci(index: int) -> str:
    bus = HGX_PCI_BUSES[index] if index < len(HGX_PCI_BUSES) else f"{0xE0 + index:02x}"
    return f"00000000:{bus.upper()}:00.0"
