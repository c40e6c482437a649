#!/usr/bin/env python
"""One full GRPO step, side by side: this project's and TRL's ``GRPOTrainer``.

A step is generate + score + loss + backward + optimizer step, on the same random-init
Qwen2 (built offline, ~605k parameters) with the embedded character tokenizer, the same
prompts (arithmetic solver prompts of every level), rewards and settings: P prompts x G
completions, sampling at temperature 1 (no top-p, no top-k), token-mean loss (TRL's
``dapo``), clip 0.2, no KL (beta 0), one epoch over one minibatch (on-policy, no
old-log-prob pass on either side), AdamW at TRL's defaults, gradient clipping 1.0.

Steps alternate in one run: TRL's trainer drives its loop and a callback times each of its
steps (``on_step_begin`` to ``on_step_end``), then runs and times one step of ours. The
first ``--warmup`` steps of each are left out. Prints the median seconds per step, the
completion tokens per second (tokens / time over the timed steps), the CPU time per step
and the ratios.

    pip install -e .[bench]
    python scripts/bench_grpo_vs_trl.py                          # 24 steps each, 1 thread
    python scripts/bench_grpo_vs_trl.py --profile                # + where our step spends its time
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--steps", type=int, default=24, help="timed steps of each, after the warm-up steps")
ap.add_argument("--warmup", type=int, default=2, help="untimed steps of each at the start")
ap.add_argument("--prompts", type=int, default=16, help="distinct prompts per step (P)")
ap.add_argument("--group-size", type=int, default=8, help="completions per prompt (G)")
ap.add_argument("--max-new-tokens", type=int, default=16)
ap.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads")
ap.add_argument("--lr", type=float, default=1e-6, help="AdamW learning rate of both (TRL's default)")
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--profile", action="store_true",
                help="after the timed steps, profile 3 more steps of ours (torch.profiler, CPU): the top operators")
args = ap.parse_args()

# Before torch loads: a spinning OpenMP worker on a shared small VM stalls small ops.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import copy  # noqa: E402
import logging  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from curriculum.config import LossConfig, OptimConfig  # noqa: E402
from curriculum.engine.grpo import grpo_update  # noqa: E402
from curriculum.engine.policy import Role, make_optimizer  # noqa: E402
from curriculum.engine.rollout import generate, pack  # noqa: E402
from curriculum.engine.tiny import build_tokenizer  # noqa: E402
from curriculum.envs import make_env  # noqa: E402

torch.set_num_threads(args.threads)


def build_model(tok):
    """Qwen2 at 604,800 parameters (4 layers, hidden 128, GQA 4/2 heads, tied embeddings), random init."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(args.seed)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    return Qwen2ForCausalLM(config)


def bench_prompts(n: int) -> list[str]:
    """Arithmetic solver prompts cycling through every level (4 to 14 characters)."""
    env, rng = make_env("arithmetic"), random.Random(args.seed)
    return [env.solver_prompt(env.sample_task(1 + i % env.num_levels, rng)) for i in range(n)]


def reward(text: str) -> float:
    """A cheap verifier stand-in with spread inside every group: the share of digits."""
    return sum(ch.isdigit() for ch in text) / max(1, len(text))


