"""`selfplay model warmup CONFIG`: a short supervised warm-up of a pretrained model on the environment's
generator, before self-play (the embedded model has its own: model.warmup).

A small instruct model rarely answers in the form the verifier reads, and its majority votes, the
pseudo-labels the solver trains on, are mostly wrong (SmolLM2-135M: 21% of level-1 majorities right,
docs/experiments/smollm2.md). Here the model reads the solver's own prompt for generated problems and
learns their solved answers (``env.worked_answer(task)`` where the environment has one, else
``env.format_answer(task)``), with a LoRA adapter that is then merged: the result is a plain model
directory for ``model.path``, under ``$SELFPLAY_MODELS/warmups/`` and named by everything it depends on
(the model's files, the environment, the prompts' code, the settings), so a second call only prints it.
The held-out benchmark's problems are never taught.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from curriculum.config import Config
from curriculum.errors import UsageError
from curriculum.models import MANIFEST, cache_root, manifest_of, publish, verify

SETTINGS = "selfplay-warmup.json"


@dataclass(frozen=True)
class Settings:
    steps: int = 60
    batch_size: int = 8
    lr: float = 5e-4
    max_level: int = 0  # 0: every level of the environment
    lora_r: int = 16
    seed: int = 0


def examples(env, solver, rng: random.Random, n: int, max_level: int, exclude: set[str]) -> list[tuple]:
    """``n`` (prompt, answer) pairs: generator problems of levels 1..max_level, none of them held out."""
    answer = getattr(env, "worked_answer", env.format_answer)
    out = []
    while len(out) < n:
        task = env.sample_task(rng.randint(1, max_level), rng)
        if task.text not in exclude:
            out.append((solver.prompt(task), answer(task)))
    return out


def encode(tokenizer, style: str, end: int, pairs: list[tuple]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, attention mask and labels: the prompt as the loop encodes it, then the answer and
    the token that ends a completion (end of turn in chat style); only the answer's tokens have labels."""
    from curriculum.engine.prompts import encode_prompt

    rows = []
    for prompt, answer in pairs:
        p = encode_prompt(tokenizer, prompt, style)
        rows.append((p, tokenizer.encode(answer, add_special_tokens=False) + [end]))
    t = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), t), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), t), dtype=torch.long)
    labels = torch.full((len(rows), t), -100, dtype=torch.long)
    for i, (p, a) in enumerate(rows):
        ids[i, :len(p) + len(a)] = torch.tensor(p + a)
        mask[i, :len(p) + len(a)] = 1
        labels[i, len(p):len(p) + len(a)] = torch.tensor(a)
    return ids, mask, labels


def train(model, tokenizer, style: str, batches, lr: float, progress: bool = False) -> list[float]:
    """One AdamW step per batch of (prompt, answer) pairs on the trainable parameters; the loss curve."""
    from tqdm.auto import tqdm

    from curriculum.engine.prompts import end_of_turn_id

    end = end_of_turn_id(tokenizer) if style == "chat" else None  # what ends an answer in the loop
    end = tokenizer.eos_token_id if end is None else end
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for pairs in tqdm(batches, desc="warm-up", unit="step", disable=not progress):
        ids, mask, labels = encode(tokenizer, style, end, pairs)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def key(cfg: Config, env, s: Settings, model_files: dict[str, str]) -> dict:
    """Everything the warmed-up model depends on; its directory is named by this dict's hash."""
    from curriculum.engine import prompts
    from solver import role

    code = hashlib.sha256()
    for module in (sys.modules[__name__], inspect.getmodule(type(env)), prompts, role):
        code.update(inspect.getsource(module).encode())
    return {"model": model_files, "env": cfg.env.name, "env_kwargs": dict(cfg.env.kwargs),
            "prompt_style": cfg.prompt.style, "eval": [cfg.eval.seed, cfg.eval.per_level],
            "settings": vars(s), "torch": torch.__version__, "code": code.hexdigest()}


def warm_up_pretrained(cfg: Config, s: Settings, root: Path | None = None, progress: bool = True) -> Path:
    """The warmed-up copy of ``cfg.model.path`` for ``cfg``'s environment and solver prompt: built once
    (trained, merged, saved whole or not at all), then found by its key."""
    from curriculum.engine.policy import load_pretrained, load_tokenizer
    from curriculum.engine.prompts import resolve_style
    from curriculum.envs import benchmark, held_out_texts, make_env
    from solver.role import Solver

    if not cfg.model.path:
        raise UsageError("selfplay model warmup needs a pretrained model (model.path); "
                         "the embedded model has its own warm-up (model.warmup)")
    if cfg.solver.tools:
        raise UsageError("selfplay model warmup teaches answers without tool calls; run it with solver.tools=[]")
    env = make_env(cfg.env.name, **cfg.env.kwargs)
    if not hasattr(env, "sample_task"):
        raise UsageError(f"environment {cfg.env.name!r} has no generator (sample_task) to warm up on")
    source = Path(cfg.model.path).expanduser()
    files = json.loads((source / MANIFEST).read_text()) if (source / MANIFEST).is_file() else manifest_of(source)
    payload = key(cfg, env, s, files)
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
    target = (root or cache_root() / "warmups") / f"{source.name}-{cfg.env.name}-{digest}"
    if target.is_dir() and verify(target) is None:
        return target
    tokenizer = load_tokenizer(cfg)
    model = load_pretrained(cfg.model)
    style = resolve_style(cfg.prompt.style, tokenizer)
    solver = Solver(env)
    exclude = held_out_texts(env, benchmark(env, cfg.eval.seed, cfg.eval.per_level))
    rng = random.Random(s.seed)
    level = min(s.max_level or env.num_levels, env.num_levels)
    batches = [examples(env, solver, rng, s.batch_size, level, exclude) for _ in range(s.steps)]

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(s.seed)
    lora = LoraConfig(r=s.lora_r, lora_alpha=2 * s.lora_r, lora_dropout=0.0, target_modules="all-linear")
    peft_model = get_peft_model(model, lora)
    losses = train(peft_model, tokenizer, style, batches, s.lr, progress)
    merged = peft_model.merge_and_unload()

    def write(tmp: Path) -> None:
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / SETTINGS).write_text(json.dumps({"source": str(source), "key": payload, "levels": [1, level],
                                                "loss_first": losses[0], "loss_last": losses[-1]}, indent=1) + "\n")

    return publish(target, write)
