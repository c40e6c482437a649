"""One GRPO-family policy update of a role on a scored rollout batch."""
from __future__ import annotations

import logging
import math
from collections import defaultdict

import torch

from curriculum.config import LossConfig
from curriculum.engine.distributed import SingleProcess
from curriculum.engine.policy import Role, global_grad_norm, lr_of
from curriculum.engine.rl import compute_advantages, packed_logprobs, policy_loss
from curriculum.engine.rollout import Rollout

log = logging.getLogger(__name__)


def grpo_update(role: Role, rollout: Rollout, loss_cfg: LossConfig, *, grad_clip: float, norm_len: int | None = None,
                backend: str = "auto", seed: int = 0, dist: SingleProcess | None = None,
                tis_cap: float = 0.0, temperature: float = 1.0) -> dict[str, float]:
    """Advantages -> clipped-surrogate steps over minibatches -> averaged statistics.

    ``norm_len`` is the constant that ``seq-mean-token-sum-norm`` divides by, required with that
    aggregation: the role's ``sampling.max_new_tokens`` (Dr. GRPO), never the batch's padded width,
    which grows with the prompt.

    The behaviour log-probs are the current weights' (sampling is on-policy). With one epoch
    and one minibatch the update is on-policy by construction: the ratio is 1 and the old
    log-probs are the training forward's own, detached, so no extra forward pass is run.
    Otherwise they are computed once, before any step.
    Log-probs come from ``packed_logprobs``: no padding and each group's prompt once, the same
    values as the padded forward up to float rounding, only at ``response_mask`` positions.
    Every log-prob (current, old, reference) is of ``logits / temperature``, the role's sampling
    temperature, as verl computes them: the policy that sampled is the one the ratio speaks of.

    One loop for both ways of stepping (``PlainStepper``, ``EngineStepper``); ``rollout`` is the
    global batch (identical on every rank) and each rank takes
    1/world of every minibatch (``_plan``), cut into the engine's accumulation micro-batches; a
    micro-batch's loss is scaled by ``world * local_denominator / global_denominator`` of its
    minibatch, so the average over ranks yields the gradient of the global minibatch loss
    (N ranks x B/N sequences match 1 rank x B; with one rank and one micro-batch the scale is 1).
    A step whose loss or gradient is not finite is skipped (weights, optimizer and schedule
    untouched), counted in ``nonfinite_steps`` and left out of the averaged statistics: one bad
    batch must not poison the weights that the next checkpoint saves.

    With the sampling engine's log-probs (``rollout.rollout_logprobs``, a vLLM rollout) and
    ``tis_cap`` > 0, each token's policy loss is weighted by ``min(exp(old - engine), tis_cap)``
    (truncated importance sampling, as verl's): the engine's numerics differ from the trainer's,
    so its samples are slightly off-policy even right after a weight sync.
    """
    stepper = EngineStepper(role, dist or SingleProcess()) if role.engine is not None else PlainStepper(role, grad_clip)
    role.activate()
    model = role.model
    batch = rollout.to(stepper.device)
    adv_n = compute_advantages(batch.rewards, batch.group_ids, loss_cfg.estimator, backend=backend)
    n = len(batch)
    plan = _plan(n, loss_cfg.minibatch_size or n, loss_cfg.epochs, torch.Generator().manual_seed(seed),
                 stepper.dist.rank, stepper.dist.world, stepper.gas)

    def logprobs(m, **kw):
        return packed_logprobs(model, batch.input_ids[m], batch.attention_mask[m], batch.response_mask[m],
                               backend=backend, temperature=temperature, **kw)

    def reference(m):
        return role.reference_logprobs(batch.input_ids[m], batch.attention_mask[m], backend=backend,
                                       temperature=temperature)

    with torch.no_grad():  # behaviour (and reference) log-probs of every planned micro-batch, before any step
        old = None if on_policy(loss_cfg, n) else stepper.prefetch(lambda m: logprobs(m)[0], plan, n)
        ref = stepper.prefetch(reference, plan, n) if loss_cfg.kl_coef > 0 else None
    per_step: list[dict[str, float]] = []
    model.train()
    for j, (idx, micros) in enumerate(plan):
        total = _nonzero(_denominator(batch.response_mask[idx.to(stepper.device)], loss_cfg.aggregation))
        sums: dict[str, float] = defaultdict(float)
        for k, m in enumerate(micros):
            m = m.to(stepper.device)
            mask_bt = batch.response_mask[m]
            logp_bt, ent_bt = logprobs(m, with_entropy=True)
            old_bt = logp_bt.detach() if old is None else old[j][k]
            adv, tis_stats = truncated_is(adv_n[m], old_bt, batch.rollout_logprobs, m, mask_bt, tis_cap)
            loss, stats = policy_loss(
                logp_bt, old_bt, adv, mask_bt,
                **_loss_kwargs(loss_cfg, norm_len), ref_logp=None if ref is None else ref[j][k], backend=backend,
            )
            stats.update(tis_stats)
            share = _denominator(mask_bt, loss_cfg.aggregation) / total
            stepper.backward(loss * (share * stepper.dist.world))
            with torch.no_grad():
                tokens = float(mask_bt.sum())
                stats["entropy"] = float((ent_bt * mask_bt.to(ent_bt.dtype)).sum()) / _nonzero(tokens)
            for key, v in stats.items():  # token means, re-weighted into the minibatch's token mean
                sums[key] += v * tokens
            sums["_tokens"] += tokens
            sums["loss"] += float(loss.detach()) * share
        grad_norm, applied = stepper.step(sums["loss"])
        per_step.append(dict(sums, grad_norm=grad_norm, _applied=float(applied),
                             _skipped=float(not (applied and math.isfinite(grad_norm)))))
    model.eval()
    gathered = stepper.dist.all_gather_object(per_step)
    out = _combine(gathered)
    out.update(
        reward_mean=float(batch.rewards.mean()),
        reward_std=float(batch.rewards.std()) if n > 1 else 0.0,
        adv_abs_mean=float(adv_n.abs().mean()),
        lr=lr_of(role),
        optimizer_steps=float(sum(step["_applied"] for step in per_step)),
        nonfinite_steps=float(sum(step["_skipped"] for step in per_step)),
        response_tokens_mean=float(batch.response_mask.sum(-1).mean()),
    )
    return out


