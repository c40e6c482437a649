"""The rollout engine switch (rollout.engine) and what an engine with its own numerics hands the update:
sampled-token log-probs through packing and tool turns, and truncated importance sampling in the loss.
The vLLM engine itself is tested in tests/vllm/ (its own environment)."""
import math
import re

import pytest
import torch

from curriculum.config import load_config
from curriculum.engine.grpo import grpo_update, truncated_is
from curriculum.engine.prompts import TokenIds
from curriculum.engine.rl import policy_loss
from curriculum.engine.rollout import Completion, HFEngine, generate, pack
from curriculum.engine.tools import run_turns
from curriculum.errors import ConfigError
from curriculum.rollouts import make_engine
from tests.curriculum.test_grpo import rollout_for, tiny_roles
from tests.curriculum.test_multiturn import Scripted, box, enc, tok, tools_on  # noqa: F401 - fixtures


def test_hf_engine_is_the_default_and_samples_what_generate_samples():
    cfg, tok, roles = tiny_roles([])
    engine = make_engine(cfg, roles, torch.device("cpu"))
    assert isinstance(engine, HFEngine) and cfg.rollout.engine == "hf"
    solver = roles["solver"]
    ours = engine.generate(solver, tok, ["Q:"] * 4, max_new_tokens=6, seed=5)
    plain = generate(solver.model, tok, ["Q:"] * 4, max_new_tokens=6, seed=5)
    assert [c.completion_ids for c in ours] == [c.completion_ids for c in plain]
    assert all(c.logprobs is None for c in ours)  # the trainer's own weights: nothing to correct
    assert pack(ours, [0.0] * 4, [0] * 4, tok.pad_token_id).rollout_logprobs is None


@pytest.mark.parametrize("override, message", [
    ("rollout.engine=sglang", "rollout.engine 'sglang'; choose hf or vllm"),
    ("rollout.tis_cap=0.5", "rollout.tis_cap (0.5) must be >= 1, or 0 (off)"),
    ("rollout.gpu_memory_utilization=0", "rollout.gpu_memory_utilization (0.0) must be in (0, 1]"),
])
def test_bad_rollout_keys_are_named(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])


def test_vllm_engine_without_vllm_installed_is_a_clear_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ConfigError, match="rollout.engine=vllm but the vllm package is not installed"):
        load_config(None, ["rollout.engine=vllm"])


def test_pack_aligns_engine_logprobs_with_the_response_mask():
    a = Completion([1, 2, 3], [7, 8], "", True, logprobs=[-0.5, -0.25])
    b = Completion([1], [9, 9, 9], "", False, mask=[1, 0, 1], logprobs=[-1.0, 0.0, -2.0])
    r = pack([a, b], [1.0, 0.0], [0, 0], pad_id=0)
    # position t predicts token t+1: a's completion starts at t = 2, b's at t = 0
    assert r.rollout_logprobs.tolist() == [[0, 0, -0.5, -0.25], [-1.0, 0.0, -2.0, 0.0]]
    assert r.response_mask.tolist() == [[0, 0, 1, 1], [1, 0, 1, 0]]
    assert r.select(torch.tensor([1])).rollout_logprobs.tolist() == [[-1.0, 0.0, -2.0, 0.0]]
    # one completion without log-probs: the batch has none (no partial correction)
    assert pack([a, Completion([1], [5], "", True)], [1.0, 0.0], [0, 0], 0).rollout_logprobs is None
    with pytest.raises(ValueError, match="2 log-probs for 3 tokens"):
        pack([Completion([1], [5, 6, 7], "", True, logprobs=[0.0, 0.0])], [0.0], [0], 0)


class WithLogprobs(Scripted):
    """Scripted turns that carry an engine's log-probs: -(k + 1) / 10 for the k-th token of a turn."""

    def __call__(self, prompts, max_new_tokens, seed):
        out = super().__call__(prompts, max_new_tokens, seed)
        for c in out:
            c.logprobs = [-(k + 1) / 10 for k in range(len(c.completion_ids))]
        return out


