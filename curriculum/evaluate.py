"""Evaluating a run's latest checkpoint, and summarising runs on disk."""
from __future__ import annotations

import json
from pathlib import Path

from curriculum.checkpoint import CheckpointManager, read_state
from curriculum.config import load_config


def evaluate_run(run_dir: Path) -> dict:
    """Held-out accuracy of the solver in the newest complete checkpoint; also written to eval.json."""
    from curriculum.trainer import SelfPlayTrainer, evaluate_solver

    cfg = load_config(run_dir / "config.yaml", ["wandb.mode=disabled", "log.progress=false"])
    trainer = SelfPlayTrainer(cfg, resume=True)  # builds the models and restores the newest checkpoint
    trainer.monitor.close()
    results = evaluate_solver(trainer.roles["solver"], trainer.tokenizer, trainer.env, trainer.benchmark,
                              cfg.eval, cfg.solver.sampling.batch_size)
    results["round"] = trainer.round
    (run_dir / "eval.json").write_text(json.dumps(results, indent=1))
    return results


def run_status(run_dir: Path) -> dict:
    """Round reached, newest intact checkpoint and whether the run finished."""
    run_dir = Path(run_dir)
    out: dict = {"run": str(run_dir)}
    try:
        cfg = load_config(run_dir / "config.yaml")
        out["rounds"] = cfg.train.rounds
    except Exception as exc:  # noqa: BLE001 - a broken run is still listed
        out["error"] = str(exc)
        return out
    ckdir = run_dir / "checkpoints"
    latest = CheckpointManager(ckdir, cfg.checkpoint.keep_last).latest() if ckdir.is_dir() else None
    if latest is None:
        out.update(round=0, checkpoint=None, finished=False)
        return out
    state = read_state(latest)
    out.update(round=state["round"], checkpoint=str(latest), finished=bool(state.get("finished")))
    return out
