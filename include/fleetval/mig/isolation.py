"""D-GPU-MIG-03 and -04: one MIG instance filled to its last byte, its neighbour's workload and view
unaffected. The probe pods, their scripts, the parsers of what they print and the judges (the last
two pure).

**The real tool.** Both pods run NVIDIA's NGC PyTorch image (`PROBE_IMAGE`): its `python3` with
PyTorch allocates and computes on the one MIG device the device plugin gave the container (CUDA
sees a MIG device as device 0; one process drives one MIG device, so the filler starts a child per
device). Nothing is installed: the scripts are passed in the pod's environment.

- **The filler (instance A)**, `FILL_SCRIPT`, in a pod fleetval creates through the API and
  deletes when done (`fill_pod`): it asks for every instance of the probed profile on the node but
  one, so the instance the workload gets is the last one left, and every neighbour of it of that
  profile is filled. It prints its `nvidia-smi -L` (which GPU each of its MIG devices is on), then
  for each MIG device allocates 64 MiB blocks until CUDA says out of memory, prints `filled <MIG
  uuid> <MiB allocated> <MiB total>`, then `filled-all <n>`, and holds the memory (sleeps) until the
  pod is deleted.
- **The workload (instance B)**, `WORKLOAD_SCRIPT` inside `PROBE_SCRIPT`, a probe pod
  (KubernetesPodOperator) asking for one instance of the profile, run twice: `baseline` (nothing
  filled) and `during` (the filler holding its instances). It prints `nvidia-smi -L`, `nvidia-smi`
  (the MIG devices and processes it can see: D-GPU-MIG-04) and the workload's numbers: the
  device's total and free memory, whether 90 % of the free memory can be allocated, and fp16
  matmul TFLOPS over 10 s (D-GPU-MIG-03).

**Judged.** D-GPU-MIG-03 (`judge_fill`): the filler really filled its instances (>= 90 % of each
device's memory), and during the fill the workload's instance kept its total and free memory
(within `FREE_MIB_TOLERANCE`), its allocation still succeeded, and its throughput stayed within
`THROUGHPUT_TOLERANCE` of the baseline. D-GPU-MIG-04 (`judge_visibility`): during the fill the
workload's container sees exactly one MIG device (the one it was given), the `MIG devices:` table
lists no other instance, and no process of another instance; the parent GPU's memory use is not
read (R560 prints the whole GPU's there). Output without its sections is `inconclusive`; a pod
that never ran is `error`; two pods on different GPUs cannot show isolation: `inconclusive`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from fleetval.errors import ParseError
from fleetval.k8s.scheduling import node_name_affinity
from fleetval.mig.parser import MigGpu, parse_mig_list
from fleetval.mig.smi import SmiReport, parse_smi
from fleetval.pinned_images import MIG_WORKLOAD_IMAGE
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result, Verdict

CRITERION_FILL: Final = "D-GPU-MIG-03"
CRITERION_VISIBILITY: Final = "D-GPU-MIG-04"
RULE_FILL: Final = "mig-fill-neighbour-unaffected-v1"
RULE_VISIBILITY: Final = "mig-neighbour-invisible-v1"
TOOL: Final = "mig-workload"
FILL_TOOL: Final = "mig-fill"
PROBE_IMAGE: Final = MIG_WORKLOAD_IMAGE
FILL_LABEL: Final = "fleetval.io/mig-fill"
# What counts as unaffected, as data: free memory may differ by the CUDA context's jitter, the
# throughput by run-to-run noise. A filler that holds less than FILLED_FRACTION of a device did not
# fill it.
FREE_MIB_TOLERANCE: Final = 64
THROUGHPUT_TOLERANCE: Final = 0.10
FILLED_FRACTION: Final = 0.90
ALLOC_FRACTION: Final = 0.9  # the workload allocates this share of its free memory

# The workload: CUDA device 0 is the one MIG device the container was given.
WORKLOAD_SCRIPT: Final = """\
# fleetval-mig-workload v1
import time
import torch

oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
print("fleetval-mig-workload 1", flush=True)
dev = torch.device("cuda", 0)
props = torch.cuda.get_device_properties(dev)
print(f"device {props.name} sm {props.multi_processor_count}", flush=True)
free, total = torch.cuda.mem_get_info(dev)
print(f"mem_total_mib {total >> 20}", flush=True)
print(f"mem_free_mib {free >> 20}", flush=True)
want = int(free * 0.9) >> 20
try:
    block = torch.empty(want << 20, dtype=torch.uint8, device=dev)
    print(f"alloc_mib {want} ok", flush=True)
except oom as exc:
    block = None
    print(f"alloc_mib {want} failed {type(exc).__name__}", flush=True)
a = torch.randn(4096, 4096, dtype=torch.float16, device=dev)
b = torch.randn_like(a)
torch.cuda.synchronize(dev)
count, start = 0, time.perf_counter()
while time.perf_counter() - start < 10.0:
    for _ in range(10):
        a @ b
    torch.cuda.synchronize(dev)
    count += 10
elapsed = time.perf_counter() - start
print(f"matmul_tflops {2 * 4096**3 * count / elapsed / 1e12:.2f}", flush=True)
print("done", flush=True)
"""

# The filler: one child per MIG device (one process drives one MIG device), each holding all the
# memory it can get until the pod is deleted.
FILL_SCRIPT: Final = """\
# fleetval-mig-fill v1
import os
import re
import subprocess
import sys
import time

CHILD = '''
import os, time, torch
oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
dev = torch.device("cuda", 0)
free, total = torch.cuda.mem_get_info(dev)
blocks = []
while True:
    try:
        blocks.append(torch.empty(64 << 20, dtype=torch.uint8, device=dev))
    except oom:
        break
print(f"filled {os.environ['CUDA_VISIBLE_DEVICES']} {len(blocks) * 64} {total >> 20}", flush=True)
while True:
    time.sleep(3600)
'''
listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
uuids = re.findall(r"\\(UUID: (MIG-[^)]+)\\)", listing)
print(f"fleetval-mig-fill 1 devices {len(uuids)}", flush=True)
print(listing, end="", flush=True)
children = [
    subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": uuid},
        stdout=subprocess.PIPE,
        text=True,
    )
    for uuid in uuids
]
for child in children:
    print(child.stdout.readline().strip(), flush=True)
print(f"filled-all {len(children)}", flush=True)
while True:
    time.sleep(3600)
"""

PROBE_SCRIPT: Final = (
    'echo "--- nvidia-smi -L"\n'
    "nvidia-smi -L\n"
    'echo "--- nvidia-smi"\n'
    "nvidia-smi\n"
    'echo "--- workload"\n'
    'python3 -c "$FLEETVAL_WORKLOAD"\n'
    'echo "--- exit $?"\n'
)
_SECTIONS: Final = ("--- nvidia-smi -L", "--- nvidia-smi", "--- workload")
_FIELD: Final = re.compile(r"^(mem_total_mib|mem_free_mib|matmul_tflops) (\d{1,9}(?:\.\d{1,6})?)$", re.ASCII)
_ALLOC: Final = re.compile(r"^alloc_mib (\d{1,9}) (ok|failed [A-Za-z]{1,64})$", re.ASCII)
_FILLED: Final = re.compile(r"^filled (MIG-[0-9A-Za-z/-]{1,100}) (\d{1,9}) (\d{1,9})$", re.ASCII)
_FILLED_ALL: Final = re.compile(r"^filled-all (\d{1,6})$", re.ASCII)
ACTIONS: Final = {
    Result.PASS: "none",
    Result.FAIL: "keep tenants off shared MIG GPUs here; check MIG/driver",
    Result.INCONCLUSIVE: "rerun the MIG isolation probes; check their logs",
    Result.ERROR: "fix the harness (the probe pod did not run)",
}


def resource_name(profile: str) -> str:
    """The device plugin's resource for a MIG profile (`1g.10gb+me` is `nvidia.com/mig-1g.10gb.me`)."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def workload_probe(
    node: str, profile: str, phase: str, *, run_key: str, image: str | None = None
) -> ProbeSpec:
    """The workload pod on one instance of `profile` on `node`; `phase` is baseline or during."""
    return ProbeSpec(
        probe_key=f"{run_key}/{TOOL}/{phase}/{node}",
        tool=TOOL,
        node=node,
        image=image or PROBE_IMAGE,
        command=("/bin/bash", "-c"),
        args=(PROBE_SCRIPT,),
        gpus=1,
        gpu_resource=resource_name(profile),
        timeout_s=900,
        env={"FLEETVAL_WORKLOAD": WORKLOAD_SCRIPT},
        params={"phase": phase, "profile": profile},
    )


