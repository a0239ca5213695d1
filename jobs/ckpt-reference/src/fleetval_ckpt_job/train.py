"""fleetval's reference training job for checkpoint drills.

A small deterministic model (an MLP with dropout, AdamW, a step LR schedule) trained on a data set
the job makes itself from its seed. On the CPU two runs from the same state produce bit-identical
losses, so a resumed run can be compared with an uninterrupted one exactly. It follows the drill
contract (docs/checkpoint.md, "Checkpoint drill contract"): configuration from the environment, one JSON line
per step and per checkpoint event on stdout, atomic checkpoints with a manifest of checksums, a
`latest` pointer updated last, a save on SIGTERM, and a check of every checkpoint it loads.

`FLEETVAL_CKPT_FAULTS` breaks it on purpose, one real misbehaviour per flag, so that a drill can
show each criterion catching its defect:

- `non_atomic`: saves in place and points `latest` at the new checkpoint before writing it;
- `missing_optimizer`: leaves the optimizer state out of the checkpoint;
- `skip_step`: resumes one step late (an off-by-one in the step counter);
- `no_sigterm_save`: no SIGTERM handler (the process dies on the signal, as by default);
- `slow_save`: every save blocks for `SLOW_SAVE_S` (storage that stalls);
- `no_integrity_check`: loads whatever `latest` names without checking its checksums.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fleetval_ckpt_job import storage

FAULTS = frozenset(
    {"non_atomic", "missing_optimizer", "skip_step", "no_sigterm_save", "slow_save", "no_integrity_check"}
)
COMPONENTS = ("model", "optimizer", "lr_scheduler", "rng", "data_loader")
SLOW_SAVE_S = 0.4
KEEP_CHECKPOINTS = 3  # older ones are pruned, as training jobs do; three leave a fallback
HOLD_LIMIT_S = 600.0  # a hold nobody ends does not keep a pod forever

# The model and data: sized so a step costs a few milliseconds on one CPU thread and a save
# (about 0.9 MB with the optimizer) stays a small share of the training between two saves.
FEATURES, HIDDEN, SAMPLES, BATCH = 32, 256, 4096, 256


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Config:
    directory: Path
    steps: int
    save_every: int
    seed: int
    pause_in_save: int | None
    hold_at_step: int | None
    faults: frozenset[str]
    device: str
    threads: int
    step_ms: int = 0  # each step takes at least this long (the drill's stand-in for real compute)

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str]) -> Config:
        def integer(name: str, default: int | None, minimum: int = 0) -> int | None:
            text = env.get(name, "").strip()
            if not text:
                return default
            try:
                value = int(text)
            except ValueError:
                raise ConfigError(f"{name}={text!r} is not an integer") from None
            if value < minimum:
                raise ConfigError(f"{name}={value} is below {minimum}")
            return value

        directory = env.get("FLEETVAL_CKPT_DIR", "").strip()
        if not directory:
            raise ConfigError("FLEETVAL_CKPT_DIR is not set (the checkpoint directory)")
        faults = frozenset(f.strip() for f in env.get("FLEETVAL_CKPT_FAULTS", "").split(",") if f.strip())
        if unknown := sorted(faults - FAULTS):
            raise ConfigError(f"unknown FLEETVAL_CKPT_FAULTS {unknown}; known: {sorted(FAULTS)}")
        device = env.get("FLEETVAL_DEVICE", "auto").strip() or "auto"
        if device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"FLEETVAL_DEVICE={device!r}: use auto, cpu or cuda")
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        steps = integer("FLEETVAL_STEPS", 150, 1)
        save_every = integer("FLEETVAL_SAVE_EVERY", 50, 1)
        assert steps is not None and save_every is not None
        return cls(
            directory=Path(directory),
            steps=steps,
            save_every=save_every,
            seed=integer("FLEETVAL_SEED", 0) or 0,
            pause_in_save=integer("FLEETVAL_PAUSE_IN_SAVE", None, 1),
            hold_at_step=integer("FLEETVAL_HOLD_AT_STEP", None, 1),
            faults=faults,
            device=device,
            threads=integer("FLEETVAL_THREADS", 1, 1) or 1,
            step_ms=integer("FLEETVAL_STEP_MS", 0) or 0,
        )


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class Loader:
    """Batches from a per-epoch permutation; its position (epoch, batch) is its whole state."""

    def __init__(self, seed: int) -> None:
        self.seed, self.epoch, self.batch = seed, 0, 0
        self._perm: torch.Tensor | None = None

    def _permutation(self) -> torch.Tensor:
        if self._perm is None:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            self._perm = torch.randperm(SAMPLES, generator=generator)
        return self._perm

    def next(self) -> torch.Tensor:
        if self.batch >= SAMPLES // BATCH:
            self.epoch, self.batch, self._perm = self.epoch + 1, 0, None
        start = self.batch * BATCH
        self.batch += 1
        return self._permutation()[start : start + BATCH]

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch": self.batch}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.batch, self._perm = int(state["epoch"]), int(state["batch"]), None


class Trainer:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.device = torch.device(config.device)
        data = torch.Generator().manual_seed(config.seed)
        inputs = torch.randn(SAMPLES, FEATURES, generator=data)
        weights = torch.randn(FEATURES, 1, generator=data)
        targets = torch.tanh(inputs @ weights) + 0.1 * torch.randn(SAMPLES, 1, generator=data)
        self.inputs, self.targets = inputs.to(self.device), targets.to(self.device)
        torch.manual_seed(config.seed)
        self.model = nn.Sequential(
            nn.Linear(FEATURES, HIDDEN),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, 1),
        ).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=20, gamma=0.9)
        self.loader = Loader(config.seed)
        self.step = 0

    # --- state ------------------------------------------------------------------------------
    def rng_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def digests(self) -> dict[str, str]:
        """A digest per state component: what a resume must restore exactly."""

        def tensors(values: list[torch.Tensor]) -> str:
            digest = hashlib.sha256()
            for t in values:
                digest.update(t.detach().cpu().contiguous().numpy().tobytes())
            return digest.hexdigest()[:16]

        optimizer_state = self.optimizer.state_dict()
        optimizer_tensors = [
            v
            for key in sorted(optimizer_state["state"])
            for _name, v in sorted(optimizer_state["state"][key].items())
            if isinstance(v, torch.Tensor)
        ]
        rng = self.rng_state()
        return {
            "model": tensors(list(self.model.state_dict().values())),
            "optimizer": tensors(optimizer_tensors),
            "lr_scheduler": storage.sha256_bytes(
                json.dumps(self.scheduler.state_dict(), sort_keys=True, default=str).encode()
            )[:16],
            "rng": tensors([rng[k] for k in sorted(rng)]),
            "data_loader": storage.sha256_bytes(json.dumps(self.loader.state(), sort_keys=True).encode())[
                :16
            ],
        }

    def components(self) -> dict[str, bytes]:
        def saved(obj: Any) -> bytes:
            buffer = io.BytesIO()
            torch.save(obj, buffer)
            return buffer.getvalue()

        parts = {
            "model.pt": saved(self.model.state_dict()),
            "optimizer.pt": saved(self.optimizer.state_dict()),
            "lr_scheduler.pt": saved(self.scheduler.state_dict()),
            "rng.pt": saved(self.rng_state()),
            "data_loader.json": json.dumps(self.loader.state()).encode(),
        }
        if "missing_optimizer" in self.config.faults:
            del parts["optimizer.pt"]
        return parts

    def restore(self, directory: Path) -> None:
        def loaded(name: str, device: torch.device) -> Any:
            return torch.load(directory / name, map_location=device, weights_only=True)

        self.model.load_state_dict(loaded("model.pt", self.device))
        if (directory / "optimizer.pt").exists():
            self.optimizer.load_state_dict(loaded("optimizer.pt", self.device))
        self.scheduler.load_state_dict(loaded("lr_scheduler.pt", self.device))
        # RNG states stay on the CPU whatever the job's device: torch.set_rng_state and
        # torch.cuda.set_rng_state take only a CPU ByteTensor (a CUDA one is a TypeError).
        rng = loaded("rng.pt", torch.device("cpu"))
        torch.set_rng_state(rng["cpu"])
        if "cuda" in rng and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], self.device)
        self.loader.restore(json.loads((directory / "data_loader.json").read_text()))

    # --- training ---------------------------------------------------------------------------
    def train_step(self) -> float:
        self.model.train()
        index = self.loader.next().to(self.device)
        self.optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(self.model(self.inputs[index]), self.targets[index])
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return float(loss.item())


class Checkpointer:
    def __init__(self, trainer: Trainer) -> None:
        self.trainer, self.config = trainer, trainer.config
        self.directory = self.config.directory
        self.directory.mkdir(parents=True, exist_ok=True)

    def save(self, step: int, reason: str) -> None:
        faults = self.config.faults
        name = storage.checkpoint_name(step)
        final = self.directory / name
        emit({"event": "save_started", "step": step, "reason": reason})
        started = time.monotonic()
        if "non_atomic" in faults:
            work = final
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            storage.replace_pointer(self.directory, name)
        else:
            work = self.directory / f"{storage.TEMPORARY_PREFIX}{name}-{os.getpid()}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
        files: dict[str, dict[str, Any]] = {}
        for index, (filename, data) in enumerate(self.trainer.components().items()):
            storage.write_durably(work / filename, data)
            files[filename] = {"bytes": len(data), "sha256": storage.sha256_bytes(data)}
            if index == 0 and self.config.pause_in_save == step:
                self._pause(step)
        if "slow_save" in faults:
            time.sleep(SLOW_SAVE_S)
        components = [c for c in COMPONENTS if not (c == "optimizer" and "missing_optimizer" in faults)]
        manifest = {"format": storage.MANIFEST_FORMAT, "step": step, "components": components, "files": files}
        storage.write_durably(work / storage.MANIFEST, json.dumps(manifest, sort_keys=True).encode())
        storage.fsync_dir(work)
        if work != final:
            shutil.rmtree(final, ignore_errors=True)
            os.rename(work, final)
            storage.fsync_dir(self.directory)
            storage.replace_pointer(self.directory, name)
        seconds = time.monotonic() - started
        size = sum(f["bytes"] for f in files.values())
        emit(
            {
                "event": "checkpoint_saved",
                "step": step,
                "path": name,
                "seconds": seconds,
                "bytes": size,
                "reason": reason,
            }
        )
        self._prune()

    def _pause(self, step: int) -> None:
        """The drill's hook: stop inside the write, so its kill lands mid-save every time."""
        emit({"event": "save_paused", "step": step})
        deadline = time.monotonic() + HOLD_LIMIT_S
        while time.monotonic() < deadline:
            time.sleep(0.05)

    def _prune(self) -> None:
        complete = sorted(p for p in self.directory.iterdir() if storage.CHECKPOINT_NAME.match(p.name))
        for old in complete[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)

    def problem(self, directory: Path) -> str | None:
        """Why this checkpoint must not be loaded, or None: the manifest and every file's checksum."""
        try:
            manifest = json.loads((directory / storage.MANIFEST).read_text())
        except FileNotFoundError:
            return "no manifest.json (an incomplete save)"
        except (ValueError, UnicodeDecodeError) as exc:
            return f"manifest.json is unreadable: {exc}"
        if not isinstance(manifest, dict) or manifest.get("format") != storage.MANIFEST_FORMAT:
            return "manifest.json is not a fleetval-ckpt/1 manifest"
        if manifest.get("step") != int(directory.name.split("-")[1]):
            return f"manifest step {manifest.get('step')} does not match {directory.name}"
        files = manifest.get("files")
        if not isinstance(files, dict) or not files:
            return "manifest lists no files"
        for filename, expected in sorted(files.items()):
            path = directory / filename
            if not path.is_file():
                return f"{filename} is missing"
            if path.stat().st_size != expected.get("bytes"):
                return (
                    f"{filename} has {path.stat().st_size} bytes, the manifest says {expected.get('bytes')}"
                )
            if storage.sha256_file(path) != expected.get("sha256"):
                return f"{filename} does not match its sha256 in the manifest"
        return None

    def load(self) -> int:
        """Restore the newest good checkpoint; the step it holds, or 0 for a fresh start."""
        pointer = storage.read_pointer(self.directory)
        candidates = sorted(
            (p.name for p in self.directory.iterdir() if storage.CHECKPOINT_NAME.match(p.name)), reverse=True
        )
        if pointer is not None:
            candidates = [pointer] + [c for c in candidates if c != pointer]
        if "no_integrity_check" in self.config.faults:
            candidates = candidates[:1]
        for name in candidates:
            directory = self.directory / name
            checked = "no_integrity_check" not in self.config.faults
            if checked and (why := self.problem(directory)) is not None:
                emit({"event": "checkpoint_rejected", "path": name, "reason": why})
                continue
            self.trainer.restore(directory)
            return int(name.split("-")[1])
        return 0


