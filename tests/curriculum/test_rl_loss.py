"""policy_loss (torch backend) against a float64 loop, and its gradients against autograd."""
import math

import pytest
import torch

from curriculum.engine.rl import AGGREGATIONS, policy_loss

CLIP_LOW, CLIP_HIGH, KL = 0.2, 0.28, 0.05
NORM_LEN = 16  # seq-mean-token-sum-norm's constant (the batches' T is 13)


def reference_loss(logp, old, adv, mask, ref, aggregation, clip_low=CLIP_LOW, clip_high=CLIP_HIGH, kl_coef=KL,
                   norm_len=None, clip_ratio_c=0.0, delta=0.0):
    """Plain loops in float64: per-token loss, then the aggregation, then the stats.

    Dual-clip as verl writes it (``core_algos.compute_policy_loss``), delta as TRL's GRPOTrainer.
    """
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
            capped = min(r, delta) if delta else r  # TRL: coef_1 = clamp(coef_1, max=delta)
            pg = max(-a * capped, -a * clipped)  # verl: clip_pg_losses1
            if clip_ratio_c and a < 0:  # verl: where(A < 0, min(-A * clip_ratio_c, clip_pg_losses1), ...)
                pg = min(-a * clip_ratio_c, pg)
            d = float(ref[b][t]) - float(logp[b][t])
            k3 = math.exp(d) - d - 1
            loss = pg + kl_coef * k3
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
        total = sum(row_sum) / (n or 1)
    elif aggregation == "seq-mean-token-mean":
        total = sum(s / (c or 1) for s, c in zip(row_sum, row_cnt)) / rows
    else:
        total = sum(s / norm_len for s in row_sum) / rows
    n = n or 1
    return total, {"clip_frac_low": lo / n, "clip_frac_high": hi / n, "approx_kl": akl / n,
                   "ratio_mean": rsum / n, "kl_ref": kl_sum / n}


def naive_loss(logp, old, adv, mask, ref, aggregation, norm_len):
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
    return loss_bt.sum() / (norm_len * rows)


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
    want, want_stats = reference_loss(logp, old, adv, mask, ref, aggregation, norm_len=NORM_LEN)
    lp = logp.clone().requires_grad_()
    loss, stats = policy_loss(lp, old, adv, mask.bool(), clip_low=CLIP_LOW, clip_high=CLIP_HIGH, kl_coef=KL,
                              ref_logp=ref, aggregation=aggregation, norm_len=NORM_LEN)
    assert loss.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
    for k, v in want_stats.items():
        assert stats[k] == pytest.approx(v, rel=1e-10, abs=1e-12), k
    assert want_stats["clip_frac_low"] > 0 and want_stats["clip_frac_high"] > 0  # both branches exercised
    (g,) = torch.autograd.grad(loss, lp)
    lp2 = logp.clone().requires_grad_()
    (g2,) = torch.autograd.grad(naive_loss(lp2, old, adv, mask, ref, aggregation, NORM_LEN), lp2)
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
                                  aggregation=agg, norm_len=NORM_LEN)
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


# --------------------------------------------------------------------------- Dr. GRPO's constant