def fill_pod(
    node: str, profile: str, count: int, *, name: str, namespace: str, image: str | None = None
) -> dict[str, Any]:
    """The filler pod: `count` instances of `profile` on `node`, held until the pod is deleted."""
    resource = resource_name(profile)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/part-of": "fleetval",
                FILL_LABEL: "true",
                "fleetval.io/tool": FILL_TOOL,
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "affinity": node_name_affinity(node),  # by the Node's name, not its hostname label
            "serviceAccountName": "fleetval-probe",
            "terminationGracePeriodSeconds": 5,
            "activeDeadlineSeconds": 21600,  # never outlives a run that forgot it by more than 6 h
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "fleetval.io/maintenance", "operator": "Exists"},
                {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
            ],
            "containers": [
                {
                    "name": "fill",
                    "image": image or PROBE_IMAGE,
                    "command": ["python3", "-c", FILL_SCRIPT],
                    "resources": {
                        "limits": {resource: str(count)},
                        "requests": {resource: str(count), "cpu": "1"},
                    },
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }


# --- parsing ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkloadOutput:
    """What one workload probe printed."""

    listing: tuple[MigGpu, ...]  # nvidia-smi -L
    smi: SmiReport
    mem_total_mib: int
    mem_free_mib: int
    alloc_mib: int
    alloc_ok: bool
    alloc_error: str
    matmul_tflops: float | None  # None: the workload died before (e.g. after a failed allocation)
    done: bool
    exit_code: int

    @property
    def mig_uuids(self) -> tuple[str, ...]:
        return tuple(d.uuid for gpu in self.listing for d in gpu.devices)

    @property
    def gpu_uuid(self) -> str | None:
        return self.listing[0].uuid if len(self.listing) == 1 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "mig_devices_listed": list(self.mig_uuids),
            "gpu_uuid": self.gpu_uuid,
            "mig_table": [d.to_json() for d in self.smi.mig_devices],
            "processes": [p.to_json() for p in self.smi.processes],
            "mem_total_mib": self.mem_total_mib,
            "mem_free_mib": self.mem_free_mib,
            "alloc_mib": self.alloc_mib,
            "alloc_ok": self.alloc_ok,
            "alloc_error": self.alloc_error,
            "matmul_tflops": self.matmul_tflops,
            "done": self.done,
            "exit_code": self.exit_code,
        }


