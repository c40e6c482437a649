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
import logging
import random
import tempfile
from pathlib import Path

import numpy as np
import torch

from curriculum.checkpoint import CheckpointManager, read_state
from curriculum.config import Config, diff_keys, is_resumable, load_config
from curriculum.engine.distributed import full_parameters
from curriculum.engine.policy import load_role_weights, read_role_weights, save_base, save_role
from curriculum.errors import ConfigError, DamagedCheckpoint  # noqa: F401 - runstate.DamagedCheckpoint
from curriculum.rundir import RunDir, RunLock, claim

log = logging.getLogger("selfplay")


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


STATE_KEYS = ("round", "stage", "steps", "tokens", "levels", "metrics_lines")


def _torch_file(path: Path, keys: tuple[str, ...]) -> dict:
    try:
        obj = torch.load(path, weights_only=False)
    except Exception as exc:  # unpickling garbage can raise nearly anything
        raise DamagedCheckpoint(f"{path}: unreadable ({type(exc).__name__}: {exc})") from exc
    if not isinstance(obj, dict) or any(k not in obj for k in keys):
        raise DamagedCheckpoint(f"{path}: not a dict with keys {', '.join(keys)}")
    return obj


def _check_rng(path: Path, rng: dict) -> None:
    try:  # on throwaway generators, so that nothing live changes before the whole checkpoint is checked
        random.Random().setstate(rng["python"])
        np.random.RandomState().set_state(rng["numpy"])
        torch.Generator().set_state(rng["torch"])
    except Exception as exc:
        raise DamagedCheckpoint(f"{path}: not this run's random state ({type(exc).__name__}: {exc})") from exc


def _check_optimizer(path: Path, role, state: dict) -> None:
    if role.engine is not None:  # DeepSpeed's own layout; import_trainer_state checks it
        return
    opt = state["optimizer"]
    try:
        saved = [len(g["params"]) for g in opt["param_groups"]]
        ok = isinstance(opt["state"], dict) and isinstance(state["scheduler"], dict)
    except (KeyError, TypeError) as exc:
        raise DamagedCheckpoint(f"{path}: not an optimizer state ({type(exc).__name__}: {exc})") from exc
    live = [len(g["params"]) for g in role.optimizer.param_groups]
    if not ok or saved != live:
        raise DamagedCheckpoint(f"{path}: optimizer of parameter groups {saved}, this model has {live}")


def read(path: Path, roles: dict, names: list[str]) -> dict:
    """Every file of checkpoint ``path``, read and checked against ``roles`` without changing
    anything: a ``DamagedCheckpoint`` naming the file and what is wrong, so that the caller can
    fall back to the checkpoint before, exactly. ``names``: the loop's files (``*.json`` parsed)."""
    out = {"weights": {}, "optim": {}}
    for name, role in roles.items():
        try:
            out["weights"][name] = read_role_weights(role, path / name)
        except (ValueError, OSError) as exc:
            raise DamagedCheckpoint(str(exc)) from exc
        f = path / f"{name}_optim.pt"
        out["optim"][name] = _torch_file(f, () if role.engine is not None else ("optimizer", "scheduler"))
        _check_optimizer(f, role, out["optim"][name])
    out["rng"] = _torch_file(path / "rng.pt", ("python", "numpy", "torch", "cuda"))
    _check_rng(path / "rng.pt", out["rng"])
    texts = {}
    for name in names:
        try:
            texts[name] = (path / name).read_text(encoding="utf-8")
            if name.endswith(".json"):
                texts[name] = json.loads(texts[name])
        except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise DamagedCheckpoint(f"{path / name}: unreadable ({type(exc).__name__}: {exc})") from exc
    state = read_state(path)
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise DamagedCheckpoint(f"{path / 'state.json'}: lacks {', '.join(missing)}")
    out["state"], out["files"] = state, texts
    return out


def apply(path: Path, loaded: dict, roles: dict) -> None:
    """Put what ``read`` returned into the roles and the random streams."""
    for name, role in roles.items():
        with full_parameters(role, modifier_rank=0):
            load_role_weights(role, path / name, loaded["weights"][name])
        role.load_trainer_state(loaded["optim"][name])
    rng = loaded["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


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


def _on_main(dist, fn):
    """``fn()`` on rank 0; a ConfigError it raises is raised on every rank, so a refusal stops them all."""
    out, error = None, None
    if dist.is_main:
        try:
            out = fn()
        except ConfigError as exc:
            error = str(exc)
    error = dist.broadcast_object(error)
    if error is not None:
        raise ConfigError(error)
    return out


def open_run(dist, rundir: RunDir, cfg: Config, resume: bool, config_text: str) -> RunLock | None:
    """Rank 0 claims the run directory (``rundir.claim``), then refuses now what would stop the run later,
    before a model is built: a config edit the checkpoint cannot take, a checkpoints/ that cannot be
    written. Returns the lock (None on the other ranks)."""
    def check() -> None:
        ckpts = rundir.checkpoints
        if resume and (path := rundir.checkpoint_manager().latest()) is not None:
            check_config(path, cfg)
        try:
            ckpts.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=ckpts):  # what a checkpoint write needs
                pass
        except OSError as exc:
            raise ConfigError(f"cannot write checkpoints to {ckpts} ({exc.strerror or exc}); make it writable "
                              "or choose another run.dir") from exc

    lock = _on_main(dist, lambda: claim(rundir, resume, config_text))
    try:
        _on_main(dist, check)
    except ConfigError:
        if lock is not None:
            lock.release()
        raise
    return lock


def restore(ckpt: CheckpointManager, dist, roles: dict, cfg: Config, names: list[str]) -> tuple[Path, dict]:
    """Load the newest checkpoint every file of which loads into ``roles`` (rank 0 chooses, checking each
    before anything changes; the other ranks read the one it chose). Returns its path and what was read:
    ``{"state": ..., "files": {name: content}}``."""
    path = loaded = damaged = None
    if dist.is_main:
        for candidate in ckpt.intact():
            try:
                loaded = read(candidate, roles, names)
            except DamagedCheckpoint as exc:
                log.warning("skipping checkpoint %s: %s", candidate, exc)
                damaged = damaged or exc
                continue
            path = candidate
            break
    path = dist.broadcast_object(path)
    if path is None:
        raise damaged if damaged is not None else FileNotFoundError(f"no complete checkpoint under {ckpt.dir}")
    log.info("resuming from %s", path)
    check_config(path, cfg)
    if loaded is None:
        loaded = read(path, roles, names)
    apply(path, loaded, roles)
    return path, loaded