class Ours:
    """One step of this project: ``generate`` -> rewards -> ``pack`` -> ``grpo_update``."""

    def __init__(self, model, tok, prompts):
        self.tok, self.prompts = tok, prompts
        opt, sched = make_optimizer(list(model.parameters()), OptimConfig(lr=args.lr, weight_decay=0.0, warmup_steps=0))
        self.role = Role("solver", model, None, opt, sched, params=list(model.parameters()))
        self.loss = LossConfig(estimator="grpo", clip_low=0.2, clip_high=0.2, clip_ratio_c=0.0, kl_coef=0.0,
                               aggregation="token-mean")
        self.steps = 0
        self.split: list[tuple[float, float, float]] = []  # CPU s of generate, score + pack, update

    def step(self) -> int:
        g = args.group_size
        texts = [p for p in self.prompts for _ in range(g)]
        c0 = time.process_time()
        comps = generate(self.role.model, self.tok, texts, max_new_tokens=args.max_new_tokens, temperature=1.0,
                         top_p=1.0, seed=args.seed * 100_003 + self.steps)
        c1 = time.process_time()
        batch = pack(comps, [reward(c.text) for c in comps], [i // g for i in range(len(comps))], self.tok.pad_token_id)
        c2 = time.process_time()
        grpo_update(self.role, batch, self.loss, grad_clip=1.0, backend="torch", seed=self.steps)
        c3 = time.process_time()
        self.split.append((c1 - c0, c2 - c1, c3 - c2))
        self.steps += 1
        return sum(len(c.completion_ids) for c in comps)


def trl_trainer(model, tok, prompts, total_steps, callback):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    def trl_reward(prompts, completions, completion_ids, **kwargs):
        callback.tokens += sum(len(c) for c in completion_ids)
        return [reward(c) for c in completions]

    config = GRPOConfig(
        output_dir=os.path.join(os.environ.get("TMPDIR", "/tmp"), "bench_grpo_vs_trl"),
        per_device_train_batch_size=len(prompts) * args.group_size, num_generations=args.group_size,
        max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0,
        beta=0.0, loss_type="dapo", epsilon=0.2, scale_rewards="group", num_iterations=1, steps_per_generation=1,
        gradient_accumulation_steps=1, learning_rate=args.lr, weight_decay=0.0, lr_scheduler_type="constant",
        max_grad_norm=1.0, max_steps=total_steps, use_cpu=True, bf16=False, fp16=False, seed=args.seed,
        report_to="none", logging_steps=10**6, save_strategy="no", disable_tqdm=True, log_completions=False,
        dataloader_num_workers=0, shuffle_dataset=False,
    )
    data = Dataset.from_list([{"prompt": p} for p in prompts] * total_steps)
    return GRPOTrainer(model=model, reward_funcs=trl_reward, args=config, train_dataset=data, processing_class=tok,
                       callbacks=[callback])


def make_callback(ours: Ours):
    from transformers import TrainerCallback

    class Alternate(TrainerCallback):
        """Times TRL's step from its begin to its end, then runs and times one of ours."""

        tokens = 0
        rows: list[dict] = []

        def on_step_begin(self, *a, **k):
            self.tokens = 0
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, *a, **k):
            trl = dict(s=time.perf_counter() - self.t0, cpu=time.process_time() - self.c0, tokens=self.tokens)
            t0, c0 = time.perf_counter(), time.process_time()
            tokens = ours.step()
            self.rows.append(dict(trl=trl, ours=dict(s=time.perf_counter() - t0, cpu=time.process_time() - c0,
                                                     tokens=tokens)))

    return Alternate()


def summary(rows: list[dict], name: str) -> dict:
    s = [r[name]["s"] for r in rows]
    return dict(median_s=statistics.median(s), mean_s=statistics.fmean(s), cpu_s=statistics.fmean(r[name]["cpu"] for r in rows),
                tokens=statistics.fmean(r[name]["tokens"] for r in rows),
                tok_per_s=sum(r[name]["tokens"] for r in rows) / sum(s))


def profile(fn, steps: int = 3):
    """Self CPU time of the top operators and our own phases over ``steps`` calls of ``fn``."""
    from torch.profiler import ProfilerActivity, profile as tprofile

    with tprofile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        for _ in range(steps):
            fn()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main():
    import transformers
    import trl

    logging.getLogger("transformers").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    tok = build_tokenizer()
    base = build_model(tok)
    prompts = bench_prompts(args.prompts)
    n_params = sum(p.numel() for p in base.parameters())
    ours = Ours(copy.deepcopy(base), tok, prompts)
    callback = make_callback(ours)
    total = args.warmup + args.steps
    trainer = trl_trainer(copy.deepcopy(base), tok, prompts, total, callback)
    print(f"# bench_grpo_vs_trl  torch={torch.__version__} transformers={transformers.__version__} trl={trl.__version__} "
          f"threads={torch.get_num_threads()} OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    print(f"# Qwen2 {n_params:,} params, char tokenizer (V={len(tok)}), {args.prompts} prompts x {args.group_size} "
          f"completions, max_new_tokens={args.max_new_tokens}, beta=0, {args.steps} timed steps each "
          f"(+{args.warmup} warm-up), alternating")
    trainer.train()
    rows = callback.rows[args.warmup:]
    res = {name: summary(rows, name) for name in ("trl", "ours")}
    print(f"{'':6} {'s/step (median)':>15} {'s/step (mean)':>13} {'CPU s/step':>10} {'tokens/step':>11} {'tokens/s':>9}")
    for name, r in res.items():
        print(f"{name:6} {r['median_s']:>15.4f} {r['mean_s']:>13.4f} {r['cpu_s']:>10.4f} {r['tokens']:>11.1f} "
              f"{r['tok_per_s']:>9.0f}")
    t, o = res["trl"], res["ours"]
    print(f"ratio (TRL / ours): time per step {t['median_s'] / o['median_s']:.2f}x (median), "
          f"CPU per step {t['cpu_s'] / o['cpu_s']:.2f}x; completion tokens/s (ours / TRL) "
          f"{o['tok_per_s'] / t['tok_per_s']:.2f}x")
    gen, score, update = (statistics.fmean(x) for x in zip(*ours.split[args.warmup:]))
    total = gen + score + update
    print(f"ours, CPU per step: generate {gen:.4f} s ({gen / total:.0%}), score + pack {score:.4f} s "
          f"({score / total:.0%}), update (forward, backward, AdamW) {update:.4f} s ({update / total:.0%})")
    if args.profile:
        profile(ours.step)


if __name__ == "__main__":
    main()
