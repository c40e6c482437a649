"""Can the solver learn the next rung at all? The check to run before comparing curricula.

    python scripts/learnability.py [--config configs/ladder_cpu.yaml] [--seeds 0 1 2 3 4]
        [--steps N] [--every E] [--out runs/learnability.json] [key=value ...]

For each seed it builds the run's starting solver exactly as `selfplay train` would (the
warm-up cache included) and reports, on the held-out benchmark:

- mean@k per level (the eval config's passes), and where greedy answers first go wrong: the
  character of the answer at which they leave the reference, per level. A chain that breaks at
  one fixed step at every length is a hole in the model, not a task that is almost solved.
- the supervised bound: the same optimizer, learning rate and update count as the solver's RL
  (train.rounds x solver.steps), each update on batch_prompts x group_size generator tasks of the
  levels the generator arms draw (curriculum.max_level), with their reference answers as targets.
  An RL update sees no more than this: its samples carry a reward, not the answer. If the bound does
  not raise held-out mean@k beyond its confidence interval over seeds, no way of picking tasks can
  make RL do so at these settings, and a curriculum comparison there measures noise.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from challenger.role import Challenger  # noqa: E402
from curriculum.config import load_config  # noqa: E402
from curriculum.engine.policy import build_roles  # noqa: E402
from curriculum.engine.prompts import resolve_style  # noqa: E402
from curriculum.engine.tiny import batch_loss  # noqa: E402
from curriculum.envs import benchmark, make_env  # noqa: E402
from curriculum.evaluate import evaluate_solver, solver_attempts  # noqa: E402
from curriculum.engine.distributed import resolve_device, seed_everything  # noqa: E402
from curriculum.warmup import load_base  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from compare_curriculum import fmt  # noqa: E402

MEAN = "eval/mean_at_k"


def first_errors(tasks, attempts, env) -> dict[int, dict[int, int]]:
    """Per level, how many greedy answers first leave the reference at each character (len = too short)."""
    out: dict[int, Counter] = {}
    for task, attempt in zip(tasks, attempts):
        if attempt.score >= 1:
            continue
        got, want = attempt.completion.text.strip(), env.format_answer(task)
        at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        out.setdefault(task.level, Counter())[at] += 1
    return {level: dict(sorted(c.items())) for level, c in sorted(out.items())}


def supervised_step(role, tokenizer, pairs, grad_clip: float) -> float:
    """One optimizer step of mean answer-token cross-entropy over (prompt, answer) pairs, as the warm-up's."""
    role.optimizer.zero_grad(set_to_none=True)
    loss = float(batch_loss(role.model, tokenizer, pairs))
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(role.params, grad_clip)
    role.optimizer.step()
    role.scheduler.step()
    return loss


def check_seed(cfg, steps: int, every: int, log=print) -> dict:
    """The starting solver's held-out scores and first errors, then the supervised bound's curve."""
    if cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)
    if cfg.solver.tools:  # before any warm-up is built
        raise SystemExit("learnability: solver.tools is not supported (the bound trains on prompt + answer text)")
    seed_everything(cfg.run.seed)
    env = make_env(cfg.env.name, **cfg.env.kwargs)
    held_out = benchmark(env, cfg.eval.seed, cfg.eval.per_level)
    exclude = {t.text for t in held_out}
    base, tokenizer = load_base(cfg, env, exclude, False, Challenger(env).prompt)
    role = build_roles(cfg, base, resolve_device(cfg.run.device))["solver"]
    style = resolve_style(cfg.prompt.style, tokenizer)
    if style != "plain":
        raise SystemExit("learnability: plain prompts only (the bound trains on prompt + answer text)")
    batch_size = cfg.solver.sampling.batch_size

    def scores() -> dict:  # sampling puts the model in eval mode and back
        return evaluate_solver(role, tokenizer, env, held_out, cfg.eval, batch_size, style)

    greedy = solver_attempts(role, tokenizer, env, held_out, k=1, temperature=0.0,
                             max_new_tokens=cfg.eval.max_new_tokens, batch_size=batch_size, seed=cfg.eval.seed, style=style)
    result = {"seed": cfg.run.seed, "first_error": first_errors(held_out, greedy, env), "curve": [{"step": 0, **scores()}]}
    log(f"seed {cfg.run.seed} step 0: {short(result['curve'][-1])}")
    top = cfg.curriculum.max_level or max(t.level for t in held_out)
    rng = random.Random(f"learnability:{cfg.run.seed}")
    per_step = cfg.solver.batch_prompts * cfg.solver.group_size
    losses: list[float] = []  # since the last evaluation
    role.model.train()
    for step in range(1, steps + 1):
        pairs = []
        while len(pairs) < per_step:
            task = env.sample_task(rng.randint(1, top), rng)
            if task.text not in exclude:
                pairs.append((env.solver_prompt(task), env.format_answer(task)))
        losses.append(supervised_step(role, tokenizer, pairs, cfg.solver.optim.grad_clip))
        if step % every == 0 or step == steps:
            result["curve"].append({"step": step, "loss": sum(losses) / len(losses), **scores()})
            losses = []
            log(f"seed {cfg.run.seed} step {step}: {short(result['curve'][-1])}")
    return result


def short(report: dict) -> str:
    levels = sorted(int(k.rsplit("_", 1)[1]) for k in report if k.startswith(f"{MEAN}/tier_"))
    per = " ".join(f"L{lv}:{report[f'{MEAN}/tier_{lv}']:.2f}" for lv in levels if report[f"{MEAN}/tier_{lv}"] > 0)
    return f"mean@k {report[MEAN]:.3f} frontier L{report['eval/frontier_level']} | {per}"


def summary(results: list[dict]) -> list[str]:
    """Markdown: start and end of the bound per level, and the gain over seeds with its 95% interval."""
    start, end = [r["curve"][0] for r in results], [r["curve"][-1] for r in results]
    keys = [MEAN] + sorted((k for k in start[0] if k.startswith(f"{MEAN}/tier_")), key=lambda k: int(k.rsplit("_", 1)[1]))
    keys.append("eval/frontier_level")
    steps = results[0]["curve"][-1]["step"]
    lines = [f"| metric | start | after {steps} supervised updates | gain |", "|---|---|---|---|"]
    for k in keys:
        a, b = [s[k] for s in start], [e[k] for e in end]
        if k != MEAN and max(a + b) == 0:
            continue
        lines.append(f"| {k} | {fmt(a)} | {fmt(b)} | {fmt([y - x for x, y in zip(a, b)])} |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "ladder_cpu.yaml"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, default=0, help="supervised updates; 0 = train.rounds x solver.steps")
    p.add_argument("--every", type=int, default=0, help="evaluate every E updates; 0 = at the end only")
    p.add_argument("--out", default="", help="write every seed's curve and first errors here (JSON)")
    p.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = p.parse_args()
    results = []
    for seed in args.seeds:
        cfg = load_config(args.config, [*args.overrides, f"run.seed={seed}", "wandb.mode=disabled", "log.progress=false"])
        steps = args.steps or cfg.train.rounds * cfg.solver.steps
        results.append(check_seed(cfg, steps, args.every or steps))
        print(f"seed {seed} greedy first errors (level: {{character: answers}}): {results[-1]['first_error']}")
    print("\n".join(summary(results)))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
