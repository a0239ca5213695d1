"""What a probe left, kept verbatim in the store before anything parses it."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence

from fleetval.nodes import ProbeOutput
from fleetval.probes.pod import ProbeSpec
from fleetval.store.repository import ProbeIn, Store


def probe_output(
    spec: ProbeSpec,
    raw: str,
    *,
    exit_code: int | None,
    error: str | None,
    finished_at: float,
    started_at: float | None = None,
) -> ProbeOutput:
    """What a probe left: its raw output, exit code, and the harness failure if there was one."""
    return ProbeOutput(
        spec.probe_key,
        spec.node,
        spec.tool,
        raw,
        exit_code,
        finished_at if started_at is None else started_at,
        finished_at,
        error=error,
        spec=spec.to_json(),
    )


def store_probe_outputs(store: Store, run_id: int, outputs: Sequence[ProbeOutput]) -> list[str]:
    """Keep raw output verbatim before anything parses it; harness errors are kept too.

    A multi-node probe (an NCCL pair) lists its nodes in `params["nodes"]`; its ProbeOutput.node
    is only the joined subject."""
    store.ingest(
        run_id,
        [
            ProbeIn(
                probe_key=o.probe_key,
                tool=o.tool,
                raw=o.raw,
                nodes=tuple((o.spec.get("params") or {}).get("nodes") or (o.node,)),
                exit_code=o.exit_code,
                spec={**o.spec, "harness_error": o.error},
                started_at=dt.datetime.fromtimestamp(o.started_at, dt.UTC),
                finished_at=dt.datetime.fromtimestamp(o.finished_at, dt.UTC),
            )
            for o in outputs
        ],
    )
    return [o.probe_key for o in outputs]


def record_missing_probes(store: Store, run_id: int, specs: Sequence[ProbeSpec]) -> list[str]:
    """Store a harness error for every probe that left nothing in the store (its task failed
    before the pod completed, e.g. a pod that never started); returns their nodes."""
    stored = {p["probe_key"] for p in store.probes(run_id, [s.probe_key for s in specs], with_raw=False)}
    missing = [s for s in specs if s.probe_key not in stored]
    now = time.time()
    store_probe_outputs(
        store,
        run_id,
        [
            probe_output(
                s,
                "",
                exit_code=None,
                error="the probe task ended without the pod completing",
                finished_at=now,
            )
            for s in missing
        ],
    )
    return [s.node for s in missing]