def parse_workload(text: str) -> WorkloadOutput:
    """The probe's sections: `nvidia-smi -L`, `nvidia-smi`, the workload's lines, its exit status."""
    if not isinstance(text, str) or len(text) > 4 * 1024 * 1024:
        raise ParseError(TOOL, "input is not text of a probe's size")
    lines = text.splitlines()
    marks = [i for i, line in enumerate(lines) if line.startswith("--- ")]
    heads = [lines[i] for i in marks]
    if heads[:3] != list(_SECTIONS) or len(heads) != 4:
        raise ParseError(
            TOOL, "not the probe's sections (nvidia-smi -L, nvidia-smi, workload, exit)", text[:200]
        )
    exit_line = re.fullmatch(r"--- exit (\d{1,3})", heads[3], re.ASCII)
    if exit_line is None:
        raise ParseError(TOOL, "the workload's exit line cannot be read", heads[3])
    listing = parse_mig_list("\n".join(lines[marks[0] + 1 : marks[1]]))
    smi = parse_smi("\n".join(lines[marks[1] + 1 : marks[2]]))
    body = [line.strip() for line in lines[marks[2] + 1 : marks[3]]]
    if not body or body[0] != "fleetval-mig-workload 1":
        raise ParseError(
            TOOL, "the workload did not start (no fleetval-mig-workload line)", "\n".join(body)[:200]
        )
    fields: dict[str, str] = {}
    alloc = None
    for line in body[1:]:
        if m := _FIELD.match(line):
            if m[1] in fields:
                raise ParseError(TOOL, f"{m[1]} printed twice", line)
            fields[m[1]] = m[2]
        elif m := _ALLOC.match(line):
            alloc = m
    for key in ("mem_total_mib", "mem_free_mib"):
        if key not in fields or "." in fields[key]:
            raise ParseError(TOOL, f"the workload's {key} is missing or not a count", "\n".join(body)[:200])
    if alloc is None:
        raise ParseError(TOOL, "the workload's allocation line is missing", "\n".join(body)[:200])
    total, free = int(fields["mem_total_mib"]), int(fields["mem_free_mib"])
    if free > total or total == 0:
        raise ParseError(TOOL, "free memory above the device's total", "\n".join(body)[:200])
    return WorkloadOutput(
        listing=tuple(listing),
        smi=smi,
        mem_total_mib=total,
        mem_free_mib=free,
        alloc_mib=int(alloc[1]),
        alloc_ok=alloc[2] == "ok",
        alloc_error="" if alloc[2] == "ok" else alloc[2].removeprefix("failed "),
        matmul_tflops=float(fields["matmul_tflops"]) if "matmul_tflops" in fields else None,
        done=body[-1] == "done",
        exit_code=int(exit_line[1]),
    )


@dataclass(frozen=True, slots=True)
class FillOutput:
    devices: tuple[tuple[str, int, int], ...]  # (MIG uuid, MiB allocated, MiB total)
    complete: bool  # `filled-all` printed
    parents: dict[str, str]  # MIG uuid -> the GPU it is on (the filler's nvidia-smi -L)

    def to_json(self) -> dict[str, Any]:
        return {
            "devices": [
                {"uuid": u, "allocated_mib": a, "total_mib": t, "gpu": self.parents.get(u)}
                for u, a, t in self.devices
            ],
            "complete": self.complete,
        }


def parse_fill(text: str) -> FillOutput:
    """The filler's log: its `nvidia-smi -L`, one `filled` line per device, then `filled-all <n>`."""
    if not isinstance(text, str) or len(text) > 4 * 1024 * 1024:
        raise ParseError(FILL_TOOL, "input is not text of a probe's size")
    lines = [line.strip() for line in text.splitlines()]
    if not lines or not lines[0].startswith("fleetval-mig-fill 1 devices "):
        raise ParseError(FILL_TOOL, "the filler did not start (no fleetval-mig-fill line)", text[:200])
    listed = [line for line in lines[1:] if line.startswith(("GPU ", "MIG "))]
    parents = {
        d.uuid: gpu.uuid for gpu in (parse_mig_list("\n".join(listed)) if listed else []) for d in gpu.devices
    }
    devices = []
    complete = False
    for line in lines[1:]:
        if m := _FILLED.match(line):
            allocated, total = int(m[2]), int(m[3])
            if allocated > total:
                raise ParseError(FILL_TOOL, "allocated more than the device holds", line)
            if m[1] not in parents:
                raise ParseError(FILL_TOOL, "a filled device its nvidia-smi -L did not list", line)
            devices.append((m[1], allocated, total))
        elif m := _FILLED_ALL.match(line):
            if int(m[1]) != len(devices):
                raise ParseError(FILL_TOOL, f"filled-all {m[1]} after {len(devices)} devices", line)
            complete = True
    return FillOutput(tuple(devices), complete, parents)


