"""A simulated GPU node's side: its runtime, and the virtual kubelet that joins a real control plane."""
