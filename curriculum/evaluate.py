"""The held-out benchmark: scoring a solver on it, during training and from a run's checkpoint.

``selfplay eval RUN_DIR`` builds the solver and the benchmark, nothing else: it reads the
run's config and newest checkpoint and writes none of the run's files.
"""
from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np
import torch

from curriculum.checkpoint import read_state
from curriculum.config import load_config
from curriculum.envs import Task, benchmark, held_out_texts, make_env
from curriculum.engine.prompts import resolve_style
from curriculum.engine.rollout import HFEngine
from curriculum.engine.tools import generate_with_tools
from curriculum.errors import ConfigError, DamagedCheckpoint
from curriculum.engine.distributed import run_sharded
from curriculum.rollouts import derive_seed, make_engine, make_tools
from curriculum.rundir import RunDir
from challenger.role import Challenger
from solver.role import Attempt, Solver

log = logging.getLogger(__name__)


# A level is within the solver's reach when it solves at least this share of it (eval/frontier_level).
FRONTIER = 0.5


# The extra greedy pass of eval.without_tools: the same solver, its tools off.
NO_TOOLS = "eval/no_tools/accuracy"


def solver_scores(role, tokenizer, env, tasks: list[Task], *, k: int, **kw) -> list[list[float]]:
    """``k`` scores per task (0 for an unfinished answer): ``solver_attempts``' scores, task by task."""
    attempts = solver_attempts(role, tokenizer, env, tasks, k=k, **kw)
    return [[a.score for a in attempts[i * k : (i + 1) * k]] for i in range(len(tasks))]


@torch.no_grad()
def solver_attempts(role, tokenizer, env, tasks: list[Task], *, k: int, temperature: float, max_new_tokens: int,
                    batch_size: int, seed: int, style: str = "plain", tools=None, max_turns: int = 1,
                    tool_prompt: str = "", engine=None) -> list[Attempt]:
    """``k`` scored attempts per task, task by task: greedy when ``temperature`` is 0, else sampled from
    ``seed``; prompts rendered in ``style`` (chat or plain). With ``tools`` (``make_tools``) the solver
    answers over up to ``max_turns`` turns, its prompts announcing them with ``tool_prompt``. ``engine`` samples
    (``make_engine``; transformers' generate by default)."""
    engine = engine or HFEngine()
    greedy = temperature == 0
    fn = engine.generate
    if tools is not None:
        fn = functools.partial(generate_with_tools, tools=tools, max_turns=max_turns, sample_fn=engine.generate)
    sample = functools.partial(fn, role, tokenizer, max_new_tokens=max_new_tokens, greedy=greedy,
                               temperature=1.0 if greedy else temperature, batch_size=batch_size, seed=seed,
                               style=style)
    solver = Solver(env, tool_prompt if tools is not None else "")
    return solver.attempt([t for t in tasks for _ in range(k)], sample)


def tool_passes(cfg, tools) -> list[tuple[str, int, float, dict]]:
    """``passes`` with the tool keywords of ``solver_scores`` for each: the solver's tools (``make_tools``;
    None: none) in every pass, and with ``eval.without_tools`` one more greedy pass without them."""
    sc = cfg.solver
    kw = {} if tools is None else dict(tools=tools, max_turns=sc.max_turns, tool_prompt=sc.tool_prompt)
    out = [(prefix, k, temperature, kw) for prefix, k, temperature in passes(cfg.eval)]
    if tools is not None and cfg.eval.without_tools:
        out.append((NO_TOOLS, 1, 0.0, {}))
    return out


def passes(eval_cfg) -> list[tuple[str, int, float]]:
    """The scoring passes of an eval: (metric prefix, answers per task, temperature)."""
    out = []
    if eval_cfg.greedy:
        out.append(("eval/accuracy", 1, 0.0))
    if eval_cfg.samples > 0:
        out.append(("eval/mean_at_k", eval_cfg.samples, eval_cfg.temperature))
    return out


def accuracy_report(tasks: list[Task], scores: list[list[float]], prefix: str = "eval/accuracy") -> dict[str, float]:
    """``prefix`` over every score, ``prefix/tier_L`` per level and, for typed tasks, ``prefix/type_K`` per type."""
    correct: dict[int, list[float]] = {}
    by_kind: dict[str, list[float]] = {}
    for t, s in zip(tasks, scores):
        correct.setdefault(t.level, []).extend(s)
        if t.kind:
            by_kind.setdefault(t.kind, []).extend(s)
    out = {prefix: float(np.mean([s for v in correct.values() for s in v]))}
    for level in sorted(correct):
        out[f"{prefix}/tier_{level}"] = float(np.mean(correct[level]))
    for kind in sorted(by_kind):
        out[f"{prefix}/type_{kind}"] = float(np.mean(by_kind[kind]))
    return out


