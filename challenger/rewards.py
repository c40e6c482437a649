"""Challenger rewards: frontier reward, repetition penalty and the format gate.

Pure functions: solve rates and texts in, tensors (plus detached stats) out.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from sacrebleu.metrics import BLEU

FRONTIER_REWARDS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}


def register_frontier_reward(name: str):
    """Register ``fn(solve_rate_b) -> reward_b`` (both float [B], rates in [0, 1])."""

    def wrap(fn):
        FRONTIER_REWARDS[name] = fn
        return fn

    return wrap


@register_frontier_reward("uncertainty")
def uncertainty_reward(p_b: torch.Tensor) -> torch.Tensor:
    """R-Zero (Huang et al., 2025): ``1 - 2|p - 1/2|``, peaked where the solver is a coin flip."""
    return 1.0 - 2.0 * (p_b - 0.5).abs()


@register_frontier_reward("learnability")
def learnability_reward(p_b: torch.Tensor) -> torch.Tensor:
    """Absolute Zero (Zhao et al., 2025): ``1 - p`` if ``0 < p < 1`` else 0."""
    inside = (p_b > 0) & (p_b < 1)
    return torch.where(inside, 1.0 - p_b, torch.zeros_like(p_b))


_BLEU = BLEU(tokenize="char", effective_order=True)


def bleu_distance(a: str, b: str) -> float:
    """``1 - BLEU(a, b) / 100`` on characters; 0 for identical strings."""
    if a == b:
        return 0.0
    return 1.0 - _BLEU.sentence_score(a, [b]).score / 100.0


def repetition_penalty(texts: Sequence[str], threshold: float = 0.5) -> torch.Tensor:
    """R-Zero's repetition penalty: size of each text's near-duplicate cluster / batch size.

    Texts closer than ``threshold`` in BLEU distance are linked; clusters are the
    connected components (single linkage). Identical texts are compared once.

    Returns:
        float [B], in (0, 1]: 1/B for a text unlike all others, 1 if all are alike.
    """
    n = len(texts)
    if n == 0:
        return torch.zeros(0)
    uniq = sorted(set(texts))
    parent = list(range(len(uniq)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(uniq)):
        for j in range(i + 1, len(uniq)):
            if find(i) != find(j) and bleu_distance(uniq[i], uniq[j]) < threshold:
                parent[find(i)] = find(j)
    index = {t: i for i, t in enumerate(uniq)}
    roots = [find(index[t]) for t in texts]
    sizes: dict[int, int] = {}
    for r in roots:
        sizes[r] = sizes.get(r, 0) + 1
    return torch.tensor([sizes[r] / n for r in roots], dtype=torch.float32)


def challenger_rewards(
    valid_b: torch.Tensor,
    solve_rate_b: torch.Tensor,
    repetition_b: torch.Tensor,
    *,
    frontier: str = "uncertainty",
    repetition_coef: float = 1.0,
    invalid_reward: float = -1.0,
):
    """Reward of each proposal: ``valid ? frontier(p) - coef * rep : invalid_reward``.

    Args:
        valid_b: bool [B], the format gate (parsed and grounded by the environment).
        solve_rate_b: float [B], solver's probe solve rate (ignored where invalid).
        repetition_b: float [B], from ``repetition_penalty``.

    Returns:
        (reward_b, stats) with stats: frontier_mean and repetition_mean over valid
        proposals, valid_fraction.
    """
    if frontier not in FRONTIER_REWARDS:
        raise ValueError(f"unknown frontier reward {frontier!r}; choose from {sorted(FRONTIER_REWARDS)}")
    p_b = solve_rate_b.clamp(0.0, 1.0)
    frontier_b = FRONTIER_REWARDS[frontier](p_b)
    valid_reward_b = frontier_b - repetition_coef * repetition_b
    reward_b = torch.where(valid_b, valid_reward_b, torch.full_like(valid_reward_b, invalid_reward))
    n_valid = int(valid_b.sum())
    stats = {
        "valid_fraction": n_valid / max(1, valid_b.numel()),
        "frontier_mean": float(frontier_b[valid_b].mean()) if n_valid else 0.0,
        "repetition_mean": float(repetition_b[valid_b].mean()) if n_valid else 0.0,
    }
    return reward_b, stats
