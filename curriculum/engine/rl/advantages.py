"""Group-relative advantage estimators for the GRPO family.

Every estimator takes per-sequence rewards ``rewards_n`` [N] and integer group ids
``group_ids_n`` [N] (any values, any order, groups of any size: filtering leaves
ragged groups) and returns per-sequence advantages ``adv_n`` [N]; given a response
mask [N, T] they are broadcast to token advantages ``adv_nt`` [N, T], zero outside
the mask.

Conventions shared by every estimator and both backends:

* ``grpo`` divides by the *unbiased* (n - 1) group standard deviation, as
  ``torch.std`` does and as verl and TRL do: ``(r - mean_g) / (std_g + eps)``.
* A singleton group, or a group whose rewards are all exactly equal, gives 0 to
  each of its members: there is nothing to compare against (never NaN).
* NaN or infinite rewards raise ``ValueError`` (a reward function returning NaN is
  a bug to surface, not to hide by training on a zero).

Backends: ``torch`` (vectorised segment sums, no Python loop over groups or
samples), ``triton`` (one fused kernel from rewards + group ids + mask to token
advantages, see ``triton_kernels.py``), ``auto`` (Triton on CUDA tensors, else torch).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from curriculum.engine.rl._backend import resolve_backend, triton_kernels
from curriculum.engine.rl.segments import group_stats, whiten_members

# name -> fn(rewards_n, inv_n, num_groups, eps) -> adv_n; all are torch twins.
ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {}

# Estimators the Triton kernel implements (others run on torch under ``auto``).
TRITON_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_pp")


def register_estimator(name: str):
    """Register ``fn(rewards_n, inv_n, num_groups, eps) -> adv_n`` under ``name``.

    ``inv_n`` [N] holds compact group indices in ``[0, num_groups)``.
    """

    def wrap(fn):
        ESTIMATORS[name] = fn
        return fn

    return wrap


@register_estimator("grpo")
def _grpo(rewards_n, inv_n, num_groups, eps):
    """GRPO (Shao et al., 2024, DeepSeekMath): ``(r - mean_g) / (std_g + eps)``, unbiased std."""
    _, centred_n, var_n, degenerate_n = group_stats(rewards_n, inv_n, num_groups)
    adv_n = centred_n / (var_n.sqrt() + eps)
    return torch.where(degenerate_n, torch.zeros_like(adv_n), adv_n)


@register_estimator("dr_grpo")
def _dr_grpo(rewards_n, inv_n, num_groups, eps):
    """Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-Like Training"): ``r - mean_g``."""
    _, centred_n, _, degenerate_n = group_stats(rewards_n, inv_n, num_groups)
    return torch.where(degenerate_n, torch.zeros_like(centred_n), centred_n)


@register_estimator("rloo")
def _rloo(rewards_n, inv_n, num_groups, eps):
    """RLOO (Ahmadian et al., 2024): ``r - mean of the other n-1 members``.

    Uses the identity ``r - (sum_g - r) / (n - 1) = (r - mean_g) * n / (n - 1)``.
    """
    count_n, centred_n, _, degenerate_n = group_stats(rewards_n, inv_n, num_groups)
    adv_n = centred_n * count_n / (count_n - 1).clamp(min=1)
    return torch.where(degenerate_n, torch.zeros_like(adv_n), adv_n)


@register_estimator("reinforce_pp")
def _reinforce_pp(rewards_n, inv_n, num_groups, eps):
    """REINFORCE++ with group baseline (Hu et al., 2025, arXiv:2501.03262).

    Subtract the group mean, then whiten over the batch (see ``whiten_members``:
    over sequences, each counted once, not over tokens as OpenRLHF does).
    """
    count_n, centred_n, _, degenerate_n = group_stats(rewards_n, inv_n, num_groups)
    centred_n = torch.where(degenerate_n, torch.zeros_like(centred_n), centred_n)
    return whiten_members(centred_n, count_n, eps)


