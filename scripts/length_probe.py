"""Which task format and position scheme let the embedded model solve a level longer than any it was taught?

    python scripts/length_probe.py [--format spaced|hinted|linked] [--position nope|rope|local] [--window 8]
        [--attn-scale none|log] [--max-level 4]
        [--steps 1200] [--every 200] [--then 0] [--seed 0]

A supervised warm-up on hinted-ladder tasks of levels 1..max-level (the embedded tiny model, the
warm-up's optimizer and schedule), with greedy exact-match accuracy on 64 fresh tasks per level
1..10 every ``--every`` steps. ``--then N`` continues for N steps at lr 3e-4 on levels
1..max-level+1: does learning rung n+1 lift rung n+2? Formats: ``spaced`` is the environment's
prompt (``H4s9..M3..c7=``); ``hinted`` the same without the dots (``H4s9M3c7=``), where the
distance from an answer step to its pair is fixed within a task; ``linked`` names each pair's successor
(``H4s``) and shuffles the pairs after the first, so no step can be found by position. One thread; a few minutes.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from curriculum.engine import tiny  # noqa: E402
from curriculum.envs.hinted import gaps, hinted, hints, running_sums, spaced  # noqa: E402

def log_scaled_sdpa(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA with each query scaled by log(n)/log(16), n the keys it sees (``--attn-scale log``)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q, k = query.shape[2], key.shape[2]
    if attention_mask is None:
        n = torch.arange(k - q + 1, k + 1, dtype=query.dtype).view(1, 1, q, 1)
    elif attention_mask.dtype == torch.bool:
        n = attention_mask.sum(-1, keepdim=True).to(query.dtype)
    else:
        n = (attention_mask > -1e4).sum(-1, keepdim=True).to(query.dtype)
    scale = (torch.log(n.clamp(min=1)) / math.log(16)).clamp(min=0.25)
    return sdpa_attention_forward(module, query * scale, key, value, attention_mask, **kwargs)


def linked(d: str) -> str:
    """Each digit behind its hint and before the next pair's hint (``H4s``, the last ends ``.``), the first pair
    first and the rest in a shuffled order, dots between: every answer step is a lookup by content alone."""
    h = hints(d)
    triples = [h[i] + d[i] + (h[i + 1] if i + 1 < len(d) else ".") for i in range(len(d))]
    rest = triples[1:]
    random.Random(f"order:{d}").shuffle(rest)
    return "".join("." * g + t for g, t in zip(gaps(d), [triples[0], *rest])) + "="


FORMATS = {"spaced": lambda d: spaced(d) + "=", "hinted": lambda d: hinted(d, d) + "=", "linked": linked}


def digits(rng: random.Random, level: int) -> str:
    return "".join(str(rng.randrange(10)) for _ in range(level + 1))


@torch.no_grad()
def greedy_accuracy(model, tok, prompt, tasks: dict[int, list[str]]) -> dict[int, float]:
    """Per level, the share of tasks whose greedy answer is exact (prompts batched by length: no padding)."""
    model.eval()
    out = {}
    for level, texts in tasks.items():
        by_len: dict[int, list[str]] = {}
        for d in texts:
            by_len.setdefault(len(prompt(d)), []).append(d)
        right = 0
        for group in by_len.values():
            ids = torch.tensor([tok(prompt(d))["input_ids"] for d in group])
            gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=2 * level + 3,
                                 do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
            answers = tok.batch_decode(gen[:, ids.shape[1]:], skip_special_tokens=True)
            right += sum(a.strip() == hinted(d, running_sums(d)) for a, d in zip(answers, group))
        out[level] = right / len(texts)
    model.train()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--format", choices=sorted(FORMATS), default="spaced")
    p.add_argument("--position", choices=["local", "nope", "rope"], default="nope")
    p.add_argument("--window", type=int, default=8, help="local: the sliding window of the rotary layers")
    p.add_argument("--attn-scale", choices=["none", "log"], default="none",
                   help="log: attention logits scaled by the log of the keys seen (for NoPE on long prompts)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--max-level", type=int, default=4)
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--every", type=int, default=200)
    p.add_argument("--then", type=int, default=0, help="steps on levels 1..max-level+1 afterwards")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    prompt = FORMATS[a.format]
    tok = tiny.build_tokenizer()
    torch.manual_seed(a.seed)
    model = tiny.build_model(tok, a.hidden, a.layers, 4, 256, a.position, a.window)
    if a.attn_scale == "log":
        from transformers import AttentionInterface

        AttentionInterface.register("log_scaled_sdpa", log_scaled_sdpa)
        model.set_attn_implementation("log_scaled_sdpa")
    rng, test_rng = random.Random(a.seed), random.Random(12345)
    tasks = {level: [digits(test_rng, level) for _ in range(64)] for level in range(1, 11)}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)  # the warm-up's optimizer and schedule
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50) * max(0.1, 1 - s / a.steps))
    start = time.time()

    def train(steps: int, top: int, label: str) -> None:
        for step in range(1, steps + 1):
            pairs = [(prompt(d), hinted(d, running_sums(d))) for d in (digits(rng, rng.randint(1, top)) for _ in range(128))]
            tiny.batch_loss(model, tok, pairs)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if step % a.every == 0 or step == steps:
                acc = greedy_accuracy(model, tok, prompt, tasks)
                print(f"{label} step {step} ({time.time() - start:.0f} s): "
                      + " ".join(f"L{k} {v:.2f}" for k, v in acc.items()), flush=True)

    model.train()
    train(a.steps, a.max_level, f"levels 1-{a.max_level}")
    if a.then:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.1)  # 3e-4, as the solver's RL lr range
        train(a.then, a.max_level + 1, f"then levels 1-{a.max_level + 1}")


if __name__ == "__main__":
    main()
