"""The fleet spec: profiles, racks and declarative faults of a simulated fleet, and the GPU
identities derived from it."""
