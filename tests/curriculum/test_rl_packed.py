"""``packed_logprobs`` (no padding, each shared prompt once) against the padded ``sequence_logprobs``:
values, entropies and gradients on GRPO-shaped batches of tiny HF models; and through ``grpo_update``."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

from curriculum.engine.rl import packed_logprobs, sequence_logprobs
from curriculum.engine.rl.packed import length_buckets
from curriculum.engine.rollout import Completion, pack

V = 61
CONFIGS = {
    "llama": (LlamaForCausalLM, LlamaConfig, {}),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config, {"tie_word_embeddings": True}),
}


def small(name, **kw):
    cls, cfg_cls, extra = CONFIGS[name]
    torch.manual_seed(0)
    return cls(cfg_cls(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, **extra, **kw))


def grpo_batch(seed=0, groups=3, g=4):
    """Groups of g completions of one prompt each: prompts of different lengths, completions of 1..9
    tokens, and a response mask with tool-observation holes and one fully masked row."""
    gen = torch.Generator().manual_seed(seed)
    comps = []
    for k in range(groups):
        prompt = torch.randint(1, V, (3 + 2 * k,), generator=gen).tolist()
        for _ in range(g):
            n = int(torch.randint(1, 10, (), generator=gen))
            comps.append(Completion(prompt, torch.randint(1, V, (n,), generator=gen).tolist(), "", True))
    batch = pack(comps, [0.0] * len(comps), [i // g for i in range(len(comps))], pad_id=0)
    mask = batch.response_mask.clone()
    p = len(comps[1].prompt_ids)
    mask[1, p + 1 : p + 3] = 0  # tool-observation tokens inside a completion (Completion.mask = 0 there)
    mask[5] = 0  # a completion with nothing to train on
    mask[6] *= 0.5  # a weighted mask: only zero / nonzero matters here
    return batch, mask


def grads_of(model, fn, mask, ent_weight=0.3):
    model.zero_grad()
    logp, ent = fn()
    ((logp * mask).sum() + ent_weight * (ent * mask).sum()).backward()
    return logp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_packed_matches_padded_values_and_gradients(name):
    model = small(name).double().train()
    batch, mask = grpo_batch()
    kw = dict(with_entropy=True, chunk_size=7, vocab_chunk_size=23, backend="torch")
    lp, ent, g = grads_of(model, lambda: packed_logprobs(model, batch.input_ids, batch.attention_mask, mask, **kw), mask)
    lp_ref, ent_ref, g_ref = grads_of(model, lambda: sequence_logprobs(model, batch.input_ids, batch.attention_mask, **kw), mask)
    asked = mask != 0
    torch.testing.assert_close(lp[asked], lp_ref[asked], atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(ent[asked], ent_ref[asked], atol=1e-12, rtol=1e-12)
    assert lp[~asked].abs().max() == 0 and ent[~asked].abs().max() == 0  # nothing where nothing was asked
    assert g.keys() == g_ref.keys()
    for k in g:
        # RMSNorm computes in float32 even in a float64 model, so a shared prompt's summed gradient
        # is rounded once instead of once per copy: float32-level agreement, not float64.
        scale = g_ref[k].abs().max()
        assert (g[k] - g_ref[k]).abs().max() <= 1e-6 * scale, k


def test_packed_matches_padded_under_lora():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(small("llama").double(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "lm_head"],
                                                                lora_dropout=0.0, init_lora_weights=False))
    batch, mask = grpo_batch(seed=3)
    lp, ent, g = grads_of(model, lambda: packed_logprobs(model, batch.input_ids, batch.attention_mask, mask,
                                                         with_entropy=True, backend="torch"), mask)
    lp_ref, ent_ref, g_ref = grads_of(model, lambda: sequence_logprobs(model, batch.input_ids, batch.attention_mask,
                                                                       with_entropy=True, backend="torch"), mask)
    asked = mask != 0
    torch.testing.assert_close(lp[asked], lp_ref[asked], atol=1e-12, rtol=1e-12)
    assert g.keys() == g_ref.keys() and any("lora_A" in k for k in g)
    for k in g:
        assert (g[k] - g_ref[k]).abs().max() <= 1e-6 * g_ref[k].abs().max(), k


def test_packed_computes_each_shared_prompt_once_and_no_padding():
    model = small("llama").train()
    batch, mask = grpo_batch()
    seen = []
    model.model.embed_tokens.register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))
    packed_logprobs(model, batch.input_ids, batch.attention_mask, mask, backend="torch")
    # the decoder ran each group's prompt but its last token once (a prefill of one row per distinct prompt),
    # then each row from its last prompt token to its last asked position (the fully masked row not at all)
    rows = [(r, (m != 0).nonzero().squeeze(1)) for r, m in zip(batch.input_ids, mask) if m.any()]
    prompts = {tuple(r[: int(at[0])].tolist()) for r, at in rows}
    assert seen[0] == len(prompts) * max(map(len, prompts)) and len(prompts) == 3
    suffixes = [int(at[-1] - at[0]) + 1 for _, at in rows]
    assert sum(suffixes) <= sum(seen[1:]) <= len(suffixes) * max(suffixes)
    assert sum(seen) < int(batch.attention_mask.sum())  # fewer than the real tokens, let alone B x T


def test_packed_falls_back_where_it_cannot_share():
    """Left padding, a sliding-window model and the naive backend give sequence_logprobs' own numbers."""
    batch, mask = grpo_batch(seed=1)
    model = small("llama").double()
    left = torch.cat([batch.attention_mask[:, -1:], batch.attention_mask[:, :-1]], 1)  # not right-padded
    for m, am in ((model, left), (MistralForCausalLM(MistralConfig(
            vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, sliding_window=4)).double(), batch.attention_mask)):
        lp, _ = packed_logprobs(m, batch.input_ids, am, mask, backend="torch")
        ref, _ = sequence_logprobs(m, batch.input_ids, am, token_mask=(mask != 0) & (am[:, 1:] != 0), backend="torch")
        assert torch.equal(lp, ref)


