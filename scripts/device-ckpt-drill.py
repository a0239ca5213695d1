"""The checkpoint drill on a GPU: the reference job healthy, then with each fault flag, on the
machine's CUDA device (the job's FLEETVAL_DEVICE=auto picks it, as on any GPU node). One JSON line
per run: the fault, each criterion's result and the run's wall time; the last line the total.
Needs PyTorch and nothing else of fleetval's dependencies, so it runs with a GPU machine's own
Python:

    PYTHONPATH=include:jobs/ckpt-reference/src python3 scripts/device-ckpt-drill.py

What a healthy job must show: all seven criteria pass; each fault: the criterion it targets fails.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import torch

from fleetval.ckpt.contract import FAULTS
from fleetval.ckpt.drill import DrillPlan, fault_flags
from fleetval.ckpt.judge import judge_drill
from fleetval.ckpt.local import LocalDrill


def main() -> None:
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (no CUDA device)"
    print(json.dumps({"device": device, "torch": torch.__version__}), flush=True)
    started = time.monotonic()
    for fault in (None, *FAULTS):
        run_started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="fleetval-drill-") as scratch:
            flags = fault_flags([fault] if fault else [])
            evidence = LocalDrill(DrillPlan(), Path(scratch), flags, (), "reference-job@device").run()
            verdicts = judge_drill(evidence)
        results = {v.criterion: v.result.value for v in verdicts}
        failing = {v.criterion: v.reason for v in verdicts if v.result.value != "pass"}
        line = {"fault": fault or "healthy", "results": results, "not_pass": failing}
        line["wall_s"] = round(time.monotonic() - run_started, 1)
        print(json.dumps(line), flush=True)
    print(json.dumps({"total_s": round(time.monotonic() - started, 1)}), flush=True)


if __name__ == "__main__":
    main()