# --- judging ------------------------------------------------------------------------------------------


def _verdict(
    criterion: str, rule: str, subject: str, result: Result, reason: str, evidence: dict[str, Any]
) -> Verdict:
    judged_against = {
        "rule_id": rule,
        "free_mib_tolerance": FREE_MIB_TOLERANCE,
        "throughput_tolerance": THROUGHPUT_TOLERANCE,
        "filled_fraction": FILLED_FRACTION,
    }
    return Verdict(criterion, subject, result, ACTIONS[result], rule, reason, evidence, judged_against)


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the judges read: each probe's raw output and how its pod ended."""

    raw: str
    exit_code: int | None
    error: str | None


def _read(criterion: str, rule: str, node: str, what: str, ev: Evidence | None) -> WorkloadOutput | Verdict:
    if ev is None or ev.error:
        why = ev.error if ev else "no output stored"
        return _verdict(
            criterion, rule, node, Result.ERROR, f"the {what} probe did not run: {why}", {"error": why}
        )
    try:
        return parse_workload(ev.raw)
    except ParseError as exc:
        return _verdict(
            criterion,
            rule,
            node,
            Result.INCONCLUSIVE,
            f"unreadable {what} output: {exc}",
            {"exit_code": ev.exit_code},
        )


def _filled(node: str, fill: Evidence | None, criterion: str, rule: str) -> FillOutput | Verdict:
    if fill is None or fill.error:
        why = fill.error if fill else "no filler log stored"
        return _verdict(criterion, rule, node, Result.ERROR, f"the filler did not run: {why}", {"error": why})
    try:
        out = parse_fill(fill.raw)
    except ParseError as exc:
        return _verdict(criterion, rule, node, Result.INCONCLUSIVE, f"unreadable filler log: {exc}", {})
    if not out.complete or not out.devices:
        return _verdict(
            criterion,
            rule,
            node,
            Result.INCONCLUSIVE,
            "the filler never reported every device filled",
            out.to_json(),
        )
    return out