def test_length_buckets_minimise_padding_plus_overhead():
    assert length_buckets([2, 3, 16, 16, 17], overhead=128) == [[0, 1, 2, 3, 4]]
    assert length_buckets([2, 3, 16, 16, 17], overhead=10) == [[0, 1], [2, 3, 4]]
    assert length_buckets([5, 1, 5, 1], overhead=0) == [[1, 3], [0, 2]]
    runs = length_buckets([7, 300, 12, 290, 9, 310, 8], overhead=64)
    assert sorted(i for r in runs for i in r) == list(range(7)) and runs == [[0, 6, 4, 2], [3, 1, 5]]
    assert length_buckets([], overhead=1) == []


def test_grpo_update_loss_and_gradients_unchanged_by_packing(monkeypatch):
    import curriculum.engine.grpo as grpo
    from curriculum.config import LossConfig
    from curriculum.engine.policy import Role, make_optimizer
    from curriculum.config import OptimConfig

    batch, mask = grpo_batch(seed=2)
    batch.response_mask = (mask != 0).float()
    batch.rewards = torch.arange(len(batch), dtype=torch.float32) % 3

    def update(padded: bool):
        model = small("qwen2").double()
        opt, sched = make_optimizer(list(model.parameters()), OptimConfig(lr=0.0, warmup_steps=0))
        role = Role("solver", model, None, opt, sched, params=list(model.parameters()))
        grads = {}
        real_step = opt.step
        opt.step = lambda *a, **k: (grads.update({n: p.grad.clone() for n, p in model.named_parameters()}), real_step(*a, **k))[1]
        if padded:
            monkeypatch.setattr(grpo, "packed_logprobs", lambda m, ids, am, tm, **kw: sequence_logprobs(m, ids, am, **kw))
        stats = grpo.grpo_update(role, batch, LossConfig(), grad_clip=0.0, backend="torch")
        monkeypatch.undo()
        return stats, grads

    stats, grads = update(padded=False)
    ref_stats, ref_grads = update(padded=True)
    for key in ("loss", "entropy", "ratio_mean"):
        assert stats[key] == pytest.approx(ref_stats[key], rel=1e-9, abs=1e-12), key
    for k in grads:
        assert (grads[k] - ref_grads[k]).abs().max() <= 1e-6 * ref_grads[k].abs().max(), k
