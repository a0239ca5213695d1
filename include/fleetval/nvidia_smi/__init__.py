"""nvidia-smi output the other tools need (the GPU list a probe pod was given)."""
