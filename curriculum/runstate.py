"""A run's state in a checkpoint: both roles, the random streams, and the loop's own files.

Each role is saved in Hugging Face / peft format (``from_pretrained`` loads it) with its
optimizer and schedule as a torch state dict over its full parameters (DeepSpeed partitions
gathered), so a checkpoint resumes on any number of ranks. The loop adds its files (the
pool, the round's task log, the config) and a ``state.json`` of counters; the
``CheckpointManager`` makes the whole write atomic and verified.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import random
from pathlib import Path

import numpy as np
import torch

from curriculum.checkpoint import CheckpointManager
from curriculum.config import Config, diff_keys, is_resumable, load_config
from curriculum.engine.distributed import full_parameters
from curriculum.engine.policy import load_role_weights, save_base, save_role
from curriculum.errors import ConfigError


def checkpoint_name(round: int, stage: int) -> str:
    """``round_0002`` after round 2; ``round_0002+003`` three stages into round 3: names sort in run order."""
    return f"round_{round:04d}" + (f"+{stage:03d}" if stage else "")


def save(ckpt: CheckpointManager, name: str, dist, roles: dict, tokenizer, state: dict, files: dict[str, str],
         with_base: bool = False) -> Path:
    """Write checkpoint ``name``: every rank takes part (DeepSpeed gathers partitions), rank 0 writes.

    ``files`` maps file names to their text. ``with_base``: LoRA on a base that exists nowhere
    else (the embedded model) also writes it, as ``base/``, and the adapters name it by absolute
    path. Returns the checkpoint's path on every rank, also a barrier: no rank runs ahead of (or
    exits before) a complete checkpoint.
    """
    main = dist.is_main
    path = None
    base_dir = ckpt.dir.resolve() / name / "base" if with_base else None  # where it lies once renamed
    # A failed write leaves nothing behind; one that ran out of space is a DiskFullError that says so.
    with ckpt.writing(name) if main else contextlib.nullcontext() as tmp:
        for i, (role_name, role) in enumerate(roles.items()):
            trainer_state = role.trainer_state()
            with full_parameters(role):
                if main:
                    save_role(role, tmp / role_name, tokenizer, str(base_dir) if base_dir else None)
                    torch.save(trainer_state, tmp / f"{role_name}_optim.pt")
                    if base_dir is not None and i == 0:  # both roles' bases are the same frozen weights
                        save_base(role, tmp / "base", tokenizer)
        if main:
            torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}, tmp / "rng.pt")
            for file, text in files.items():
                (tmp / file).write_text(text)
            path = ckpt.finish(name, tmp, state)
    return dist.broadcast_object(path)


def load(path: Path, roles: dict, names: list[str]) -> dict[str, str]:
    """Restore both roles (weights, optimizer, schedule) and the random streams from ``path``;
    return the texts of the loop's files ``names``."""
    for name, role in roles.items():
        with full_parameters(role, modifier_rank=0):
            load_role_weights(role, path / name)
        role.load_trainer_state(torch.load(path / f"{name}_optim.pt", weights_only=False))
    rng = torch.load(path / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return {name: (path / name).read_text() for name in names}


def check_config(path: Path, cfg: Config) -> None:
    """Refuse a resume whose config differs from the checkpoint's in keys that would break the run
    (also when RUN_DIR/config.yaml itself was edited)."""
    saved = path / "config.yaml"
    if not saved.is_file():  # checkpoints of older versions
        return
    refused = [k for k in diff_keys(load_config(saved), cfg) if not is_resumable(k)]
    if refused:
        raise ConfigError(f"{path} was trained with other values of {', '.join(refused)}; these keys cannot "
                          "change on resume (was config.yaml edited?). Restore them, or start a new run.")


def fingerprint(roles: dict, *loop_state) -> str:
    """What every rank must agree on: the loop's state and (unless partitioned) the weights."""
    h = hashlib.sha256(json.dumps(loop_state, sort_keys=True, default=str).encode())
    for role in roles.values():
        if role.engine is None or role.engine.zero_optimization_stage() < 3:
            h.update(repr([float(p.detach().double().sum()) for p in role.params]).encode())
    return h.hexdigest()


def check_in_sync(dist, print_: str, where: str) -> None:
    """Fail loudly, before a checkpoint is written, if the ranks have drifted apart."""
    if dist.world == 1:
        return
    prints = dist.all_gather_object(print_)
    if len(set(prints)) > 1:
        raise RuntimeError(f"ranks out of sync at {where}: " + ", ".join(f"rank {i}: {p[:12]}" for i, p in enumerate(prints)))
