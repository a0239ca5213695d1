"""nccl-tests: the probe (a pod or an MPIJob), parser, judge, baselines, pair planning, fault
isolation and the post-upgrade gate, and the simulated nccl-tests output."""