def frontier_level(report: dict[str, float], prefix: str) -> int:
    """The highest level whose ``prefix/tier_L`` reaches ``FRONTIER`` (0 if none does)."""
    head = f"{prefix}/tier_"
    reached = [int(k[len(head):]) for k, v in report.items() if k.startswith(head) and v >= FRONTIER]
    return max(reached, default=0)


def evaluate_solver(role, tokenizer, env, tasks: list[Task], eval_cfg, batch_size: int,
                    style: str = "plain", cfg=None, tools=None, engine=None) -> dict[str, float]:
    """Greedy accuracy and/or mean@k on ``tasks``, per level, and ``eval/frontier_level``.

    Sampling is seeded from ``eval_cfg.seed`` alone, so every round is scored on the
    same random stream (round-to-round differences are the model's, not the dice's).
    With ``tools`` (and the run's ``cfg``) the solver uses them (``tool_passes``).
    """
    report: dict[str, float] = {}
    runs = tool_passes(cfg, tools) if tools is not None else [(*p, {}) for p in passes(eval_cfg)]
    for prefix, k, temperature, kw in runs:
        scores = solver_scores(role, tokenizer, env, tasks, k=k, temperature=temperature,
                               max_new_tokens=eval_cfg.max_new_tokens, batch_size=batch_size, seed=eval_cfg.seed,
                               style=style, engine=engine, **kw)
        report.update(accuracy_report(tasks, scores, prefix))
    report["eval/frontier_level"] = frontier_level(report, passes(eval_cfg)[-1][0])
    return report


def evaluate_ranks(cfg, dist, role, tokenizer, env, tasks: list[Task], tools, style: str, engine) -> dict[str, float]:
    """``evaluate_solver`` during training: the tasks split over the ranks, the scores gathered on every rank.
    Greedy scores do not depend on the split; sampled ones are seeded per rank, so their stream differs
    from one process's."""
    ec, report = cfg.eval, {}
    for prefix, k, temperature, kw in tool_passes(cfg, tools):

        def work(part: list[Task], seed: int, k=k, temperature=temperature, kw=kw) -> list[list[float]]:
            return solver_scores(role, tokenizer, env, part, k=k, temperature=temperature, max_new_tokens=ec.max_new_tokens,
                                 batch_size=cfg.solver.sampling.batch_size, seed=seed, style=style, engine=engine, **kw)

        seed = derive_seed(ec.seed, "rank", dist.rank) if temperature > 0 and dist.world > 1 else ec.seed
        scores = run_sharded(dist, [[t] for t in tasks], work, lambda u: seed, per_unit=False)
        report.update(accuracy_report(tasks, scores, prefix))
    report["eval/frontier_level"] = frontier_level(report, passes(ec)[-1][0])
    return report


def evaluate_run(run_dir: Path) -> dict:
    """Held-out accuracy of the solver in the run's newest intact checkpoint (read-only)."""
    from curriculum.warmup import load_solver

    rd = RunDir(run_dir)
    if not rd.is_run():
        raise ConfigError(f"{rd.path} has no config.yaml; is it a run directory?")
    cfg = load_config(rd.config, ["wandb.mode=disabled", "log.progress=false"])
    env = make_env(cfg.env.name, **cfg.env.kwargs)
    tasks = benchmark(env, cfg.eval.seed, cfg.eval.per_level)
    solver = Solver(env, cfg.solver.tool_prompt if cfg.solver.tools else "")
    latest = damaged = None
    # The newest checkpoint whose solver and state load, as a resume would choose it.
    for candidate in (rd.checkpoint_manager().intact() if rd.checkpoints.is_dir() else ()):
        try:
            round_ = int(read_state(candidate)["round"])
            role, tokenizer = load_solver(cfg, candidate, env, held_out_texts(env, tasks), Challenger(env).prompt,
                                          functools.partial(solver.demonstration, output_chars=cfg.solver.tool_output_chars))
        except (DamagedCheckpoint, OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("skipping checkpoint %s: %s", candidate, exc)
            damaged = damaged or exc
            continue
        latest = candidate
        break
    if latest is None:
        if damaged is not None:
            raise DamagedCheckpoint(f"no checkpoint of {rd.path} loads: {damaged}")
        raise ConfigError(f"{rd.path} has no complete checkpoint to evaluate yet")
    style = resolve_style(cfg.prompt.style, tokenizer)
    engine = make_engine(cfg, {"solver": role}, next(role.model.parameters()).device)  # the run's rollout.engine
    try:
        results = evaluate_solver(role, tokenizer, env, tasks, cfg.eval, cfg.solver.sampling.batch_size, style,
                                  cfg=cfg, tools=make_tools(cfg.solver), engine=engine)
    finally:
        engine.close()
    results["round"] = round_
    results["checkpoint"] = str(latest)
    return results