def judge_fill(
    node: str, baseline: Evidence | None, during: Evidence | None, fill: Evidence | None
) -> Verdict:
    """D-GPU-MIG-03: the workload's instance while its neighbours are full, against its baseline."""
    c, r = CRITERION_FILL, RULE_FILL
    first = _read(c, r, node, "baseline", baseline)
    if isinstance(first, Verdict):
        return first
    second = _read(c, r, node, "during-fill", during)
    if isinstance(second, Verdict):
        return second
    filled = _filled(node, fill, c, r)
    if isinstance(filled, Verdict):
        return filled
    evidence = {"baseline": first.to_json(), "during": second.to_json(), "fill": filled.to_json()}
    if any(len(out.mig_uuids) != 1 or len(out.smi.mig_devices) != 1 for out in (first, second)):
        reason = "a workload's container does not show the one MIG device it asked for"
        return _verdict(c, r, node, Result.INCONCLUSIVE, reason, evidence)
    if not first.alloc_ok or first.matmul_tflops is None or not first.done:
        return _verdict(
            c,
            r,
            node,
            Result.INCONCLUSIVE,
            "the baseline workload itself did not complete: nothing to compare",
            evidence,
        )
    thin = [(u, a, t) for u, a, t in filled.devices if a < FILLED_FRACTION * t]
    if thin:
        u, a, t = thin[0]
        reason = f"the filler held only {a} of {t} MiB on {u}: the neighbour was not full"
        return _verdict(c, r, node, Result.INCONCLUSIVE, reason, evidence)
    if second.gpu_uuid is None or not _shares_gpu(second, filled):
        reason = "the workload's instance and the filled ones are not on one GPU: not an isolation test"
        return _verdict(c, r, node, Result.INCONCLUSIVE, reason, evidence)
    harm = []
    if second.mem_total_mib != first.mem_total_mib:
        harm.append(f"its memory shrank from {first.mem_total_mib} to {second.mem_total_mib} MiB")
    if first.mem_free_mib - second.mem_free_mib > FREE_MIB_TOLERANCE:
        harm.append(f"its free memory fell from {first.mem_free_mib} to {second.mem_free_mib} MiB")
    if not second.alloc_ok:
        harm.append(f"allocating {second.alloc_mib} MiB failed ({second.alloc_error})")
    if second.matmul_tflops is None or not second.done:
        harm.append(f"the workload did not finish (exit {second.exit_code})")
    elif second.matmul_tflops < (1 - THROUGHPUT_TOLERANCE) * first.matmul_tflops:
        harm.append(f"throughput fell from {first.matmul_tflops:.2f} to {second.matmul_tflops:.2f} TFLOPS")
    if harm:
        return _verdict(
            c, r, node, Result.FAIL, "with the neighbouring instances full, " + "; ".join(harm), evidence
        )
    reason = (
        f"neighbours filled ({len(filled.devices)} instances); this instance kept {second.mem_free_mib} MiB "
        f"free of {second.mem_total_mib}, allocated {second.alloc_mib} MiB, "
        f"{second.matmul_tflops:.2f} TFLOPS (baseline {first.matmul_tflops:.2f})"
    )
    return _verdict(c, r, node, Result.PASS, reason, evidence)


def _shares_gpu(out: WorkloadOutput, filled: FillOutput) -> bool:
    """The workload's GPU holds at least one filled instance (both listings name the parent GPU)."""
    return out.gpu_uuid is not None and any(
        filled.parents.get(u) == out.gpu_uuid for u, _, _ in filled.devices
    )


def judge_visibility(node: str, during: Evidence | None) -> Verdict:
    """D-GPU-MIG-04: what the workload's container sees while its neighbours are full."""
    c, r = CRITERION_VISIBILITY, RULE_VISIBILITY
    out = _read(c, r, node, "during-fill", during)
    if isinstance(out, Verdict):
        return out
    evidence = out.to_json()
    if not out.mig_uuids or not out.smi.mig_devices:
        return _verdict(
            c, r, node, Result.INCONCLUSIVE, "no MIG device listed: not a MIG container", evidence
        )
    seen = []
    if len(out.mig_uuids) != 1:
        seen.append(f"nvidia-smi -L lists {len(out.mig_uuids)} MIG devices")
    if len(out.smi.mig_devices) != 1:
        others = [f"GI {d.gi} ({d.memory_used_mib} MiB used)" for d in out.smi.mig_devices[1:]]
        seen.append(f"the MIG devices table shows {len(out.smi.mig_devices)} instances: " + ", ".join(others))
    mine = {d.gi for d in out.smi.mig_devices[:1]}
    foreign = [p for p in out.smi.processes if p.gi is not None and p.gi not in mine]
    if foreign:
        seen.append(
            "processes of other instances: "
            + ", ".join(f"pid {p.pid} {p.name} on GI {p.gi} ({p.memory_mib} MiB)" for p in foreign[:5])
        )
    if seen:
        return _verdict(
            c, r, node, Result.FAIL, "a tenant's container sees its neighbours: " + "; ".join(seen), evidence
        )
    reason = (
        "the container sees only its own MIG device, with its own memory use, and no other instance's process"
    )
    return _verdict(c, r, node, Result.PASS, reason, evidence)
