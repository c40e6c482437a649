"""Clipped policy-gradient surrogate (PPO / GRPO / DAPO) with optional k3 KL.

``loss_bt = -min(r' A, clip(r, 1 - clip_low, 1 + clip_high) A) + kl_coef * k3(ref, logp)``
with ``r = exp(logp - old_logp)`` (PPO, Schulman et al., 2017; asymmetric
"clip-higher" from DAPO, Yu et al., 2025), ``r' = min(r, delta)`` (TRL's ``delta``,
off by default) and, for ``A < 0``, at most ``-A * clip_ratio_c`` (verl's dual-clip,
Ye et al., 2020; off by default here, on in the config), the k3 term clamped as verl's ``low_var_kl`` (log-ratio to +-20, each token's KL to
[-10, 10]), reduced to a scalar by one
of three aggregations. The torch twin is plain autograd; the Triton backend is a
fused forward (per-row partial sums) and a hand-written fused backward.

Tokens with mask 0 are ignored entirely: their log-probs may be garbage (even inf)
without turning the loss or its gradient into NaN.
"""
from __future__ import annotations

import math

import torch

from curriculum.engine.rl._backend import resolve_backend, triton_kernels

KL_LOG_RATIO_CLIP = 20.0  # |ref - logp| bound before exp (verl's low_var_kl)
KL_TOKEN_CLIP = 10.0  # bound on each token's k3 (verl's low_var_kl)
AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _nonzero(total):
    """``total`` with 0 replaced by 1: guards 0/0 only, so mask weights below 1 still average exactly."""
    return torch.where(total != 0, total, torch.ones_like(total))


def _aggregate_rows(rowsum_b, count_b, aggregation: str, norm_len: int | None):
    """Scalar loss from per-row masked sums ``rowsum_b`` [B] and mask sums ``count_b`` [B].

    token-mean: sum of all valid token losses / their total mask weight (DAPO).
    seq-mean-token-mean: per-sequence weighted token mean, then mean over sequences (GRPO paper).
    seq-mean-token-sum-norm: per-sequence token sum / ``norm_len`` (a constant: the
        longest completion), then mean over sequences (Dr. GRPO, Liu et al., 2025).
    Sequence means run over rows with at least one valid token, so fully masked
    (padding) rows neither add loss nor dilute it.
    """
    if aggregation == "token-mean":
        return rowsum_b.sum() / _nonzero(count_b.sum())
    rows = (count_b > 0).to(rowsum_b.dtype).sum().clamp(min=1)
    if aggregation == "seq-mean-token-mean":
        return (rowsum_b / _nonzero(count_b)).sum() / rows
    if aggregation == "seq-mean-token-sum-norm":
        return rowsum_b.sum() / (norm_len * rows)
    raise ValueError(f"unknown aggregation {aggregation!r}; choose from {AGGREGATIONS}")


def _row_weights(count_b, aggregation: str, norm_len: int | None):
    """d loss / d (token loss) for a valid token of each row, as [B] (the mask multiplies it)."""
    if aggregation == "token-mean":
        return (1.0 / _nonzero(count_b.sum())).expand_as(count_b)
    rows = (count_b > 0).to(count_b.dtype).sum().clamp(min=1)
    if aggregation == "seq-mean-token-mean":
        return 1.0 / (_nonzero(count_b) * rows)
    return (1.0 / (norm_len * rows)).expand_as(count_b)


def _check_aggregation(aggregation: str, norm_len: int | None) -> None:
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; choose from {AGGREGATIONS}")
    if aggregation == "seq-mean-token-sum-norm" and norm_len is None:
        # The padded width T would do, but it grows with the prompt: the same completions
        # would get a smaller loss behind a longer prompt.
        raise ValueError("seq-mean-token-sum-norm needs norm_len, a constant such as the role's "
                         "sampling.max_new_tokens (Dr. GRPO), not the batch's padded width")
    if norm_len is not None and norm_len <= 0:
        raise ValueError(f"norm_len ({norm_len}) must be > 0")


