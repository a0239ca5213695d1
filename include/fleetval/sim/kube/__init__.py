"""The simulated cluster served as a Kubernetes API (`fleetval sim serve`)."""
