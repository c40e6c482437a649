"""Chunked log-probs / entropy against full logits: values and gradients, on raw tensors,
tiny HF causal LMs and peft LoRA models (random weights, nothing downloaded)."""
import warnings

import pytest
import torch
from transformers import (CohereConfig, CohereForCausalLM, Gemma2Config, Gemma2ForCausalLM, GraniteConfig,
                          GraniteForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM)

from curriculum.engine.rl import sequence_logprobs
from curriculum.engine.rl.logprobs import full_logits_logprobs, linear_logprobs

V = 151


def small(cls_cfg, **kw):
    base = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64)
    base.update(kw)
    return cls_cfg(**base)


@pytest.mark.parametrize("head_grad", [False, True])
@pytest.mark.parametrize("with_entropy,use_entropy_grad", [(False, False), (True, False), (True, True)])
def test_linear_logprobs_matches_full_logits(with_entropy, head_grad, use_entropy_grad):
    gen = torch.Generator().manual_seed(0)
    M, H, r = 29, 12, 3
    h = torch.randn(M, H, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(V, H, generator=gen, dtype=torch.float64, requires_grad=head_grad)
    b = torch.randn(V, generator=gen, dtype=torch.float64, requires_grad=head_grad)
    h2 = torch.randn(M, r, generator=gen, dtype=torch.float64, requires_grad=True)
    w2 = torch.randn(V, r, generator=gen, dtype=torch.float64, requires_grad=head_grad)
    y = torch.randint(0, V, (M,), generator=gen)
    gl, ge = torch.randn(M, generator=gen, dtype=torch.float64), torch.randn(M, generator=gen, dtype=torch.float64)
    # chunks that do not divide M or V
    lp, ent = linear_logprobs(h, w, y, bias_v=b, extra_pairs=[(h2, w2)], with_entropy=with_entropy,
                              chunk_size=8, vocab_chunk_size=40)
    lp_ref, ent_ref = full_logits_logprobs(h @ w.T + b + h2 @ w2.T, y, with_entropy)
    torch.testing.assert_close(lp, lp_ref)
    obj, obj_ref = (lp * gl).sum(), (lp_ref * gl).sum()
    if with_entropy:
        torch.testing.assert_close(ent, ent_ref)
        if use_entropy_grad:
            obj, obj_ref = obj + (ent * ge).sum(), obj_ref + (ent_ref * ge).sum()
    leaves = [h, h2] + ([w, b, w2] if head_grad else [])
    for g, g_ref in zip(torch.autograd.grad(obj, leaves), torch.autograd.grad(obj_ref, leaves)):
        torch.testing.assert_close(g, g_ref)


def test_linear_logprobs_no_grad_and_float32():
    gen = torch.Generator().manual_seed(1)
    h, w = torch.randn(50, 16, generator=gen), torch.randn(V, 16, generator=gen)
    y = torch.randint(0, V, (50,), generator=gen)
    with torch.no_grad():
        lp, ent = linear_logprobs(h, w, y, with_entropy=True, chunk_size=16, vocab_chunk_size=32)
    lp_ref, ent_ref = full_logits_logprobs(h @ w.T, y, True)
    torch.testing.assert_close(lp, lp_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ent_ref, atol=1e-5, rtol=1e-5)


def _run_both(model, ids, am, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the chunked path must not fall back
        lp, ent = sequence_logprobs(model, ids, am, with_entropy=True, chunk_size=5, vocab_chunk_size=37, **kw)
    lp_ref, ent_ref = sequence_logprobs(model, ids, am, with_entropy=True, backend="naive", **kw)
    return lp, ent, lp_ref, ent_ref


def _batch(B=3, T=11, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, T), generator=gen)
    am = torch.ones(B, T, dtype=torch.long)
    am[0, :3] = 0  # left padding
    am[2, -2:] = 0  # right padding
    return ids, am


@pytest.mark.parametrize("cls,cfg_cls,tie", [(LlamaForCausalLM, LlamaConfig, False),
                                             (Qwen2ForCausalLM, Qwen2Config, True)])
def test_hf_models_match_full_logits_with_grads(cls, cfg_cls, tie):
    torch.manual_seed(0)
    model = cls(small(cfg_cls, tie_word_embeddings=tie)).double()
    ids, am = _batch()
    lp, ent, lp_ref, ent_ref = _run_both(model, ids, am, temperature=0.7)
    sel = am[:, 1:].bool()
    assert lp.shape == (3, 10) and lp[~sel].eq(0).all()
    torch.testing.assert_close(lp, lp_ref)
    torch.testing.assert_close(ent, ent_ref)
    params = [p for p in model.parameters() if p.requires_grad]
    g = torch.autograd.grad(lp.sum() + 0.1 * ent.sum(), params)
    g_ref = torch.autograd.grad(lp_ref.sum() + 0.1 * ent_ref.sum(), params)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("targets,save", [(["q_proj", "v_proj"], None), (["q_proj", "lm_head"], None),
                                          (["v_proj"], ["lm_head"])])
def test_peft_lora_grads_reach_adapters(targets, save):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    base = LlamaForCausalLM(small(LlamaConfig)).double()
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=targets, modules_to_save=save,
                                            lora_dropout=0.0, init_lora_weights=False))
    ids, am = _batch(seed=2)
    lp, ent, lp_ref, ent_ref = _run_both(model, ids, am)
    torch.testing.assert_close(lp, lp_ref)
    torch.testing.assert_close(ent, ent_ref)
    names, params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad])
    assert any("lora_A" in n for n in names)
    g = torch.autograd.grad(lp.sum(), params)
    g_ref = torch.autograd.grad(lp_ref.sum(), params)
    for n, a, b in zip(names, g, g_ref):
        torch.testing.assert_close(a, b, msg=n)
        assert a.abs().sum() > 0, n