def aggregate(loss_bt: torch.Tensor, mask_bt: torch.Tensor, aggregation: str, norm_len: int | None = None):
    """Reduce token losses [B, T] to a scalar; see ``_aggregate_rows`` for the three modes."""
    _check_aggregation(aggregation, norm_len)
    m_bt = mask_bt.to(loss_bt.dtype)
    masked_bt = torch.where(mask_bt != 0, loss_bt * m_bt, torch.zeros_like(loss_bt))
    return _aggregate_rows(masked_bt.sum(-1), m_bt.sum(-1), aggregation, norm_len)


def _stats_dict(sums: torch.Tensor, has_ref: bool) -> dict[str, float]:
    """sums [6]: mask, clip_low, clip_high, approx_kl, ratio, kl_ref -> token means (one sync)."""
    n, lo, hi, akl, rsum, kl = sums.detach().double().tolist()
    n = n if n != 0 else 1.0
    stats = {"clip_frac_low": lo / n, "clip_frac_high": hi / n, "approx_kl": akl / n, "ratio_mean": rsum / n}
    if has_ref:
        stats["kl_ref"] = kl / n
    return stats


def _policy_loss_torch(logp, old_logp, adv_bt, mask, clip_low, clip_high, clip_ratio_c, delta, kl_coef, ref_logp,
                       aggregation, norm_len):
    """The torch twin: plain autograd, written to be read."""
    valid_bt = mask != 0
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    # Sanitise outside the mask so that inf there cannot make NaN (also in gradients).
    logp_s = torch.where(valid_bt, logp, zero)
    old_s = torch.where(valid_bt, old_logp.to(logp.dtype), zero)
    adv_s = torch.where(valid_bt, adv_bt.to(logp.dtype), zero)
    log_ratio_bt = logp_s - old_s
    ratio_bt = log_ratio_bt.exp()
    clipped_bt = ratio_bt.clamp(1.0 - clip_low, 1.0 + clip_high)
    capped_bt = ratio_bt.clamp(max=delta) if delta else ratio_bt
    loss_bt = -torch.minimum(capped_bt * adv_s, clipped_bt * adv_s)
    if clip_ratio_c:
        loss_bt = torch.where(adv_s < 0, torch.minimum(loss_bt, -adv_s * clip_ratio_c), loss_bt)
    kl_bt = None
    if ref_logp is not None:
        d_bt = (torch.where(valid_bt, ref_logp.to(logp.dtype), zero) - logp_s).clamp(-KL_LOG_RATIO_CLIP, KL_LOG_RATIO_CLIP)
        # k3 estimator (Schulman, 2020), clamped as verl's low_var_kl: one far-off token cannot make inf.
        kl_bt = (d_bt.exp() - d_bt - 1.0).clamp(-KL_TOKEN_CLIP, KL_TOKEN_CLIP)
        if kl_coef != 0:
            loss_bt = loss_bt + kl_coef * kl_bt
    loss = aggregate(loss_bt, mask, aggregation, norm_len)
    with torch.no_grad():
        m = mask.to(logp.dtype)
        r = ratio_bt.detach()
        sums = torch.stack([
            m.sum(),
            (((r < 1.0 - clip_low) & (adv_s < 0)).to(m.dtype) * m).sum(),
            (((r > 1.0 + clip_high) & (adv_s > 0)).to(m.dtype) * m).sum(),
            ((r - 1.0 - log_ratio_bt.detach()) * m).sum(),
            (r * m).sum(),
            (kl_bt.detach() * m).sum() if kl_bt is not None else m.new_zeros(()),
        ])
    return loss, _stats_dict(sums, ref_logp is not None)