class PlainStepper:
    """One process, a torch optimizer: checks the gradient, clips, steps; a non-finite step is skipped."""

    gas = 1

    def __init__(self, role: Role, grad_clip: float):
        self.role, self.grad_clip, self.dist = role, grad_clip, SingleProcess()
        self.device = next(role.model.parameters()).device

    def prefetch(self, fn, plan, n: int):
        """``fn`` of the whole batch at once, cut into the plan's micro-batches."""
        whole = fn(torch.arange(n, device=self.device))
        return [[whole[m.to(whole.device)] for m in micros] for _, micros in plan]

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self, loss: float) -> tuple[float, bool]:
        role = self.role
        grad_norm = global_grad_norm(role.params)
        if not (math.isfinite(grad_norm) and math.isfinite(loss)):
            role.optimizer.zero_grad(set_to_none=True)
            log.warning("non-finite loss or gradient (grad norm %s): optimizer step skipped", grad_norm)
            return grad_norm, False
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(role.params, self.grad_clip)
        role.optimizer.step()
        role.scheduler.step()
        role.optimizer.zero_grad(set_to_none=True)
        return grad_norm, True


class EngineStepper:
    """A DeepSpeed engine on any number of ranks: accumulation, clipping and the (sharded) AdamW step happen
    in ``engine.step``. DeepSpeed itself skips a step whose gradient norm is not finite (tested for ZeRO-2
    and ZeRO-3 on two ranks, with clipping on); it is counted from that norm."""

    def __init__(self, role: Role, dist: SingleProcess):
        self.engine, self.dist = role.engine, dist
        self.device = self.engine.device
        self.gas = self.engine.gradient_accumulation_steps()

    def prefetch(self, fn, plan, n: int):
        """``fn`` of each of this rank's micro-batches."""
        return [[fn(m.to(self.device)) for m in micros] for _, micros in plan]

    def backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss, scale_wrt_gas=False)
        self.engine.step()

    def step(self, loss: float) -> tuple[float, bool]:
        return float(self.engine.get_global_grad_norm() or 0.0), True


