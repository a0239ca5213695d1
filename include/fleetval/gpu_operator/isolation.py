"""D-OP-03: a pod that requests no GPU sees no GPU. The probe, its output's parser and the judge
(the last two pure).

A runtime that honours an image's `NVIDIA_VISIBLE_DEVICES=all` for a pod without a GPU request
(the container toolkit's `accept-nvidia-visible-devices-envvar-when-unprivileged = true`, or a
legacy default runtime) hands every GPU of the node to every pod: another tenant's memory and
faults become yours. The probe is such a pod: an image that sets `NVIDIA_VISIBLE_DEVICES=all`,
no GPU request, one per node class (hardware profile). It prints three sections::

    NVIDIA_VISIBLE_DEVICES=all
    --- ls -1 /dev
    core
    ...
    --- nvidia-smi -L
    /bin/bash: line 5: nvidia-smi: command not found
    --- exit 127

A device node `/dev/nvidia<N>`, a GPU listed by `nvidia-smi -L`, or GPU ids in
`NVIDIA_VISIBLE_DEVICES` (the device plugin assigned GPUs to a pod that asked for none) fail.
Output without the sections is `inconclusive`, never a pass. The fix: the container toolkit's
`accept-nvidia-visible-devices-envvar-when-unprivileged = false` and the device plugin's
`DEVICE_LIST_STRATEGY=volume-mounts` (the GPU Operator's `toolkit.env` / `devicePlugin.env`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from fleetval.errors import ParseError
from fleetval.nccl.probe import NCCL_TESTS_IMAGE
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result, Verdict

CRITERION: Final = "D-OP-03"
RULE_ID: Final = "operator-no-gpu-pod-isolation-v1"
TOOL: Final = "gpu-isolation"
# Any image that sets NVIDIA_VISIBLE_DEVICES=all serves; the NCCL probe's is already pinned.
PROBE_IMAGE: Final = NCCL_TESTS_IMAGE
SCRIPT: Final = (
    'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"\n'
    'echo "--- ls -1 /dev"\n'
    "ls -1 /dev\n"
    'echo "--- nvidia-smi -L"\n'
    "nvidia-smi -L\n"
    'echo "--- exit $?"\n'
)
_DEVICE = re.compile(r"^nvidia(\d+)$")
_LISTED_GPU = re.compile(r"^GPU \d+: .*\(UUID: [^)]+\)$")
_NO_GPU_VALUES: Final = frozenset({"", "all", "void", "none"})
# A verdict's action is at most 64 characters (the store's column); the fix is in the reason's doc.
ACTIONS: Final = {
    Result.PASS: "none",
    Result.FAIL: "keep tenants off this node class; fix the runtime config",
    Result.INCONCLUSIVE: "rerun the probe; check its log",
    Result.ERROR: "fix the harness (the probe pod did not run)",
}


def isolation_probe(node: str, profile: str, *, run_key: str, image: str | None = None) -> ProbeSpec:
    """The no-GPU pod for one node class, pinned to `node`."""
    return ProbeSpec(
        probe_key=f"{run_key}/gpu-isolation/{node}",
        tool=TOOL,
        node=node,
        image=image or PROBE_IMAGE,
        command=("/bin/bash", "-c"),
        args=(SCRIPT,),
        gpus=0,
        timeout_s=300,
        params={"profile": profile},
    )


@dataclass(frozen=True, slots=True)
class IsolationOutput:
    visible_devices: str
    device_nodes: tuple[str, ...]
    listed_gpus: tuple[str, ...]
    nvidia_smi_exit: int

    def to_json(self) -> dict[str, Any]:
        return {
            "NVIDIA_VISIBLE_DEVICES": self.visible_devices,
            "device_nodes": list(self.device_nodes),
            "listed_gpus": list(self.listed_gpus),
            "nvidia_smi_exit": self.nvidia_smi_exit,
        }


def parse_isolation(text: str) -> IsolationOutput:
    lines = text.splitlines()
    env = [ln for ln in lines if ln.startswith("NVIDIA_VISIBLE_DEVICES=")]
    marks = [i for i, ln in enumerate(lines) if ln.startswith("--- ")]
    heads = [lines[i] for i in marks]
    if len(env) != 1 or heads[:2] != ["--- ls -1 /dev", "--- nvidia-smi -L"] or len(heads) != 3:
        raise ParseError(TOOL, "not the probe's three sections (env, ls -1 /dev, nvidia-smi -L, exit)", text)
    exit_line = re.fullmatch(r"--- exit (\d{1,3})", heads[2])
    if exit_line is None:
        raise ParseError(TOOL, "the nvidia-smi exit line cannot be read", heads[2])
    dev = lines[marks[0] + 1 : marks[1]]
    smi = lines[marks[1] + 1 : marks[2]]
    if "null" not in dev:
        raise ParseError(TOOL, "the /dev listing is not a container's (no /dev/null)", "\n".join(dev))
    return IsolationOutput(
        visible_devices=env[0].split("=", 1)[1].strip(),
        device_nodes=tuple(sorted((d for d in dev if _DEVICE.match(d)), key=lambda d: int(d[6:]))),
        listed_gpus=tuple(ln for ln in smi if _LISTED_GPU.match(ln)),
        nvidia_smi_exit=int(exit_line.group(1)),
    )


def judge_isolation(subject: str, raw: str, *, exit_code: int | None, error: str | None) -> Verdict:
    judged_against = {"rule_id": RULE_ID}

    def verdict(result: Result, reason: str, evidence: dict[str, Any]) -> Verdict:
        return Verdict(CRITERION, subject, result, ACTIONS[result], RULE_ID, reason, evidence, judged_against)

    if error:
        return verdict(Result.ERROR, f"the probe pod did not run: {error}", {"error": error})
    try:
        out = parse_isolation(raw)
    except ParseError as exc:
        return verdict(Result.INCONCLUSIVE, f"unreadable probe output: {exc}", {"exit_code": exit_code})
    evidence = out.to_json()
    leaks = []
    if out.device_nodes:
        leaks.append(f"device nodes {', '.join('/dev/' + d for d in out.device_nodes)}")
    if out.listed_gpus:
        leaks.append(f"nvidia-smi lists {len(out.listed_gpus)} GPU(s)")
    if out.visible_devices.lower() not in _NO_GPU_VALUES:
        leaks.append(f"NVIDIA_VISIBLE_DEVICES={out.visible_devices}")
    if leaks:
        return verdict(Result.FAIL, "a pod that requested no GPU sees GPUs: " + "; ".join(leaks), evidence)
    if out.nvidia_smi_exit == 0:
        return verdict(Result.INCONCLUSIVE, "nvidia-smi ran and listed nothing: cannot tell", evidence)
    return verdict(
        Result.PASS, "no GPU device, driver utility or GPU id reaches a pod that requested no GPU", evidence
    )
