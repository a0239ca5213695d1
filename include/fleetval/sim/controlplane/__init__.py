"""A real Kubernetes control plane and Kueue on loopback, built from their Go modules."""
