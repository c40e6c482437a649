import pytest
import torch

from curriculum.config import load_config
from curriculum.engine.grpo import grpo_update
from curriculum.engine.policy import build_roles, load_role_weights, save_role
from curriculum.engine.rollout import generate, pack
from curriculum.engine.tiny import build_model, build_tokenizer


def tiny_roles(overrides):
    cfg = load_config(None, ["run.device=cpu", "solver.optim.lr=0.01", "challenger.optim.lr=0.01"] + overrides)
    tok = build_tokenizer()
    torch.manual_seed(0)
    base = build_model(tok, 32, 1, 2, 32)
    return cfg, tok, build_roles(cfg, base, torch.device("cpu"))


def rollout_for(role, tok, rewards_fn, n=8):
    role.activate()
    comps = generate(role.model, tok, ["Q:"] * n, max_new_tokens=6, seed=1)
    rewards = [rewards_fn(c.text) for c in comps]
    rewards[0], rewards[n // 2] = 1.0, 0.0  # every group has signal
    return pack(comps, rewards, [i // 4 for i in range(n)], tok.pad_token_id)


def snapshot(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_full_roles_are_separate_copies_and_update():
    cfg, tok, roles = tiny_roles([])
    ch, sv = roles["challenger"], roles["solver"]
    assert ch.model is not sv.model
    before_ch, before_sv = snapshot(ch.model), snapshot(sv.model)
    stats = grpo_update(sv, rollout_for(sv, tok, lambda t: float(len(t) % 2)), cfg.solver.loss, grad_clip=1.0, backend="torch")
    assert stats["optimizer_steps"] == 1 and stats["ratio_mean"] == 1.0
    after_sv = snapshot(sv.model)
    assert any(not torch.equal(before_sv[k], after_sv[k]) for k in before_sv)
    assert all(torch.equal(before_ch[k], v) for k, v in snapshot(ch.model).items())


def test_grpo_raises_probability_of_rewarded_samples():
    cfg, tok, roles = tiny_roles(["solver.loss.epochs=4"])
    sv = roles["solver"]
    rollout = rollout_for(sv, tok, lambda t: float(t.startswith(("1", "2", "3"))), n=16)
    from curriculum.engine.rl import sequence_logprobs

    def rewarded_logp():
        with torch.no_grad():
            logp, _ = sequence_logprobs(sv.model, rollout.input_ids, rollout.attention_mask)
        seq = (logp * rollout.response_mask).sum(-1)
        return (seq[rollout.rewards > 0].mean() - seq[rollout.rewards == 0].mean()).item()

    gap_before = rewarded_logp()
    grpo_update(sv, rollout, cfg.solver.loss, grad_clip=1.0, backend="torch")
    assert rewarded_logp() > gap_before + 0.05


def test_shared_base_lora_touches_only_active_adapter(tmp_path):
    cfg, tok, roles = tiny_roles(["model.lora.enabled=true", "model.lora.r=4"])
    ch, sv = roles["challenger"], roles["solver"]
    assert ch.model is sv.model  # one copy of the base
    model = sv.model
    base = {k: v for k, v in snapshot(model).items() if "lora_" not in k}
    sv_lora = {k: v for k, v in snapshot(model).items() if ".solver." in k}
    ch_lora = {k: v for k, v in snapshot(model).items() if ".challenger." in k}
    assert sv_lora and ch_lora
    grpo_update(ch, rollout_for(ch, tok, lambda t: float("+" in t)), cfg.challenger.loss, grad_clip=1.0, backend="torch")
    after = snapshot(model)
    assert all(torch.equal(after[k], v) for k, v in base.items()), "the frozen base changed"
    assert all(torch.equal(after[k], v) for k, v in sv_lora.items()), "the inactive adapter changed"
    assert any(not torch.equal(after[k], v) for k, v in ch_lora.items())

    save_role(ch, tmp_path / "challenger", tok)
    trained = {k: v for k, v in after.items() if ".challenger." in k}
    for p in ch.params:
        torch.nn.init.zeros_(p)
    load_role_weights(ch, tmp_path / "challenger")
    assert all(torch.equal(snapshot(model)[k], v) for k, v in trained.items())


def test_full_weights_roundtrip_through_hf_format(tmp_path):
    from transformers import AutoModelForCausalLM

    cfg, tok, roles = tiny_roles([])
    sv = roles["solver"]
    save_role(sv, tmp_path / "solver", tok)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "solver")
    ref = snapshot(sv.model)
    assert all(torch.equal(ref[k], v) for k, v in snapshot(loaded).items())
    for p in sv.params:
        torch.nn.init.zeros_(p)
    load_role_weights(sv, tmp_path / "solver")
    assert all(torch.equal(ref[k], v) for k, v in snapshot(sv.model).items())


def test_kl_reference_is_frozen_initial_model():
    cfg, tok, roles = tiny_roles(["solver.loss.kl_coef=0.1"])
    sv = roles["solver"]
    assert sv.reference is not None and not any(p.requires_grad for p in sv.reference.parameters())
    stats = grpo_update(sv, rollout_for(sv, tok, lambda t: float(len(t) > 2)), cfg.solver.loss, grad_clip=1.0, backend="torch")
    assert stats["kl_ref"] == 0.0  # first step: policy == reference


def test_a_nonfinite_step_is_skipped_not_applied(monkeypatch, caplog):
    import curriculum.engine.grpo as grpo

    cfg, tok, roles = tiny_roles([])
    sv = roles["solver"]
    rollout = rollout_for(sv, tok, lambda t: float(len(t) % 2))
    real = grpo.policy_loss

    def poisoned(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return loss * float("nan"), stats

    monkeypatch.setattr(grpo, "policy_loss", poisoned)
    before, opt_before = snapshot(sv.model), len(sv.optimizer.state)
    lr_before = sv.scheduler.get_last_lr()
    stats = grpo_update(sv, rollout, cfg.solver.loss, grad_clip=1.0, backend="torch")
    assert stats["nonfinite_steps"] == 1 and stats["optimizer_steps"] == 0
    assert all(torch.equal(before[k], v) for k, v in snapshot(sv.model).items())
    assert len(sv.optimizer.state) == opt_before and sv.scheduler.get_last_lr() == lr_before
    assert all(p.grad is None for p in sv.params)
    assert "optimizer step skipped" in caplog.text
    monkeypatch.setattr(grpo, "policy_loss", real)  # the next batch trains normally
    stats = grpo_update(sv, rollout, cfg.solver.loss, grad_clip=1.0, backend="torch")
    assert stats["nonfinite_steps"] == 0 and stats["optimizer_steps"] == 1
    assert any(not torch.equal(before[k], v) for k, v in snapshot(sv.model).items())


def test_on_policy_update_skips_the_old_logprob_pass_with_the_same_loss_and_gradients(monkeypatch):
    import curriculum.engine.grpo as grpo

    calls = []
    real = grpo.packed_logprobs
    monkeypatch.setattr(grpo, "packed_logprobs", lambda *a, **k: (calls.append(k.get("with_entropy", False)), real(*a, **k))[1])

    def update(force_old_pass: bool):
        cfg, tok, roles = tiny_roles([])
        sv = roles["solver"]
        rollout = rollout_for(sv, tok, lambda t: float(len(t) % 2))
        monkeypatch.setattr(grpo, "on_policy", lambda *a: not force_old_pass)
        calls.clear()
        grads = {}
        real_step = sv.optimizer.step

        def step(*a, **k):  # the gradients the optimizer sees
            grads.update({i: p.grad.detach().clone() for i, p in enumerate(sv.params) if p.grad is not None})
            return real_step(*a, **k)

        sv.optimizer.step = step
        stats = grpo.grpo_update(sv, rollout, cfg.solver.loss, grad_clip=0.0, backend="torch")
        return stats, grads, list(calls)

    new_stats, new_grads, new_calls = update(force_old_pass=False)
    old_stats, old_grads, old_calls = update(force_old_pass=True)
    assert new_calls == [True] and old_calls == [False, True]  # one forward instead of two
    assert new_stats["loss"] == pytest.approx(old_stats["loss"], abs=1e-6)
    assert new_grads.keys() == old_grads.keys()
    for i in new_grads:
        assert torch.allclose(new_grads[i], old_grads[i], atol=1e-6, rtol=1e-5)


def test_on_policy_rule():
    from curriculum.config import LossConfig
    from curriculum.engine.grpo import on_policy

    assert on_policy(LossConfig(), 64) and on_policy(LossConfig(minibatch_size=64), 64)
    assert not on_policy(LossConfig(epochs=2), 64) and not on_policy(LossConfig(minibatch_size=32), 64)


@pytest.mark.parametrize("deepspeed_path", [False, True])
def test_update_logprobs_are_at_the_sampling_temperature(monkeypatch, deepspeed_path):
    """verl: log-probs of ``logits / T``; at T = 0.5 old, current and reference all are (first step: one policy)."""
    from curriculum.engine import grpo
    from tests.curriculum.test_rl_loss import FakeEngine

    cfg, tok, roles = tiny_roles(["solver.loss.kl_coef=0.1", "solver.loss.epochs=2"])
    sv = roles["solver"]
    rollout = rollout_for(sv, tok, lambda t: float(len(t) > 2))
    with torch.no_grad():
        logits = sv.model(input_ids=rollout.input_ids, attention_mask=rollout.attention_mask).logits[:, :-1].float()
    want_bt = torch.log_softmax(logits / 0.5, -1).gather(-1, rollout.input_ids[:, 1:, None]).squeeze(-1)
    seen = []
    real = grpo.policy_loss
    monkeypatch.setattr(grpo, "policy_loss", lambda logp, old, adv, mask, **k: seen.append(
        (logp.detach(), old, k["ref_logp"], mask)) or real(logp, old, adv, mask, **k))
    sv.engine = FakeEngine() if deepspeed_path else None
    grpo.grpo_update(sv, rollout, cfg.solver.loss, grad_clip=1.0, backend="torch", temperature=0.5)
    logp, old, ref, mask = seen[0]
    m = mask != 0
    assert m.any()
    assert logp.shape == want_bt.shape  # one minibatch of every row, in order
    for got in (logp, old, ref):
        torch.testing.assert_close(got[m], want_bt[m], atol=1e-5, rtol=1e-5)
    t1 = torch.log_softmax(logits, -1).gather(-1, rollout.input_ids[:, 1:, None]).squeeze(-1)
    assert not torch.allclose(logp[m], t1[m], atol=1e-3)  # T = 1 would differ
