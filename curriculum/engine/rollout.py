"""Sampling completions and packing them into padded training batches."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from curriculum.engine.prompts import Prompt, encode_prompt, stop_ids


@dataclass
class Completion:
    """One sampled completion. ``finished`` is False if it hit the token limit."""

    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    finished: bool


@dataclass
class Rollout:
    """A scored batch ready for a policy-gradient step (B sequences, padded once).

    input_ids, attention_mask: [B, T] right-padded prompt + completion.
    response_mask: [B, T-1], 1 where position t predicts a completion token
        (aligned with ``sequence_logprobs`` output).
    rewards: [B] float; group_ids: [B] int64, one id per GRPO group.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    rewards: torch.Tensor
    group_ids: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, idx: torch.Tensor) -> "Rollout":
        return Rollout(*(t[idx] for t in (self.input_ids, self.attention_mask, self.response_mask, self.rewards, self.group_ids)))

    def to(self, device) -> "Rollout":
        return Rollout(*(t.to(device) for t in (self.input_ids, self.attention_mask, self.response_mask, self.rewards, self.group_ids)))


def encode_prompts(tokenizer, prompts: list[Prompt], style: str = "plain") -> list[list[int]]:
    """Token ids of each prompt as ``style`` renders it (``curriculum.engine.prompts``)."""
    return [encode_prompt(tokenizer, p, style) for p in prompts]


@torch.no_grad()
def generate(model, tokenizer, prompts: list[Prompt], *, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, greedy: bool = False, batch_size: int = 256, seed: int | None = None,
             desc: str | None = None, progress: bool = False, style: str = "plain") -> list[Completion]:
    """Sample one completion per prompt (repeat prompts for groups), prompts rendered in ``style``.

    A completion ends at its first stop token (eos, the model's other eos ids, a chat
    template's end of turn), which it keeps; ``finished`` is False if none came within
    ``max_new_tokens``. Reproducible: the sampling stream is seeded from ``seed`` alone, so
    the same weights and seed give the same completions whatever ran before.
    """
    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    stops, pad = stop_ids(tokenizer, model, style), tokenizer.pad_token_id
    encoded = encode_prompts(tokenizer, prompts, style)
    was_training = model.training
    model.eval()
    out: list[Completion] = []
    starts = range(0, len(encoded), batch_size)
    # disable=None: off when stderr is no TTY, where a nested bar's cursor moves garble logs
    quiet = not progress or len(starts) < 2
    for start in tqdm(starts, desc=desc, disable=True if quiet else None, leave=False):
        chunk = encoded[start : start + batch_size]
        width = max(map(len, chunk))
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, row in enumerate(chunk):  # left padding, so every row ends at the prompt's end
            ids[i, width - len(row) :] = torch.tensor(row)
            attn[i, width - len(row) :] = 1
        kwargs = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        seqs = model.generate(
            input_ids=ids.to(device), attention_mask=attn.to(device), max_new_tokens=max_new_tokens,
            eos_token_id=stops[0] if len(stops) == 1 else stops, pad_token_id=pad, **kwargs,
        ).cpu()
        for i, row in enumerate(chunk):
            new = seqs[i, width:].tolist()
            end = next((j for j, t in enumerate(new) if t in stops), None)
            finished = end is not None
            new = new[: end + 1] if finished else [t for t in new if t != pad]
            text = tokenizer.decode([t for t in new if t not in stops], skip_special_tokens=True)
            out.append(Completion(row, new, text, finished))
    model.train(was_training)
    return out


def pack(completions: list[Completion], rewards: list[float], group_ids: list[int], pad_id: int) -> Rollout:
    """Right-pad prompt + completion into a Rollout."""
    rows = [c.prompt_ids + c.completion_ids for c in completions]
    width = max(map(len, rows))
    n = len(rows)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    resp = torch.zeros((n, width - 1), dtype=torch.float32)
    for i, (c, row) in enumerate(zip(completions, rows)):
        ids[i, : len(row)] = torch.tensor(row)
        attn[i, : len(row)] = 1
        p = len(c.prompt_ids)
        resp[i, p - 1 : len(row) - 1] = 1.0  # position t predicts token t+1
    return Rollout(ids, attn, resp, torch.tensor(rewards, dtype=torch.float32), torch.tensor(group_ids, dtype=torch.long))
