"""The checkpoint directory: atomic writes, the listing a drill judges, and deliberate corruption.

Standard library only, so `fleetval-ckpt-inspect` and `fleetval-ckpt-corrupt` start in
milliseconds and work on any image that has Python.

Layout (the drill contract, see docs/checkpoint.md, "Checkpoint drill contract"):

    <dir>/step-00000040/            one complete checkpoint per directory
        model.pt optimizer.pt ...   the state, one file per component
        manifest.json               {"format", "step", "components", "files": {name: {bytes, sha256}}}
    <dir>/latest                    the name of the newest complete checkpoint, replaced atomically
    <dir>/.tmp-step-00000080-<pid>  a save in progress (never read)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
LATEST = "latest"
MANIFEST_FORMAT = "fleetval-ckpt/1"
LISTING_FORMAT = "fleetval-ckpt-listing/1"
CHECKPOINT_NAME = re.compile(r"^step-(\d{8})$")
TEMPORARY_PREFIX = ".tmp-"
# What the corruption overwrites: enough bytes to change tensor data, few enough to keep the file
# loadable (a checkpoint that fails to unpickle is the easy case; silent bad weights are the hard one).
CORRUPT_BYTES = 64


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes) -> None:
    """Write and fsync one file (the caller renames it into place and syncs the directory)."""
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def replace_pointer(directory: Path, target: str) -> None:
    """Point `latest` at `target`: write a temporary file, fsync it, rename over, fsync the directory."""
    tmp = directory / f"{TEMPORARY_PREFIX}{LATEST}-{os.getpid()}"
    write_durably(tmp, (target + "\n").encode())
    os.replace(tmp, directory / LATEST)
    fsync_dir(directory)


def read_pointer(directory: Path) -> str | None:
    try:
        return (directory / LATEST).read_text().strip() or None
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def listing(directory: Path) -> dict[str, Any]:
    """What is on the storage: every checkpoint's files with their real sizes and digests, its
    manifest as written, the `latest` pointer and any save left in progress. No judgement here."""
    entries: list[dict[str, Any]] = []
    temporary: list[str] = []
    if directory.is_dir():
        for child in sorted(directory.iterdir()):
            if child.name.startswith(TEMPORARY_PREFIX):
                temporary.append(child.name)
                continue
            if not child.is_dir() or not CHECKPOINT_NAME.match(child.name):
                continue
            files = {
                f.name: {"bytes": f.stat().st_size, "sha256": sha256_file(f)}
                for f in sorted(child.iterdir())
                if f.is_file()
            }
            manifest: Any = None
            manifest_error = None
            try:
                manifest = json.loads((child / MANIFEST).read_text())
            except FileNotFoundError:
                manifest_error = "no manifest.json"
            except (ValueError, UnicodeDecodeError) as exc:
                manifest_error = f"manifest.json is not JSON: {exc}"
            entries.append(
                {"name": child.name, "files": files, "manifest": manifest, "manifest_error": manifest_error}
            )
    latest_path = directory / LATEST
    latest = read_pointer(directory)
    return {
        "format": LISTING_FORMAT,
        "dir": str(directory),
        "exists": directory.is_dir(),
        "latest": latest,
        "latest_present": latest_path.exists(),
        "checkpoints": entries,
        "temporary": temporary,
    }


def corrupt_latest(directory: Path) -> dict[str, Any]:
    """Overwrite bytes in the middle of the largest file of the checkpoint `latest` names.

    The manifest is left alone: a job that checks its checksums sees the damage, one that does not
    loads damaged weights."""
    pointer = read_pointer(directory)
    if pointer is None:
        raise SystemExit(f"error: {directory}/{LATEST} is missing or empty: nothing to corrupt")
    target_dir = directory / pointer
    files = (
        [f for f in target_dir.iterdir() if f.is_file() and f.name != MANIFEST] if target_dir.is_dir() else []
    )
    if not files:
        raise SystemExit(f"error: {target_dir} has no state files to corrupt")
    victim = max(files, key=lambda f: (f.stat().st_size, f.name))
    before = sha256_file(victim)
    size = victim.stat().st_size
    offset = max(0, size // 2 - CORRUPT_BYTES // 2)
    with victim.open("r+b") as f:
        f.seek(offset)
        original = f.read(CORRUPT_BYTES)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in original))
        f.flush()
        os.fsync(f.fileno())
    return {
        "corrupted": f"{pointer}/{victim.name}",
        "checkpoint": pointer,
        "offset": offset,
        "bytes": len(original),
        "sha256_before": before,
        "sha256_after": sha256_file(victim),
    }


def inspect_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fleetval-ckpt-inspect", description="Print a checkpoint directory's listing as JSON."
    )
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    print(json.dumps(listing(args.directory), sort_keys=True))
    return 0


def corrupt_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fleetval-ckpt-corrupt",
        description="Damage the newest checkpoint (bytes in its largest file) and print what changed.",
    )
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    print(json.dumps(corrupt_latest(args.directory), sort_keys=True))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(inspect_main())
