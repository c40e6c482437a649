"""Clipped policy-gradient surrogate (PPO / GRPO / DAPO) with optional k3 KL.

``loss_bt = -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A) + kl_coef * k3(ref, logp)``
with ``r = exp(logp - old_logp)`` (PPO, Schulman et al., 2017; asymmetric
"clip-higher" from DAPO, Yu et al., 2025), reduced to a scalar by one of three
aggregations. The torch twin is plain autograd; the Triton backend is a fused
forward (per-row partial sums) and a hand-written fused backward.

Tokens with mask 0 are ignored entirely: their log-probs may be garbage (even inf)
without turning the loss or its gradient into NaN.
"""
from __future__ import annotations

import torch

from curriculum.engine.rl._backend import resolve_backend, triton_kernels

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _aggregate_rows(rowsum_b, count_b, aggregation: str, norm_len: int):
    """Scalar loss from per-row masked sums ``rowsum_b`` [B] and mask sums ``count_b`` [B].

    token-mean: sum of all valid token losses / number of valid tokens (DAPO).
    seq-mean-token-mean: per-sequence token mean, then mean over sequences (GRPO paper).
    seq-mean-token-sum-norm: per-sequence token sum / ``norm_len`` (a constant, default
        T), then mean over sequences (Dr. GRPO, Liu et al., 2025).
    Sequence means run over rows with at least one valid token, so fully masked
    (padding) rows neither add loss nor dilute it.
    """
    if aggregation == "token-mean":
        return rowsum_b.sum() / count_b.sum().clamp(min=1)
    rows = (count_b > 0).to(rowsum_b.dtype).sum().clamp(min=1)
    if aggregation == "seq-mean-token-mean":
        return (rowsum_b / count_b.clamp(min=1)).sum() / rows
    if aggregation == "seq-mean-token-sum-norm":
        return rowsum_b.sum() / (norm_len * rows)
    raise ValueError(f"unknown aggregation {aggregation!r}; choose from {AGGREGATIONS}")


def _row_weights(count_b, aggregation: str, norm_len: int):
    """d loss / d (token loss) for a valid token of each row, as [B] (the mask multiplies it)."""
    if aggregation == "token-mean":
        return (1.0 / count_b.sum().clamp(min=1)).expand_as(count_b)
    rows = (count_b > 0).to(count_b.dtype).sum().clamp(min=1)
    if aggregation == "seq-mean-token-mean":
        return 1.0 / (count_b.clamp(min=1) * rows)
    return (1.0 / (norm_len * rows)).expand_as(count_b)