def truncated_is(adv_b: torch.Tensor, old_bt: torch.Tensor, engine_bt: torch.Tensor | None, idx: torch.Tensor,
                 mask_bt: torch.Tensor, cap: float) -> tuple[torch.Tensor, dict[str, float]]:
    """The advantages with truncated importance weights folded in, and statistics of the engine gap.

    ``adv_b`` [b]; ``old_bt`` [b, T] the trainer's behaviour log-probs; ``engine_bt`` the whole batch's
    engine log-probs (``Rollout.rollout_logprobs``, rows ``idx``) or None. Returns ``adv_b`` unchanged
    without engine log-probs or with ``cap`` 0, else [b, T] ``A * min(exp(old - engine), cap)``: the
    weight is positive and detached, so it scales each token's clipped-surrogate loss (dual-clip
    included) exactly as verl's ``pg_loss * tis_weight`` does; the KL term is not weighted.
    Statistics: ``engine_logprob_gap`` (mean |old - engine| over the tokens) and ``tis_capped_frac``.
    """
    if engine_bt is None:
        return adv_b, {}
    m = mask_bt != 0
    delta_bt = (old_bt.detach() - engine_bt[idx].to(old_bt.dtype)).masked_fill(~m, 0.0)
    tokens = _nonzero(float(m.sum()))
    stats = {"engine_logprob_gap": float(delta_bt.abs().sum()) / tokens}
    if cap <= 0:
        return adv_b, stats
    ratio_bt = delta_bt.exp()
    stats["tis_capped_frac"] = float(((ratio_bt > cap) & m).sum()) / tokens
    return adv_b[:, None].to(ratio_bt.dtype) * ratio_bt.clamp(max=cap), stats


def _loss_kwargs(loss_cfg: LossConfig, norm_len: int | None) -> dict:
    """The config's loss options as ``policy_loss`` keywords."""
    return dict(clip_low=loss_cfg.clip_low, clip_high=loss_cfg.clip_high, clip_ratio_c=loss_cfg.clip_ratio_c,
                delta=loss_cfg.delta, kl_coef=loss_cfg.kl_coef, aggregation=loss_cfg.aggregation, norm_len=norm_len)


def _nonzero(total: float) -> float:
    """``total``, or 1 for 0: a guard against 0/0 only, so mask weights below 1 still average exactly."""
    return total if total != 0 else 1.0


def on_policy(loss_cfg: LossConfig, n: int) -> bool:
    """One epoch over one minibatch: every sequence is trained once, by the weights that sampled it."""
    return loss_cfg.epochs == 1 and (loss_cfg.minibatch_size or n) >= n


def _denominator(mask_bt: torch.Tensor, aggregation: str) -> float:
    """What the aggregation divides by: valid tokens (token-mean) or sequences with any (the others)."""
    counts = mask_bt.sum(-1)
    return float(counts.sum() if aggregation == "token-mean" else (counts > 0).sum())


def _plan(n: int, mb: int, epochs: int, gen: torch.Generator, rank: int, world: int, gas: int):
    """[(global minibatch indices [mb], this rank's micro-batches [[mb / world / gas]] )] in step order.

    The same permutation as the single-process update; each minibatch is cut into
    ``world`` contiguous shares and a share into ``gas`` micro-batches.
    """
    plan = []
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen) if mb < n else torch.arange(n)
        for start in range(0, n, mb):
            idx = order[start : start + mb]
            plan.append((idx, list(idx.tensor_split(world)[rank].tensor_split(gas))))
    return plan


def _combine(per_rank: list[list[dict[str, float]]]) -> dict[str, float]:
    """Per-rank, per-step partial sums -> the mean over applied steps of each step's global statistics."""
    steps = [j for j in range(len(per_rank[0])) if not per_rank[0][j]["_skipped"]]
    out: dict[str, float] = defaultdict(float)
    for j in steps:
        parts = [r[j] for r in per_rank]
        tokens = _nonzero(sum(p["_tokens"] for p in parts))
        for key in parts[0]:
            if key.startswith("_") or key == "grad_norm":
                continue
            total = sum(p.get(key, 0.0) for p in parts)
            out[key] += (total if key == "loss" else total / tokens) / len(steps)
        out["grad_norm"] += parts[0]["grad_norm"] / len(steps)
    return dict(out)