def group_ids_for(kinds: Sequence[str], group_size: int, task_relative: bool = False) -> list[int]:
    """Group ids of a role's batch: one per GRPO group (``group_size`` consecutive samples), or, with
    ``task_relative``, one per task type.

    Task-relative baselines are Absolute Zero's TRR++ (Zhao et al., 2025, "Absolute Zero", Sec. 3.3.5):
    each (task type, role) pair gets its own baseline, the mean and std of its rewards in the batch, so
    ``compute_advantages(r, group_ids_for(kinds, g, True), "grpo")`` is ``(r - mean_k) / (std_k + eps)``
    over the samples of type k. The role is the update's own (each role's batch is updated apart);
    a batch without types (kinds all "") is one group: a batch-wide baseline.
    """
    if not task_relative:
        return [i // group_size for i in range(len(kinds))]
    index: dict[str, int] = {}
    return [index.setdefault(k, len(index)) for k in kinds]


def _check_inputs(rewards, group_ids, response_mask):
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must both be [N]")
    if not rewards.is_floating_point():
        raise ValueError(f"rewards must be a float tensor, got {rewards.dtype}")
    if group_ids.is_floating_point() or group_ids.is_complex():
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}")
    if response_mask is not None and (response_mask.dim() != 2 or response_mask.shape[0] != rewards.shape[0]):
        raise ValueError(f"response_mask {tuple(response_mask.shape)} must be [N, T] with N={rewards.shape[0]}")
    # One host sync; NaN/inf rewards are rejected rather than silently zeroed.
    if not bool(torch.isfinite(rewards).all()):
        bad = (~torch.isfinite(rewards)).nonzero().flatten()[:8].tolist()
        raise ValueError(f"rewards contain NaN or inf (first bad indices {bad}); fix the reward function")


def compute_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    estimator: str = "grpo",
    *,
    response_mask: torch.Tensor | None = None,
    eps: float = 1e-6,
    backend: str = "torch",
) -> torch.Tensor:
    """Advantages for a batch of scored sequences.

    Args:
        rewards: float [N]. NaN or inf raises ``ValueError``.
        group_ids: integer [N], any values and order; groups may be ragged.
        estimator: ``grpo`` | ``dr_grpo`` | ``rloo`` | ``reinforce_pp`` (or any
            name added with ``register_estimator``, torch backend only).
        response_mask: optional [N, T] (bool, int or float weights); if given the
            result is ``adv_n[:, None] * mask`` as [N, T], zero outside the mask.
        eps: added to the std in ``grpo`` / ``reinforce_pp``.
        backend: ``auto`` | ``torch`` | ``triton``.

    Returns:
        ``adv_n`` [N] or ``adv_nt`` [N, T]; float64 if ``rewards`` is float64,
        else float32 (statistics of bf16 rewards are not worth doing in bf16).
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; choose from {sorted(ESTIMATORS)}")
    _check_inputs(rewards, group_ids, response_mask)
    which = resolve_backend(backend, rewards, group_ids, response_mask)
    if which == "triton" and estimator not in TRITON_ESTIMATORS:
        if backend == "triton":
            raise ValueError(f"estimator {estimator!r} has no Triton kernel; use backend='torch'")
        which = "torch"
    compute_dtype = torch.float64 if rewards.dtype == torch.float64 else torch.float32
    rewards_n = rewards.to(compute_dtype)
    if rewards_n.numel() == 0:
        shape = (0,) if response_mask is None else tuple(response_mask.shape)
        return rewards_n.new_zeros(shape)
    if which == "triton":
        return triton_kernels().group_advantages(rewards_n, group_ids, estimator, response_mask, eps)
    _, inv_n = torch.unique(group_ids, return_inverse=True)  # sort-based compaction, O(N log N)
    num_groups = int(inv_n.max()) + 1
    adv_n = ESTIMATORS[estimator](rewards_n, inv_n, num_groups, eps)
    if response_mask is None:
        return adv_n
    return broadcast_to_tokens(adv_n, response_mask)


def broadcast_to_tokens(adv_n: torch.Tensor, mask_nt: torch.Tensor) -> torch.Tensor:
    """``adv_n[:, None] * mask_nt`` as [N, T]; one pass for a bool mask (no float copy of it)."""
    if mask_nt.dtype == torch.bool:
        return torch.where(mask_nt, adv_n[:, None], adv_n.new_zeros(()))
    return adv_n[:, None] * mask_nt.to(adv_n.dtype)
