"""`selfplay export`: one role of a checkpoint as a directory that transformers (or peft) loads.

A full-weights role, or a LoRA role with ``merge``, becomes a plain model directory:
``AutoModelForCausalLM.from_pretrained(out)`` and ``AutoTokenizer.from_pretrained(out)``.
A LoRA role without ``merge`` becomes a peft adapter directory whose config names its base
(model.path, or the embedded base written beside it as ``out/base``).
The run is only read: no lock is taken and nothing is created in the run directory, so a
live run can be exported while it trains.
"""
from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

from curriculum.config import load_config
from curriculum.errors import DamagedCheckpoint, UsageError
from curriculum.rundir import RunDir

log = logging.getLogger(__name__)

ROLES = ("solver", "challenger")


def find_checkpoint(rd: RunDir, name: str | None) -> Path:
    """Checkpoint ``name`` of the run (it must be intact), or its newest intact one."""
    if not rd.is_run():
        raise FileNotFoundError(f"{rd.path} has no config.yaml; is it a run directory?")
    if name is None:
        path = rd.latest_checkpoint()
        if path is None:
            raise FileNotFoundError(f"{rd.path} has no complete checkpoint yet")
        return path
    manager = rd.checkpoint_manager()
    names = manager.names()
    if name not in names:
        raise FileNotFoundError(f"{rd.path} has no checkpoint {name!r}; it has {', '.join(names) or 'none'}")
    problem = manager.verify(rd.checkpoints / name)
    if problem is not None:
        raise FileNotFoundError(f"checkpoint {rd.checkpoints / name} is not usable: {problem}")
    return rd.checkpoints / name


def export_role(run_dir: Path, role: str, out: Path, merge: bool = False, checkpoint: str | None = None) -> str:
    """Write ``role`` of the run's checkpoint to ``out`` (new or empty); returns what was written."""
    if role not in ROLES:
        raise UsageError(f"--role {role!r}: choose {' or '.join(ROLES)}")
    out = Path(out)
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise FileExistsError(errno.EEXIST, "exists and is not empty; export writes a new directory", str(out))
    rd = RunDir(run_dir)
    # Without a name, the newest checkpoint whose role loads: older ones in turn, as a resume does.
    candidates = list(rd.checkpoint_manager().intact()) if checkpoint is None and rd.is_run() else []
    candidates = candidates or [find_checkpoint(rd, checkpoint)]
    # Written beside out, then renamed: a failed export leaves no half a model at out.
    tmp = out.absolute().with_name(f".{out.name}.export-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for i, path in enumerate(candidates):
            saved = path / "config.yaml"  # what the checkpoint was trained with (older ones: the run's)
            cfg = load_config(saved if saved.is_file() else rd.config, ["wandb.mode=disabled", "log.progress=false"])
            try:
                kind = _write(cfg, path, role, tmp, out.absolute(), merge)
                break
            except DamagedCheckpoint as exc:
                if i + 1 == len(candidates):
                    raise
                log.warning("skipping checkpoint %s: %s", path, exc)
                shutil.rmtree(tmp, ignore_errors=True)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return f"{role} of {path.name} -> {out} ({kind})"


def _write(cfg, checkpoint: Path, name: str, tmp: Path, out: Path, merge: bool) -> str:
    from challenger.role import Challenger
    from curriculum.engine.policy import save_base, save_role
    from curriculum.envs import benchmark, held_out_texts, make_env
    from curriculum.warmup import load_role

    env = make_env(cfg.env.name, **cfg.env.kwargs)
    # The trainer's held-out set: only needed to rebuild the embedded base of old LoRA checkpoints.
    held_out = held_out_texts(env, benchmark(env, cfg.eval.seed, cfg.eval.per_level))
    role, tokenizer = load_role(cfg, checkpoint, name, env, held_out, Challenger(env).prompt)
    if role.adapter is None:
        role.model.save_pretrained(tmp)
        kind = "model"
    elif merge:
        role.model.merge_and_unload().save_pretrained(tmp)
        kind = "LoRA merged into its base"
    elif cfg.model.path:  # the adapter's config names model.path's directory
        save_role(role, tmp, tokenizer)
        kind = f"peft adapter on {cfg.model.path}"
    else:  # the embedded base exists nowhere else: it goes beside the adapter
        save_base(role, tmp / "base", tokenizer)
        save_role(role, tmp, tokenizer, base_model=str(out / "base"))
        kind = "peft adapter, its base in base/"
    tokenizer.save_pretrained(tmp)
    return kind