def aggregate(loss_bt: torch.Tensor, mask_bt: torch.Tensor, aggregation: str, norm_len: int | None = None):
    """Reduce token losses [B, T] to a scalar; see ``_aggregate_rows`` for the three modes."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; choose from {AGGREGATIONS}")
    m_bt = mask_bt.to(loss_bt.dtype)
    masked_bt = torch.where(mask_bt != 0, loss_bt * m_bt, torch.zeros_like(loss_bt))
    norm = norm_len if norm_len is not None else loss_bt.shape[-1]
    return _aggregate_rows(masked_bt.sum(-1), m_bt.sum(-1), aggregation, norm)


def _stats_dict(sums: torch.Tensor, has_ref: bool) -> dict[str, float]:
    """sums [6]: mask, clip_low, clip_high, approx_kl, ratio, kl_ref -> token means (one sync)."""
    n, lo, hi, akl, rsum, kl = sums.detach().double().tolist()
    n = max(n, 1.0)
    stats = {"clip_frac_low": lo / n, "clip_frac_high": hi / n, "approx_kl": akl / n, "ratio_mean": rsum / n}
    if has_ref:
        stats["kl_ref"] = kl / n
    return stats


def _policy_loss_torch(logp, old_logp, adv_bt, mask, clip_low, clip_high, kl_coef, ref_logp, aggregation, norm_len):
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
    loss_bt = -torch.minimum(ratio_bt * adv_s, clipped_bt * adv_s)
    kl_bt = None
    if ref_logp is not None:
        d_bt = torch.where(valid_bt, ref_logp.to(logp.dtype), zero) - logp_s
        kl_bt = d_bt.exp() - d_bt - 1.0  # k3 estimator (Schulman, 2020)
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
    def forward(ctx, logp, old_logp, adv, mask, ref_logp, clip_low, clip_high, kl_coef, aggregation, norm_len):
        tk = triton_kernels()
        part_b8 = tk.pg_partials(logp, old_logp, adv, mask, ref_logp, clip_low, clip_high, kl_coef)
        loss = _aggregate_rows(part_b8[:, 0], part_b8[:, 1], aggregation, norm_len)
        ctx.save_for_backward(logp, old_logp, adv, mask, ref_logp, part_b8[:, 1])
        ctx.cfg = (clip_low, clip_high, kl_coef, aggregation, norm_len)
        ctx.mark_non_differentiable(part_b8)
        return loss.to(logp.dtype), part_b8

    @staticmethod
    def backward(ctx, grad_loss, _grad_part):
        logp, old_logp, adv, mask, ref_logp, count_b = ctx.saved_tensors
        clip_low, clip_high, kl_coef, aggregation, norm_len = ctx.cfg
        scale_b = _row_weights(count_b, aggregation, norm_len) * grad_loss.float()
        grad = triton_kernels().pg_grad(logp, old_logp, adv, mask, ref_logp, scale_b, clip_low, clip_high, kl_coef)
        return grad, None, None, None, None, None, None, None, None, None


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    kl_coef: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    aggregation: str = "token-mean",
    backend: str = "torch",
    norm_len: int | None = None,
):
    """Clipped surrogate loss, ``-min(r A, clip(r, 1-clip_low, 1+clip_high) A) + kl_coef * k3``.

    Args:
        logp, old_logp: [B, T] log-probs of the sampled tokens under the current
            and the behaviour policy. Gradients flow to ``logp`` only.
        advantages: [B, T], or [B] broadcast over tokens.
        mask: [B, T] bool/int/float; 0 marks tokens to ignore (a float mask weights tokens).
        ref_logp: [B, T] reference-policy log-probs, required when ``kl_coef > 0``;
            the KL is the k3 estimator ``exp(ref - logp) - (ref - logp) - 1``.
        aggregation: ``token-mean`` | ``seq-mean-token-mean`` | ``seq-mean-token-sum-norm``.
        backend: ``auto`` | ``torch`` | ``triton``.
        norm_len: the constant of ``seq-mean-token-sum-norm`` (default T).

    Returns:
        (loss, stats): a scalar with grad, and a dict of floats (masked token means):
        clip_frac_low (r < 1-clip_low with A < 0), clip_frac_high (r > 1+clip_high
        with A > 0), approx_kl (k3 of old vs new, ``r - 1 - log r``), ratio_mean,
        and kl_ref when ``ref_logp`` is given.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; choose from {AGGREGATIONS}")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError(f"kl_coef={kl_coef} needs ref_logp")
    if logp.dim() != 2 or old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask "
                         f"{tuple(mask.shape)} must all be the same [B, T]")
    if advantages.shape not in (logp.shape, logp.shape[:1]):
        raise ValueError(f"advantages {tuple(advantages.shape)} must be [B, T] or [B] for logp {tuple(logp.shape)}")
    norm = int(norm_len) if norm_len is not None else logp.shape[-1]
    which = resolve_backend(backend, logp, old_logp, advantages, mask, ref_logp)
    if which == "torch":
        adv_bt = advantages if advantages.dim() == 2 else advantages[:, None].expand_as(logp)
        return _policy_loss_torch(logp, old_logp, adv_bt, mask, clip_low, clip_high, kl_coef, ref_logp,
                                  aggregation, norm)
    adv = advantages.detach()
    ref = ref_logp.detach() if ref_logp is not None else None
    loss, part_b8 = _FusedPolicyLoss.apply(logp, old_logp.detach(), adv, mask, ref, float(clip_low),
                                           float(clip_high), float(kl_coef), aggregation, norm)
    return loss, _stats_dict(part_b8.sum(0)[1:7], ref_logp is not None)