def behind_prompts(prompt_len: int):
    """The same four completions (5 tokens each, same log-probs and advantages) right after a
    prompt of ``prompt_len`` tokens, in a batch as wide as prompt + completion."""
    gen = torch.Generator().manual_seed(7)
    comp_logp = -torch.rand(4, 5, generator=gen, dtype=torch.float64)
    comp_old = comp_logp + 0.3 * torch.randn(4, 5, generator=gen, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
    T = prompt_len + 5
    logp, old, mask = (torch.zeros(4, T, dtype=torch.float64) for _ in range(3))
    logp[:, prompt_len:], old[:, prompt_len:], mask[:, prompt_len:] = comp_logp, comp_old, 1.0
    return logp, old, adv, mask


def test_dr_grpo_loss_does_not_depend_on_the_prompt_length():
    losses = [policy_loss(*behind_prompts(p), aggregation="seq-mean-token-sum-norm", norm_len=16)[0].item()
              for p in (3, 10, 30)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-12) and losses[2] == pytest.approx(losses[0], rel=1e-12)
    # The padded width T (8, 15, 35) is no fallback: it made these three losses differ.
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm needs norm_len"):
        policy_loss(*behind_prompts(3), aggregation="seq-mean-token-sum-norm")


# --------------------------------------------------------------------------- weighted masks


def test_mask_weights_below_one_give_the_weighted_mean():
    from curriculum.engine.rl import aggregate

    loss_bt = torch.tensor([[2.0, 9.0], [6.0, 9.0]], dtype=torch.float64)
    mask_bt = torch.tensor([[0.5, 0.0], [0.25, 0.0]], dtype=torch.float64)
    # By hand: weighted token mean (0.5*2 + 0.25*6) / 0.75; per-row means 2 and 6, averaged;
    # token sums 1 and 1.5 over norm_len 2, averaged over the 2 rows.
    assert aggregate(loss_bt, mask_bt, "token-mean").item() == pytest.approx(2.5 / 0.75, rel=1e-12)
    assert aggregate(loss_bt, mask_bt, "seq-mean-token-mean").item() == pytest.approx(4.0, rel=1e-12)
    assert aggregate(loss_bt, mask_bt, "seq-mean-token-sum-norm", 2).item() == pytest.approx(2.5 / 4, rel=1e-12)
    # Uniform weights of any scale give the plain mean, and its gradient.
    logp, old, adv, mask, _ = make_batch(8, B=3, T=2)
    for agg in ("token-mean", "seq-mean-token-mean"):
        results = []
        for m in (mask, mask * 0.5):
            lp = logp.clone().requires_grad_()
            loss, stats = policy_loss(lp, old, adv, m, aggregation=agg)
            results.append((loss.item(), stats["ratio_mean"], torch.autograd.grad(loss, lp)[0]))
        (l1, r1, g1), (l2, r2, g2) = results
        assert l2 == pytest.approx(l1, rel=1e-12) and r2 == pytest.approx(r1, rel=1e-12)
        torch.testing.assert_close(g2, g1, rtol=1e-12, atol=0)


# --------------------------------------------------------------------------- dual-clip and delta


def one_token(log_ratio: float, adv: float):
    logp = torch.tensor([[-1.0]], dtype=torch.float64)
    return logp, logp - log_ratio, torch.tensor([adv], dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64)


def test_dual_clip_bounds_a_huge_ratio_as_verl():
    # verl: min(max(-A r, -A clip(r)), -A c) for A < 0. With r = e^25 and c = 3: min(7.2e10, 3) = 3.
    for adv, want in ((-1.0, 3.0), (-2.0, 6.0), (1.0, -(1 + CLIP_HIGH))):  # A > 0: the upper clip, as before
        logp, old, a, m = one_token(25.0, adv)
        lp = logp.clone().requires_grad_()
        loss, _ = policy_loss(lp, old, a, m, clip_high=CLIP_HIGH, clip_ratio_c=3.0)
        assert loss.item() == pytest.approx(want, rel=1e-12)
        assert torch.autograd.grad(loss, lp)[0].item() == 0.0  # a constant: nothing to push
    off, _ = policy_loss(*one_token(25.0, -1.0), clip_high=CLIP_HIGH)
    assert off.item() == pytest.approx(math.exp(25), rel=1e-12)  # what it was: 7.2e10


def test_delta_caps_the_unclipped_ratio_as_trl():
    # TRL: -min(min(r, delta) A, clip(r) A); for A = -1, r = e^25, delta = 2: -min(-2, -1.28) = 2.
    loss, _ = policy_loss(*one_token(25.0, -1.0), clip_high=CLIP_HIGH, delta=2.0)
    assert loss.item() == pytest.approx(2.0, rel=1e-12)
    inside, _ = policy_loss(*one_token(0.1, -1.0), clip_high=CLIP_HIGH, delta=2.0)  # r = 1.105: untouched
    assert inside.item() == pytest.approx(math.exp(0.1), rel=1e-12)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("clip_ratio_c,delta", [(3.0, 0.0), (0.0, 2.0), (3.0, 2.0), (2.0, 4.0)])
def test_dual_clip_and_delta_match_the_float64_loop(aggregation, clip_ratio_c, delta):
    logp, old, adv, mask, ref = make_batch(9)
    old = logp - 1.5 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(9), dtype=logp.dtype)
    kw = dict(clip_low=CLIP_LOW, clip_high=CLIP_HIGH, kl_coef=KL, norm_len=NORM_LEN)
    want, _ = reference_loss(logp, old, adv, mask, ref, aggregation, clip_ratio_c=clip_ratio_c, delta=delta, **kw)
    plain, _ = reference_loss(logp, old, adv, mask, ref, aggregation, **kw)
    assert want != pytest.approx(plain, rel=1e-6)  # the batch has ratios past both bounds
    loss, _ = policy_loss(logp, old, adv, mask, ref_logp=ref, aggregation=aggregation, clip_ratio_c=clip_ratio_c,
                          delta=delta, **kw)
    assert loss.item() == pytest.approx(want, rel=1e-10, abs=1e-12)