def run(config: Config) -> int:
    torch.set_num_threads(config.threads)
    if config.device == "cuda":
        # cuBLAS needs this for deterministic kernels. On the CPU the kernels this model uses are
        # deterministic for a fixed thread count (and the drill checks it), and the switch would
        # import torch's compiler stack: seconds per run.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    terminate = {"requested": False}
    if "no_sigterm_save" not in config.faults:

        def on_sigterm(_signum: int, _frame: object) -> None:
            terminate["requested"] = True

        signal.signal(signal.SIGTERM, on_sigterm)
    trainer = Trainer(config)
    checkpointer = Checkpointer(trainer)
    from_step = checkpointer.load()
    start: dict[str, Any] = {
        "event": "start",
        "from_step": from_step,
        "steps": config.steps,
        "save_every": config.save_every,
        "device": config.device,
        "deterministic": config.device == "cpu",
        "torch": torch.__version__,
        "pid": os.getpid(),
    }
    if from_step:
        start["path"] = storage.checkpoint_name(from_step)
        start["state"] = trainer.digests()
    emit(start)
    step = from_step + (1 if "skip_step" in config.faults and from_step else 0)

    def sigterm_save(at: int) -> int:
        emit({"event": "sigterm", "step": at})
        checkpointer.save(at, "sigterm")
        emit({"event": "exit", "reason": "sigterm", "step": at})
        return 0

    while step < config.steps:
        step += 1
        started = time.monotonic()
        loss = trainer.train_step()
        digests = trainer.digests()
        # A few milliseconds of toy compute would make any save a large share of a step; a real
        # step's length is what the drill's save-time criterion is about.
        if (pad := config.step_ms / 1000 - (time.monotonic() - started)) > 0:
            time.sleep(pad)
        # A step's time is the whole iteration's (the digests are part of this job's step).
        emit({"step": step, "loss": loss, "seconds": time.monotonic() - started, "state": digests})
        if terminate["requested"]:
            return sigterm_save(step)
        if step % config.save_every == 0 or step == config.steps:
            checkpointer.save(step, "final" if step == config.steps else "interval")
        if config.hold_at_step == step:
            emit({"event": "holding", "step": step})
            deadline = time.monotonic() + HOLD_LIMIT_S
            while not terminate["requested"] and time.monotonic() < deadline:
                time.sleep(0.02)
        if terminate["requested"]:
            return sigterm_save(step)
    emit({"event": "done", "step": step})
    return 0


def warm() -> None:
    """Import what the first optimizer imports lazily (torch._dynamo, seconds): a process that
    forks runs calls this once, so that each run starts in milliseconds. Runs no kernel, so no
    thread pool exists at the fork."""
    torch.optim.AdamW([nn.Parameter(torch.zeros(1))])


def main(env: dict[str, str] | None = None) -> int:
    try:
        config = Config.from_env(os.environ if env is None else env)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run(config)


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    entrypoint()
