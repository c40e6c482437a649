"""Challenger rewards: frontier reward, repetition penalty and the format gate.

Pure functions: solve rates and texts in, tensors (plus detached stats) out.
"""
from __future__ import annotations

import math
import re
from typing import Callable, Sequence

import numpy as np
import torch
from sacrebleu.metrics.bleu import MAX_NGRAM_ORDER
from sacrebleu.metrics.helpers import extract_all_word_ngrams
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

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


# Words and single punctuation marks: "x=3+4" -> x = 3 + 4, so operators and numbers count apart.
_TOKEN = re.compile(r"\w+|[^\w\s]")
# Longest text compared, in tokens: bounds the cost (quadratic in the batch, linear in this)
# and keeps a long tail of padding from buying distance.
MAX_BLEU_TOKENS = 64


def bleu_tokens(text: str, max_tokens: int = MAX_BLEU_TOKENS) -> list[str]:
    """``"3+4"`` -> ``["3", "+", "4"]``: words and punctuation marks, the first ``max_tokens``."""
    return _TOKEN.findall(text)[:max_tokens]


def _ngrams(text: str):
    return extract_all_word_ngrams(" ".join(bleu_tokens(text)), 1, MAX_NGRAM_ORDER)


def bleu_scores(texts: Sequence[str]) -> np.ndarray:
    """``S[i, j]`` = sentence BLEU of ``texts[i]`` against the reference ``texts[j]``, in [0, 1].

    sacrebleu's sentence BLEU on ``bleu_tokens`` with floor smoothing 0.1 (NLTK's method1,
    which R-Zero uses) and effective order (orders longer than the hypothesis left out):
    ``BLEU(tokenize="none", smooth_method="floor", smooth_value=0.1, effective_order=True)``,
    which the tests hold it to. Here all pairs at once: n-gram counts from sacrebleu, clipped
    matches as matrix products of count indicators, so the cost stays small for a whole batch.
    """
    grams = [_ngrams(t) for t in texts]
    m = len(texts)
    lengths = np.array([n for _, n in grams], dtype=np.float64)
    log_p = np.zeros((m, m))
    orders = np.zeros(m)  # effective order of each hypothesis
    any_match = np.zeros((m, m), dtype=bool)
    for order in range(1, MAX_NGRAM_ORDER + 1):
        vocab: dict[tuple, int] = {}
        counts = [{vocab.setdefault(g, len(vocab)): c for g, c in cnt.items() if len(g) == order} for cnt, _ in grams]
        dense = np.zeros((m, max(1, len(vocab))), dtype=np.float32)
        for i, row in enumerate(counts):
            for v, c in row.items():
                dense[i, v] = c
        total = dense.sum(1).astype(np.float64)  # hypothesis n-grams of this order
        correct = np.zeros((m, m))
        for t in range(1, int(dense.max(initial=0)) + 1):  # min(a, b) = sum over t of [a >= t][b >= t]
            hit = (dense >= t).astype(np.float32)
            correct += hit @ hit.T
        live = total > 0  # orders past a hypothesis's length stop counting for it
        orders += live
        any_match |= correct > 0
        safe = np.where(live, total, 1.0)[:, None]
        p = np.where(correct > 0, correct / safe, 0.1 / safe)
        log_p += np.where(live[:, None], np.log(p), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        brevity = np.where(lengths[:, None] < lengths[None, :],
                           np.exp(1 - lengths[None, :] / np.maximum(lengths[:, None], 1e-9)), 1.0)
        score = brevity * np.exp(log_p / np.maximum(orders, 1)[:, None])
    return np.where(any_match & (lengths[:, None] > 0), score, 0.0)


def bleu_distance(a: str, b: str) -> float:
    """``1 - (BLEU(a|b) + BLEU(b|a)) / 2`` on ``bleu_tokens``: symmetric, 0 for identical texts."""
    if a == b:
        return 0.0
    s = bleu_scores([a, b])
    return float(1.0 - (s[0, 1] + s[1, 0]) / 2.0)


def repetition_penalty(texts: Sequence[str], threshold: float = 0.5, *, valid: Sequence[bool] | None = None) -> torch.Tensor:
    """R-Zero's repetition penalty: the size of each text's near-duplicate cluster / batch size.

    Distances are ``bleu_distance``; clusters come from average-linkage agglomerative
    clustering cut where the mean distance between two clusters reaches ``threshold``
    (R-Zero: BLEU on words, average linkage, 0.5). Invalid texts (``valid[i]`` False)
    join no cluster and get 0. Identical texts are compared once.

    Returns:
        float [B]: |cluster| / B for valid texts (1/B for a text unlike all others), 0 for invalid.
    """
    n = len(texts)
    valid = [True] * n if valid is None else list(valid)
    out = torch.zeros(n, dtype=torch.float32)
    members = [i for i in range(n) if valid[i]]
    if not members:
        return out
    labels = _cluster([texts[i] for i in members], threshold)
    sizes = np.bincount(labels)
    for i, label in zip(members, labels):
        out[i] = sizes[label] / n
    return out


def _cluster(texts: list[str], threshold: float) -> np.ndarray:
    """Average-linkage cluster labels (0-based), merging only below ``threshold``.

    Every text is a point, duplicates included (they weigh in averages as in R-Zero);
    BLEU is computed once per pair of distinct texts.
    """
    uniq = sorted(set(texts))
    if len(uniq) == 1:
        return np.zeros(len(texts), dtype=np.int64)
    scores = bleu_scores(uniq)
    dist_u = 1.0 - (scores + scores.T) / 2.0
    np.fill_diagonal(dist_u, 0.0)
    index = {t: i for i, t in enumerate(uniq)}
    idx = np.array([index[t] for t in texts])
    tree = linkage(squareform(dist_u[np.ix_(idx, idx)], checks=False), method="average")
    # fcluster keeps merges at distance <= t; R-Zero (scikit-learn) merges strictly below the threshold.
    return fcluster(tree, t=math.nextafter(threshold, -math.inf), criterion="distance") - 1


def challenger_rewards(
    valid_b: torch.Tensor,
    solve_rate_b: torch.Tensor,
    repetition_b: torch.Tensor,
    *,
    frontier: str = "uncertainty",
    repetition_coef: float = 1.0,
    invalid_reward: float = -1.0,
    wrong_b: torch.Tensor | None = None,
    wrong_reward: float = -0.5,
):
    """Reward of each proposal: ``valid ? frontier(p) - coef * rep : invalid_reward``; with ``wrong_b``
    (bool [B]: rejected but well-formed) those get ``wrong_reward`` instead (Absolute Zero's tiers).

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
    if wrong_b is not None:
        reward_b = torch.where(~valid_b & wrong_b, torch.full_like(reward_b, wrong_reward), reward_b)
    n_valid = int(valid_b.sum())
    stats = {
        "valid_fraction": n_valid / max(1, valid_b.numel()),
        "frontier_mean": float(frontier_b[valid_b].mean()) if n_valid else 0.0,
        "repetition_mean": float(repetition_b[valid_b].mean()) if n_valid else 0.0,
    }
    return reward_b, stats
