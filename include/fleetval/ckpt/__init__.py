"""The job layer: checkpoint save/resume drills (D-JOB-CKPT-01..07)."""
