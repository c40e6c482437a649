"""One GRPO-family policy update of a role on a scored rollout batch."""
from __future__ import annotations

from collections import defaultdict

import torch

from curriculum.config import LossConfig
from curriculum.policy import Role, global_grad_norm, lr_of
from curriculum.rl import compute_advantages, policy_loss, sequence_logprobs
from curriculum.rollout import Rollout


def grpo_update(role: Role, rollout: Rollout, loss_cfg: LossConfig, *, grad_clip: float,
                backend: str = "auto", seed: int = 0) -> dict[str, float]:
    """Advantages -> clipped-surrogate steps over minibatches -> averaged statistics.

    The behaviour log-probs are computed once, before any step, with the current
    weights (on-policy sampling), so with one epoch and one minibatch the ratio is 1.
    """
    role.activate()
    model = role.model
    device = next(model.parameters()).device
    batch = rollout.to(device)
    adv_n = compute_advantages(batch.rewards, batch.group_ids, loss_cfg.estimator, backend=backend)
    with torch.no_grad():
        old_logp_bt, _ = sequence_logprobs(model, batch.input_ids, batch.attention_mask, backend=backend)
        ref_logp_bt = None
        if loss_cfg.kl_coef > 0:
            ref_logp_bt = role.reference_logprobs(batch.input_ids, batch.attention_mask, backend=backend)

    n = len(batch)
    mb = loss_cfg.minibatch_size or n
    gen = torch.Generator().manual_seed(seed)
    sums: dict[str, float] = defaultdict(float)
    count = 0
    model.train()
    for _ in range(loss_cfg.epochs):
        order = torch.randperm(n, generator=gen) if mb < n else torch.arange(n)
        for start in range(0, n, mb):
            idx = order[start : start + mb].to(device)
            mask_bt = batch.response_mask[idx]
            logp_bt, ent_bt = sequence_logprobs(model, batch.input_ids[idx], batch.attention_mask[idx],
                                                with_entropy=True, backend=backend)
            loss, stats = policy_loss(
                logp_bt, old_logp_bt[idx], adv_n[idx], mask_bt,
                clip_low=loss_cfg.clip_low, clip_high=loss_cfg.clip_high, kl_coef=loss_cfg.kl_coef,
                ref_logp=None if ref_logp_bt is None else ref_logp_bt[idx],
                aggregation=loss_cfg.aggregation, backend=backend,
            )
            loss.backward()
            grad_norm = global_grad_norm(role.params)
            if grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(role.params, grad_clip)
            role.optimizer.step()
            role.scheduler.step()
            role.optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                m = mask_bt.to(ent_bt.dtype)
                stats["entropy"] = float((ent_bt * m).sum() / m.sum().clamp(min=1))
            stats.update(loss=float(loss.detach()), grad_norm=grad_norm)
            for k, v in stats.items():
                sums[k] += v
            count += 1
    model.eval()
    out = {k: v / max(count, 1) for k, v in sums.items()}
    out.update(
        reward_mean=float(batch.rewards.mean()),
        reward_std=float(batch.rewards.std()) if n > 1 else 0.0,
        adv_abs_mean=float(adv_n.abs().mean()),
        lr=lr_of(role),
        optimizer_steps=float(count),
        response_tokens_mean=float(batch.response_mask.sum(-1).mean()),
    )
    return out
