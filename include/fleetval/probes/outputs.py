"""What a probe left, kept verbatim in the store before anything parses it."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Collection, Sequence

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


def probe_in(output: ProbeOutput) -> ProbeIn:
    """A probe's output as the store keeps it; harness errors are kept too.

    A multi-node probe (an NCCL pair) lists its nodes in `params["nodes"]`; its ProbeOutput.node
    is only the joined subject."""
    return ProbeIn(
        probe_key=output.probe_key,
        tool=output.tool,
        raw=output.raw,
        nodes=tuple((output.spec.get("params") or {}).get("nodes") or (output.node,)),
        exit_code=output.exit_code,
        spec={**output.spec, "harness_error": output.error},
        started_at=dt.datetime.fromtimestamp(output.started_at, dt.UTC),
        finished_at=dt.datetime.fromtimestamp(output.finished_at, dt.UTC),
    )


def store_probe_outputs(store: Store, run_id: int, outputs: Sequence[ProbeOutput]) -> list[str]:
    """Keep raw output verbatim before anything parses it; harness errors are kept too."""
    store.ingest(run_id, [probe_in(o) for o in outputs])
    return [o.probe_key for o in outputs]


def missing_probe_outputs(
    specs: Sequence[ProbeSpec], stored_keys: Collection[str], *, finished_at: float
) -> list[ProbeIn]:
    """A harness error, ready to store, for every probe whose key is not in `stored_keys` (its
    task failed before the pod completed, e.g. a pod that never started)."""
    return [
        probe_in(
            probe_output(
                s,
                "",
                exit_code=None,
                error="the probe task ended without the pod completing",
                finished_at=finished_at,
            )
        )
        for s in specs
        if s.probe_key not in stored_keys
    ]


def record_missing_probes(store: Store, run_id: int, specs: Sequence[ProbeSpec]) -> list[str]:
    """Store a harness error for every probe that left nothing in the store (its task failed
    before the pod completed, e.g. a pod that never started); returns their nodes."""
    stored = {p["probe_key"] for p in store.probes(run_id, [s.probe_key for s in specs], with_raw=False)}
    store.ingest(run_id, missing_probe_outputs(specs, stored, finished_at=time.time()))
    return [s.node for s in specs if s.probe_key not in stored]