def test_dual_clip_changes_nothing_below_its_bound():
    logp, old, adv, mask, ref = make_batch(10)
    assert ((logp - old).exp() * mask).max() < 3.0
    kw = dict(clip_low=CLIP_LOW, clip_high=CLIP_HIGH, kl_coef=KL, ref_logp=ref)
    assert policy_loss(logp, old, adv, mask, clip_ratio_c=3.0, **kw)[0].item() == \
        policy_loss(logp, old, adv, mask, **kw)[0].item()


def test_bounds_must_lie_beyond_the_clip_range():
    logp, old, adv, mask, _ = make_batch(11)
    with pytest.raises(ValueError, match=r"clip_ratio_c \(1.0\) must be > 1"):
        policy_loss(logp, old, adv, mask, clip_ratio_c=1.0)
    with pytest.raises(ValueError, match=r"delta \(1.1\) must be > 1 \+ clip_high \(1.2\)"):
        policy_loss(logp, old, adv, mask, clip_high=0.2, delta=1.1)


# --------------------------------------------------------------------------- grpo_update hands norm_len on


class FakeEngine:
    """What grpo_update's EngineStepper asks of a DeepSpeed engine, doing nothing."""

    device = torch.device("cpu")

    def gradient_accumulation_steps(self):
        return 1

    def backward(self, loss, scale_wrt_gas=False):
        loss.backward()

    def step(self):
        pass

    def get_global_grad_norm(self):
        return 0.0


def test_grpo_update_passes_norm_len_to_the_loss_in_both_paths(monkeypatch):
    from curriculum.config import load_config
    from curriculum.engine import grpo
    from curriculum.engine.policy import build_roles
    from curriculum.engine.rollout import generate, pack
    from curriculum.engine.tiny import build_model, build_tokenizer

    cfg = load_config(None, ["run.device=cpu", "solver.loss.aggregation=seq-mean-token-sum-norm"])
    tok = build_tokenizer()
    torch.manual_seed(0)
    sv = build_roles(cfg, build_model(tok, 32, 1, 2, 32), torch.device("cpu"))["solver"]
    comps = generate(sv.model, tok, ["Q:"] * 8, max_new_tokens=6, seed=1)
    rollout = pack(comps, [float(i % 2) for i in range(8)], [i // 4 for i in range(8)], tok.pad_token_id)
    seen = []
    real = grpo.policy_loss
    monkeypatch.setattr(grpo, "policy_loss", lambda *a, **k: seen.append(k["norm_len"]) or real(*a, **k))
    for engine in (None, FakeEngine()):
        sv.engine = engine
        grpo.grpo_update(sv, rollout, cfg.solver.loss, grad_clip=1.0, norm_len=6, backend="torch")
        with pytest.raises(ValueError, match="needs norm_len"):
            grpo.grpo_update(sv, rollout, cfg.solver.loss, grad_clip=1.0, backend="torch")
    assert seen == [6, None, 6, None]


def test_kl_is_clamped_as_verl_low_var_kl():
    """ref - logp = 88 overflows exp in float32 (inf loss); 29 gives k3 ~ 4e12. verl clamps both."""
    logp = torch.tensor([[-90.0, -30.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-2.0, -1.0, -1.2]])
    mask, adv = torch.ones(1, 3), torch.zeros(1, 3)
    loss, stats = policy_loss(logp, logp.detach(), adv, mask, kl_coef=1.0, ref_logp=ref, aggregation="token-mean")
    (g,) = torch.autograd.grad(loss, logp)
    assert math.isfinite(loss.item()) and torch.isfinite(g).all()
    small = math.exp(-0.2) + 0.2 - 1  # the third token, inside both bounds, is untouched
    assert loss.item() == pytest.approx((10.0 + 10.0 + small) / 3, rel=1e-6)
    assert stats["kl_ref"] == pytest.approx(loss.item(), rel=1e-6)
    assert g[0, 0] == 0 and g[0, 1] == 0 and g[0, 2] != 0  # the clamps pass no gradient
    one = torch.tensor([[-30.0]])
    _, s29 = policy_loss(one, one, torch.zeros(1, 1), torch.ones(1, 1), kl_coef=1.0, ref_logp=torch.tensor([[-1.0]]))
    assert s29["kl_ref"] <= 10.0