@pytest.mark.parametrize("cls,cfg_cls,kw", [(CohereForCausalLM, CohereConfig, {"logit_scale": 0.3}),
                                            (GraniteForCausalLM, GraniteConfig, {"logits_scaling": 4.0})])
def test_scaled_logits(cls, cfg_cls, kw):
    torch.manual_seed(2)
    model = cls(small(cfg_cls, **kw)).double()
    ids, am = _batch(seed=3)
    lp, ent, lp_ref, ent_ref = _run_both(model, ids, am)
    torch.testing.assert_close(lp, lp_ref)
    torch.testing.assert_close(ent, ent_ref)


def test_softcapping_falls_back_to_full_logits():
    torch.manual_seed(3)
    cfg = small(Gemma2Config, head_dim=8, final_logit_softcapping=5.0)
    model = Gemma2ForCausalLM(cfg).double()
    ids, am = _batch(seed=4)
    am[0] = 1  # Gemma 2's own eager attention gives NaN rows under left padding
    with pytest.warns(UserWarning, match="full logits"):
        lp, _ = sequence_logprobs(model, ids, am)
    logits = model(input_ids=ids, attention_mask=am).logits[:, :-1]
    want = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    sel = am[:, 1:].bool()  # padded rows may be NaN in the model's own logits; they are 0 here
    torch.testing.assert_close(lp[sel], want[sel])
    assert lp[~sel].eq(0).all()


def test_token_mask_and_bf16():
    torch.manual_seed(4)
    model = Qwen2ForCausalLM(small(Qwen2Config)).to(torch.bfloat16)
    ids, am = _batch(seed=5)
    tm = torch.zeros(3, 10, dtype=torch.bool)
    tm[:, 6:] = True
    lp, ent = sequence_logprobs(model, ids, am, token_mask=tm, with_entropy=True)
    assert lp.dtype == torch.float32 and lp[~tm].eq(0).all() and (lp[tm] < 0).all()
    lp_ref, _ = sequence_logprobs(model, ids, am, token_mask=tm, backend="naive")
    torch.testing.assert_close(lp, lp_ref, atol=0.05, rtol=0.02)
