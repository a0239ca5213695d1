"""The reference job's restore on a device other than the CPU, as a GPU node runs it
(FLEETVAL_DEVICE=auto picks CUDA there). No GPU here: the `meta` device stands in for it, since a
checkpoint loaded with `map_location` set to it moves tensors off the CPU exactly as CUDA's does.
Before the fix every resume on a GPU died with `TypeError: RNG state must be a torch.ByteTensor`:
the saved CPU RNG state was moved to the job's device, and PyTorch's RNG setters take only a CPU
ByteTensor."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
train = pytest.importorskip("fleetval_ckpt_job.train")


def _config(directory: Path, device: str) -> train.Config:
    env = {"FLEETVAL_CKPT_DIR": str(directory), "FLEETVAL_DEVICE": "cpu", "FLEETVAL_STEPS": "4"}
    return dataclasses.replace(train.Config.from_env(env), device=device)


def test_a_checkpoint_restores_on_a_non_cpu_device(tmp_path: Path) -> None:
    cpu = train.Trainer(_config(tmp_path, "cpu"))
    for _ in range(3):
        cpu.train_step()
    train.Checkpointer(cpu).save(3, "interval")
    saved_rng = torch.get_rng_state().clone()
    saved = cpu.digests()

    torch.manual_seed(12345)  # a resumed process starts from another RNG state
    resumed = train.Trainer(_config(tmp_path, "meta"))
    assert train.Checkpointer(resumed).load() == 3
    assert torch.equal(torch.get_rng_state(), saved_rng)  # the CPU RNG, restored on the CPU
    assert resumed.loader.state() == cpu.loader.state()
    assert resumed.scheduler.state_dict() == cpu.scheduler.state_dict()
    assert all(p.device.type == "meta" for p in resumed.model.parameters())  # the rest on the job's device
    assert saved["rng"]  # (digests are what the drill compares; on CPU they match bit for bit)
