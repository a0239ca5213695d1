"""`nvidia-smi -L`: the GPUs a container sees, index → UUID.

```
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f6c0d2e-...)
  MIG 1g.10gb     Device  0: (UUID: MIG-...)
```

DCGM's JSON report names GPUs by index only, so a probe prints this listing before its report and
the listing maps the report's indexes to UUIDs. MIG device lines belong to the GPU above them and
are skipped here.
"""

from __future__ import annotations

import re
from typing import Final

from fleetval.errors import ParseError

_GPU_LINE: Final = re.compile(r"^GPU (\d{1,3}): [^\n]{1,200}? \(UUID: (GPU-[0-9a-fA-F-]{36})\)\s*$")
_MIG_LINE: Final = re.compile(r"^\s+MIG \S{1,40}\s+Device\s+\d{1,3}: \(UUID: MIG-[^)\s]{1,80}\)\s*$")


def parse_gpu_list(text: str) -> dict[str, str]:
    """GPU index → UUID from `nvidia-smi -L`; a line that is no GPU nor MIG device is a ParseError."""
    gpus: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or _MIG_LINE.match(line):
            continue
        match = _GPU_LINE.match(line)
        if match is None:
            raise ParseError("nvidia-smi", "not an nvidia-smi -L line", line)
        gpus[str(int(match.group(1)))] = match.group(2)
    return gpus


def split_gpu_list(raw: str) -> tuple[dict[str, str], str]:
    """Split a probe's output into the leading `nvidia-smi -L` listing and the rest (the tool's report).

    Output without a listing returns no UUIDs and the output unchanged."""
    lines = raw.splitlines(keepends=True)
    head = 0
    while head < len(lines) and (
        _GPU_LINE.match(lines[head].rstrip("\r\n")) or _MIG_LINE.match(lines[head].rstrip("\r\n"))
    ):
        head += 1
    if head == 0:
        return {}, raw
    return parse_gpu_list("".join(lines[:head])), "".join(lines[head:])
