"""Where the control plane's binaries are: built from their Go modules by
`scripts/build-controlplane.sh` (versions pinned in controlplane/versions.env) into a cache outside
the work tree, with `bin/` holding the binaries of the last build and `versions.json` what they are.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fleetval.errors import FleetvalError

BINARIES: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue", "kubectl")
KUEUE_MANIFESTS: Final = "kueue-manifests.yaml"  # Kueue's config/default, rendered by kustomize


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetval" / "controlplane"


def default_bin_dir() -> Path:
    return Path(os.environ.get("FLEETVAL_CONTROLPLANE_BIN") or cache_root() / "bin")


@dataclass(frozen=True)
class Binaries:
    directory: Path
    versions: dict[str, str]

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def kueue_manifests(self) -> Path:
        return self.directory / KUEUE_MANIFESTS


def find_binaries(directory: Path | None = None) -> Binaries:
    """The built binaries, or an error that says how to build them."""
    directory = directory or default_bin_dir()
    missing = [name for name in (*BINARIES, KUEUE_MANIFESTS) if not (directory / name).is_file()]
    if missing:
        raise FleetvalError(
            f"the control plane is not built in {directory} (missing: {', '.join(missing)}); "
            "build it with `make controlplane` (Go and the Go module proxy), or point "
            "FLEETVAL_CONTROLPLANE_BIN / --bin-dir at a folder that holds it"
        )
    try:
        versions = json.loads((directory / "versions.json").read_text())
    except (OSError, ValueError):
        versions = {}
    return Binaries(directory, {str(k): str(v) for k, v in versions.items()})
