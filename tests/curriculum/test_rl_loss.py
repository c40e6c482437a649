"""policy_loss (torch backend) against a float64 loop, and its gradients against autograd."""
import math

import pytest
import torch

from curriculum.engine.rl import AGGREGATIONS, policy_loss

CLIP_LOW, CLIP_HIGH, KL = 0.2, 0.28, 0.05


def reference_loss(logp, old, adv, mask, ref, aggregation, clip_low=CLIP_LOW, clip_high=CLIP_HIGH, kl_coef=KL,
                   norm_len=None):
    """Plain loops in float64: per-token loss, then the aggregation, then the stats."""
    B, T = len(logp), len(logp[0])
    row_sum, row_cnt = [0.0] * B, [0.0] * B
    n = lo = hi = akl = rsum = kl_sum = 0.0
    for b in range(B):
        for t in range(T):
            m = float(mask[b][t])
            if m == 0:
                continue
            a = float(adv[b][t]) if adv.dim() == 2 else float(adv[b])
            lr = float(logp[b][t]) - float(old[b][t])
            r = math.exp(lr)
            clipped = min(max(r, 1 - clip_low), 1 + clip_high)
            d = float(ref[b][t]) - float(logp[b][t])
            k3 = math.exp(d) - d - 1
            loss = -min(r * a, clipped * a) + kl_coef * k3
            row_sum[b] += m * loss
            row_cnt[b] += m
            n += m
            lo += m * (r < 1 - clip_low and a < 0)
            hi += m * (r > 1 + clip_high and a > 0)
            akl += m * (r - 1 - lr)
            rsum += m * r
            kl_sum += m * k3
    rows = max(sum(1 for c in row_cnt if c > 0), 1)
    if aggregation == "token-mean":
        total = sum(row_sum) / max(n, 1)
    elif aggregation == "seq-mean-token-mean":
        total = sum(s / max(c, 1) for s, c in zip(row_sum, row_cnt)) / rows
    else:
        total = sum(s / (norm_len or T) for s in row_sum) / rows
    n = max(n, 1)
    return total, {"clip_frac_low": lo / n, "clip_frac_high": hi / n, "approx_kl": akl / n,
                   "ratio_mean": rsum / n, "kl_ref": kl_sum / n}


def naive_loss(logp, old, adv, mask, ref, aggregation, norm_len=None):
    """The textbook autograd expression (no sanitising) whose gradient the twins must match."""
    adv_bt = adv if adv.dim() == 2 else adv[:, None].expand_as(logp)
    ratio = (logp - old).exp()
    pg = -torch.minimum(ratio * adv_bt, ratio.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH) * adv_bt)
    d = ref - logp
    loss_bt = (pg + KL * (d.exp() - d - 1)) * mask
    cnt = mask.sum(-1)
    rows = (cnt > 0).sum().clamp(min=1)
    if aggregation == "token-mean":
        return loss_bt.sum() / mask.sum().clamp(min=1)
    if aggregation == "seq-mean-token-mean":
        return (loss_bt.sum(-1) / cnt.clamp(min=1)).sum() / rows
    return loss_bt.sum() / ((norm_len or logp.shape[1]) * rows)


def make_batch(seed, B=7, T=13, per_seq_adv=False, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=gen, dtype=dtype) * 3
    old = logp + 0.3 * torch.randn(B, T, generator=gen, dtype=dtype)
    ref = logp + 0.2 * torch.randn(B, T, generator=gen, dtype=dtype)
    adv = torch.randn(B, generator=gen, dtype=dtype) if per_seq_adv else torch.randn(B, T, generator=gen, dtype=dtype)
    mask = (torch.rand(B, T, generator=gen) > 0.35).to(dtype)
    mask[2] = 0  # all-masked row
    return logp, old, adv, mask, ref


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("per_seq_adv", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_float64_loop_and_autograd(aggregation, per_seq_adv, seed):
    logp, old, adv, mask, ref = make_batch(seed, per_seq_adv=per_seq_adv)
    want, want_stats = reference_loss(logp, old, adv, mask, ref, aggregation)
    lp = logp.clone().requires_grad_()
    loss, stats = policy_loss(lp, old, adv, mask.bool(), clip_low=CLIP_LOW, clip_high=CLIP_HIGH, kl_coef=KL,
                              ref_logp=ref, aggregation=aggregation)
    assert loss.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
    for k, v in want_stats.items():
        assert stats[k] == pytest.approx(v, rel=1e-10, abs=1e-12), k
    assert want_stats["clip_frac_low"] > 0 and want_stats["clip_frac_high"] > 0  # both branches exercised
    (g,) = torch.autograd.grad(loss, lp)
    lp2 = logp.clone().requires_grad_()
    (g2,) = torch.autograd.grad(naive_loss(lp2, old, adv, mask, ref, aggregation), lp2)
    torch.testing.assert_close(g, g2, rtol=1e-10, atol=1e-12)
    assert g[2].eq(0).all()


def test_norm_len_and_stats_without_ref():
    logp, old, adv, mask, ref = make_batch(3)
    want, _ = reference_loss(logp, old, adv, mask, ref, "seq-mean-token-sum-norm", kl_coef=0.0, norm_len=64)
    loss, stats = policy_loss(logp, old, adv, mask, clip_low=CLIP_LOW, clip_high=CLIP_HIGH,
                              aggregation="seq-mean-token-sum-norm", norm_len=64)
    assert loss.item() == pytest.approx(want, rel=1e-10)
    assert set(stats) == {"clip_frac_low", "clip_frac_high", "approx_kl", "ratio_mean"}
    assert all(isinstance(v, float) for v in stats.values())


def test_garbage_outside_the_mask_is_ignored():
    logp, old, adv, mask, ref = make_batch(4)
    bad = mask == 0
    lp = logp.masked_fill(bad, float("-inf")).requires_grad_()
    old_bad = old.masked_fill(bad, float("inf"))
    loss, stats = policy_loss(lp, old_bad, adv, mask, clip_low=CLIP_LOW, clip_high=CLIP_HIGH, kl_coef=KL,
                              ref_logp=ref.masked_fill(bad, float("nan")))
    want, _ = reference_loss(logp, old, adv, mask, ref, "token-mean")
    assert loss.item() == pytest.approx(want, rel=1e-10)
    (g,) = torch.autograd.grad(loss, lp)
    assert torch.isfinite(g).all() and g[bad].eq(0).all()
    assert all(math.isfinite(v) for v in stats.values())


def test_fully_masked_batch_gives_zero_not_nan():
    logp, old, adv, mask, ref = make_batch(5)
    for agg in AGGREGATIONS:
        loss, stats = policy_loss(logp, old, adv, torch.zeros_like(mask), clip_low=0.2, clip_high=0.2,
                                  aggregation=agg)
        assert loss.item() == 0.0 and stats["ratio_mean"] == 0.0


def test_errors():
    logp, old, adv, mask, ref = make_batch(6)
    with pytest.raises(ValueError, match="needs ref_logp"):
        policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, kl_coef=0.1)
    with pytest.raises(ValueError, match="unknown aggregation"):
        policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, aggregation="sum")
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(logp, old, adv[:, :3], mask, clip_low=0.2, clip_high=0.2)
    loss, _ = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, backend="auto")  # torch on CPU
    assert torch.isfinite(loss)