class _FusedPolicyLoss(torch.autograd.Function):
    """Triton forward (partial sums per row) and backward (recomputes the ratio)."""

    @staticmethod
    def forward(ctx, logp, old_logp, adv, mask, ref_logp, clips, kl_coef, aggregation, norm_len):
        tk = triton_kernels()
        part_b8 = tk.pg_partials(logp, old_logp, adv, mask, ref_logp, *clips, kl_coef)
        loss = _aggregate_rows(part_b8[:, 0], part_b8[:, 1], aggregation, norm_len)
        ctx.save_for_backward(logp, old_logp, adv, mask, ref_logp, part_b8[:, 1])
        ctx.cfg = (clips, kl_coef, aggregation, norm_len)
        ctx.mark_non_differentiable(part_b8)
        return loss.to(logp.dtype), part_b8

    @staticmethod
    def backward(ctx, grad_loss, _grad_part):
        logp, old_logp, adv, mask, ref_logp, count_b = ctx.saved_tensors
        clips, kl_coef, aggregation, norm_len = ctx.cfg
        scale_b = _row_weights(count_b, aggregation, norm_len) * grad_loss.float()
        grad = triton_kernels().pg_grad(logp, old_logp, adv, mask, ref_logp, scale_b, *clips, kl_coef)
        return grad, None, None, None, None, None, None, None, None


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float = 0.0,
    delta: float = 0.0,
    kl_coef: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    aggregation: str = "token-mean",
    backend: str = "torch",
    norm_len: int | None = None,
):
    """Clipped surrogate loss, ``-min(r A, clip(r, 1-clip_low, 1+clip_high) A) + kl_coef * k3``
    (with dual-clip and ``delta`` as the module docstring says).

    Args:
        logp, old_logp: [B, T] log-probs of the sampled tokens under the current
            and the behaviour policy. Gradients flow to ``logp`` only.
        advantages: [B, T], or [B] broadcast over tokens.
        mask: [B, T] bool/int/float; 0 marks tokens to ignore (a float mask weights tokens:
            means are weighted means, whatever the weights' scale).
        clip_ratio_c: verl's dual-clip: where A < 0 the token loss is at most ``-A * clip_ratio_c``
            (> 1), so one token with a huge ratio cannot dominate the batch; 0 = off.
        delta: TRL's upper bound on the unclipped ratio, ``r -> min(r, delta)`` (> 1 + clip_high);
            0 = off.
        ref_logp: [B, T] reference-policy log-probs, required when ``kl_coef > 0``;
            the KL is the k3 estimator ``exp(d) - d - 1`` of ``d = ref - logp``, ``d`` clamped to
            +-20 and each token's KL to [-10, 10] (verl's ``low_var_kl``).
        aggregation: ``token-mean`` | ``seq-mean-token-mean`` | ``seq-mean-token-sum-norm``.
        backend: ``auto`` | ``torch`` | ``triton``.
        norm_len: the constant of ``seq-mean-token-sum-norm``, required with it (the role's
            longest completion, ``sampling.max_new_tokens``); unused by the other aggregations.

    Returns:
        (loss, stats): a scalar with grad, and a dict of floats (masked token means):
        clip_frac_low (r < 1-clip_low with A < 0), clip_frac_high (r > 1+clip_high
        with A > 0), approx_kl (k3 of old vs new, ``r - 1 - log r``), ratio_mean,
        and kl_ref when ``ref_logp`` is given.
    """
    _check_aggregation(aggregation, norm_len)
    if clip_ratio_c and clip_ratio_c <= 1:
        raise ValueError(f"clip_ratio_c ({clip_ratio_c}) must be > 1 (or 0 = off)")
    if delta and delta <= 1 + clip_high:
        raise ValueError(f"delta ({delta}) must be > 1 + clip_high ({1 + clip_high}) (or 0 = off)")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError(f"kl_coef={kl_coef} needs ref_logp")
    if logp.dim() != 2 or old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask "
                         f"{tuple(mask.shape)} must all be the same [B, T]")
    if advantages.shape not in (logp.shape, logp.shape[:1]):
        raise ValueError(f"advantages {tuple(advantages.shape)} must be [B, T] or [B] for logp {tuple(logp.shape)}")
    which = resolve_backend(backend, logp, old_logp, advantages, mask, ref_logp)
    if which == "torch":
        adv_bt = advantages if advantages.dim() == 2 else advantages[:, None].expand_as(logp)
        return _policy_loss_torch(logp, old_logp, adv_bt, mask, clip_low, clip_high, clip_ratio_c, delta, kl_coef,
                                  ref_logp, aggregation, norm_len)
    adv = advantages.detach()
    ref = ref_logp.detach() if ref_logp is not None else None
    # The kernels take "off" as an infinite bound: min(x, inf) = x, so nothing changes.
    clips = (float(clip_low), float(clip_high), float(clip_ratio_c or math.inf), float(delta or math.inf))
    loss, part_b8 = _FusedPolicyLoss.apply(logp, old_logp.detach(), adv, mask, ref, clips, float(kl_coef),
                                           aggregation, norm_len)
    return loss, _stats_dict(part_b8.sum(0)[1:7], ref_logp is not None)
