"""Sampling completions and packing them into padded training batches."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm.auto import tqdm


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


def encode_prompts(tokenizer, prompts: list[str]) -> list[list[int]]:
    return [[tokenizer.bos_token_id] + tokenizer.encode(p, add_special_tokens=False) for p in prompts]


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], *, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, greedy: bool = False, batch_size: int = 256, seed: int | None = None,
             desc: str | None = None, progress: bool = False) -> list[Completion]:
    """Sample one completion per prompt (repeat prompts for groups).

    Reproducible: the sampling stream is seeded from ``seed`` alone, so the same
    weights and seed give the same completions whatever ran before.
    """
    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    encoded = encode_prompts(tokenizer, prompts)
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
            eos_token_id=eos, pad_token_id=pad, **kwargs,
        ).cpu()
        for i, row in enumerate(chunk):
            new = seqs[i, width:].tolist()
            finished = eos in new
            new = new[: new.index(eos) + 1] if finished else [t for t in new if t != pad]
            text = tokenizer.decode([t for t in new if t != eos], skip_special_tokens=True)
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