def test_tool_turns_keep_the_engine_logprobs_of_the_model_tokens(tok, box):
    sample = WithLogprobs(tok, {"1234+5678=": ["<python>1234+5678</python>junk after", "6912"]})
    [t] = run_turns(sample, tok, [tok("1234+5678=")["input_ids"]], tools_on(box), max_turns=3, max_new_tokens=64)
    call, obs = enc(tok, "<python>1234+5678</python>"), enc(tok, "<output>6912</output>")
    answer = len(enc(tok, "6912")) + 1
    # the call's tokens (cut after its tag), the observation's zeros, the answer's from its own turn
    assert t.logprobs == ([-(k + 1) / 10 for k in range(len(call))] + [0.0] * len(obs)
                          + [-(k + 1) / 10 for k in range(answer)])
    assert len(t.logprobs) == len(t.completion_ids) == len(t.mask)
    # an engine without log-probs gives trajectories without them
    [u] = run_turns(Scripted(tok, {"2+2=": ["4"]}), tok, [tok("2+2=")["input_ids"]], tools_on(box), max_turns=2,
                    max_new_tokens=8)
    assert u.logprobs is None


def test_truncated_is_weights_each_token_as_verl_does():
    old = torch.tensor([[-1.0, -2.0, -0.5, 0.0]])
    engine = torch.tensor([[-1.5, -1.0, -0.5, -9.0]])  # the last position is outside the mask
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    adv, stats = truncated_is(torch.tensor([2.0]), old, engine, torch.tensor([0]), mask, cap=1.5)
    # exp(old - engine): e^0.5 = 1.65 -> capped at 1.5; e^-1 = 0.37; e^0 = 1
    assert adv[0].tolist() == pytest.approx([3.0, 2 * math.exp(-1.0), 2.0, 2.0])
    assert stats["tis_capped_frac"] == pytest.approx(1 / 3)
    assert stats["engine_logprob_gap"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    # cap 0: the gap is logged, the advantages are untouched
    same, stats0 = truncated_is(torch.tensor([2.0]), old, engine, torch.tensor([0]), mask, cap=0.0)
    assert same.tolist() == [2.0] and "tis_capped_frac" not in stats0
    # the weighted loss is verl's pg_loss * weight, aggregated over the same mask
    logp = torch.tensor([[-0.9, -2.1, -0.4, 0.0]], requires_grad=True)
    ours, _ = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, backend="torch")
    ratio = (logp - old).exp()
    pg = torch.maximum(-2.0 * ratio, -2.0 * ratio.clamp(0.8, 1.2))
    weight = (old - engine).exp().clamp(max=1.5)
    verl = (pg * weight * mask).sum() / mask.sum()
    assert float(ours) == pytest.approx(float(verl), abs=1e-6)


def test_update_with_engine_logprobs_equal_to_the_trainers_is_the_plain_update():
    """Engine log-probs that are the trainer's own give weight 1: the same loss and weights as without them;
    a gap changes the update."""
    def update(shift: float | None):
        cfg, tok, roles = tiny_roles([])
        sv = roles["solver"]
        rollout = rollout_for(sv, tok, lambda t: float(len(t) % 2))
        if shift is not None:
            from curriculum.engine.rl import sequence_logprobs

            with torch.no_grad():
                lp, _ = sequence_logprobs(sv.model, rollout.input_ids, rollout.attention_mask,
                                          token_mask=rollout.response_mask)
            rollout.rollout_logprobs = (lp.float() + shift) * (rollout.response_mask != 0)
        grads = []
        real_step = sv.optimizer.step

        def step(*a, **k):  # the gradients the optimizer sees
            grads.extend(p.grad.detach().clone() for p in sv.params)
            return real_step(*a, **k)

        sv.optimizer.step = step
        stats = grpo_update(sv, rollout, cfg.solver.loss, grad_clip=0.0, backend="torch", tis_cap=2.0)
        return stats, grads

    plain, w_plain = update(None)
    same, w_same = update(0.0)
    assert "engine_logprob_gap" not in plain
    assert same["engine_logprob_gap"] < 1e-5 and same["tis_capped_frac"] == 0.0
    assert same["loss"] == pytest.approx(plain["loss"], abs=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(w_plain, w_same))
    # the engine found every token 1 nat less likely: weight e^1 capped at 2 on every token
    gap, w_gap = update(-1.0)
    assert gap["engine_logprob_gap"] == pytest.approx(1.0, abs=1e-5) and gap["tis_capped_frac"] == 1.0
    assert gap["loss"] == pytest.approx(2 * plain["loss"], rel=1e-4)
    # ... and twice the gradient: the weight scales each token's loss
    assert all(torch.allclose(2 * a, b, atol=1e-6, rtol=1e-4) for a, b in zip(w_plain, w_gap))
