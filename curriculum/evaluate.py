"""The held-out benchmark: scoring a solver on it, during training and from a run's checkpoint.

``selfplay eval RUN_DIR`` builds the solver and the benchmark, nothing else: it reads the
run's config and newest checkpoint and writes none of the run's files.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from curriculum.checkpoint import read_state
from curriculum.config import load_config
from curriculum.envs import Task, benchmark, make_env
from curriculum.engine.rollout import generate
from curriculum.errors import ConfigError
from curriculum.rundir import RunDir
from solver.role import Solver


@torch.no_grad()
def solver_scores(role, tokenizer, env, tasks: list[Task], eval_cfg, batch_size: int, seed: int) -> list[list[float]]:
    """``eval_cfg.samples`` scores per task (0 for an unfinished answer): greedy, or sampled from ``seed``."""
    role.activate()
    k = eval_cfg.samples
    greedy = eval_cfg.temperature == 0
    sample = functools.partial(generate, role.model, tokenizer, max_new_tokens=eval_cfg.max_new_tokens, greedy=greedy,
                               temperature=eval_cfg.temperature if not greedy else 1.0, batch_size=batch_size, seed=seed)
    attempts = Solver(env).attempt([t for t in tasks for _ in range(k)], sample)
    return [[a.score for a in attempts[i * k : (i + 1) * k]] for i in range(len(tasks))]


def accuracy_report(tasks: list[Task], scores: list[list[float]]) -> dict[str, float]:
    """``eval/accuracy`` over every score, and ``eval/accuracy/tier_L`` per level."""
    correct: dict[int, list[float]] = {}
    for t, s in zip(tasks, scores):
        correct.setdefault(t.level, []).extend(s)
    out = {"eval/accuracy": float(np.mean([s for v in correct.values() for s in v]))}
    for level in sorted(correct):
        out[f"eval/accuracy/tier_{level}"] = float(np.mean(correct[level]))
    return out


def evaluate_solver(role, tokenizer, env, tasks: list[Task], eval_cfg, batch_size: int) -> dict[str, float]:
    """Accuracy on ``tasks``: greedy, or the mean over ``eval_cfg.samples`` samples per task.

    Sampling is seeded from ``eval_cfg.seed`` alone, so every round is scored on the
    same random stream (round-to-round differences are the model's, not the dice's).
    """
    return accuracy_report(tasks, solver_scores(role, tokenizer, env, tasks, eval_cfg, batch_size, eval_cfg.seed))


def evaluate_run(run_dir: Path) -> dict:
    """Held-out accuracy of the solver in the run's newest intact checkpoint (read-only)."""
    from curriculum.engine.policy import load_solver

    rd = RunDir(run_dir)
    if not rd.is_run():
        raise ConfigError(f"{rd.path} has no config.yaml; is it a run directory?")
    cfg = load_config(rd.config, ["wandb.mode=disabled", "log.progress=false"])
    latest = rd.latest_checkpoint()
    if latest is None:
        raise ConfigError(f"{rd.path} has no complete checkpoint to evaluate yet")
    env = make_env(cfg.env.name, **cfg.env.kwargs)
    tasks = benchmark(env, cfg.eval.seed, cfg.eval.per_level)
    role, tokenizer = load_solver(cfg, latest, env, {t.text for t in tasks})
    results = evaluate_solver(role, tokenizer, env, tasks, cfg.eval, cfg.solver.sampling.batch_size)
    results["round"] = int(read_state(latest)["round"])
    results["checkpoint"] = str(latest)
    return results
