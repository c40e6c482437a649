"""Log-probabilities (and entropy) of chosen tokens without a whole [N, T, V] logits tensor.

``linear_logprobs`` computes ``log softmax(h W^T + b)[y]`` from hidden states and
the LM head in chunks of ``chunk_size`` tokens x ``vocab_chunk_size`` vocabulary
entries with an online log-sum-exp (Milakov & Gimelshein, 2018), the memory trick
of Liger-Kernel's fused linear cross-entropy (Hsu et al., 2024) and Cut Cross-Entropy
(Wijmans et al., 2024), here returning per-token log-probs for RL instead of a loss.
The backward recomputes logits chunk by chunk. When only the hidden states need a
gradient (a frozen head, as under LoRA), the forward also accumulates
``W[y] - E_p[W]`` so the backward is a broadcast multiply, not a second pass of GEMMs.

``sequence_logprobs`` runs a HF causal LM (or a peft ``PeftModel`` around one) up
to its last hidden state, finds the head (plain, tied, ``modules_to_save`` or a LoRA
``Linear``), and falls back to full logits where that is not possible.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

BACKENDS = ("auto", "torch", "triton", "naive")

# Model types whose ``ForCausalLM.forward`` is ``lm_head(decoder(...).last_hidden_state)``
# up to a scalar logit scale handled below; others fall back to full logits.
PLAIN_HEAD_MODEL_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "gemma", "olmo",
    "olmo2", "granite", "granitemoe", "cohere", "cohere2", "smollm3", "deepseek_v3", "ministral", "starcoder2",
})


# --------------------------------------------------------------------------- chunked kernel
def _acc_dtype(t: torch.Tensor) -> torch.dtype:
    """fp32 statistics for fp32/bf16/fp16 models; fp64 stays fp64 (tests)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _logits(hs, ws, bias, t0, t1, v0, v1):
    """Logits chunk [t1-t0, v1-v0] = sum_i h_i[t0:t1] @ w_i[v0:v1]^T (+ bias), in fp32 (fp64)."""
    z = None
    for h, w in zip(hs, ws):
        part = (h[t0:t1] @ w[v0:v1].T).to(_acc_dtype(w))  # GEMM in the model dtype, as the HF head does
        z = part if z is None else z + part
    if bias is not None:
        z = z + bias[v0:v1].to(z.dtype)
    return z


class _ChunkedLinearLogprob(torch.autograd.Function):
    """logp_m [M] (and entropy_m [M]) of targets_m under ``sum_i h_i W_i^T + b``."""

    @staticmethod
    def forward(ctx, targets_m, bias, cfg, *hs_ws):
        with_entropy, chunk, vchunk, precompute = cfg
        k = len(hs_ws) // 2
        hs, ws = hs_ws[:k], hs_ws[k:]
        M, V = targets_m.shape[0], ws[0].shape[0]
        dev, acc_dt = ws[0].device, _acc_dtype(ws[0])
        kw = {"dtype": acc_dt, "device": dev}
        logp_m = torch.empty(M, **kw)
        lse_m = torch.empty(M, **kw)
        ent_m = torch.empty(M, **kw) if with_entropy else None
        # a_i = W_i[y] - E_p[W_i]: d logp / d h_i, kept only when it saves the backward GEMMs.
        a_s = [torch.empty(h.shape, **kw) for h in hs] if precompute else []
        for t0 in range(0, M, chunk):
            t1 = min(t0 + chunk, M)
            y = targets_m[t0:t1]
            run_max = torch.full((t1 - t0,), float("-inf"), **kw)
            run_sum = torch.zeros(t1 - t0, **kw)
            run_ez = torch.zeros(t1 - t0, **kw)  # sum e^(z-max) z, for the entropy
            chosen = torch.zeros(t1 - t0, **kw)
            acc = [torch.zeros(t1 - t0, h.shape[1], **kw) for h in hs] if precompute else []
            for v0 in range(0, V, vchunk):
                v1 = min(v0 + vchunk, V)
                z = _logits(hs, ws, bias, t0, t1, v0, v1)
                here = (y >= v0) & (y < v1)
                picked = z.gather(1, (y - v0).clamp(0, v1 - v0 - 1)[:, None]).squeeze(1)
                chosen = torch.where(here, picked, chosen)
                new_max = torch.maximum(run_max, z.amax(1))
                alpha = torch.exp(run_max - new_max)  # rescales what was summed under the old max
                if with_entropy:
                    e = (z - new_max[:, None]).exp_()
                    run_ez = run_ez * alpha + torch.einsum("ij,ij->i", e, z)
                else:
                    e = z.sub_(new_max[:, None]).exp_()  # in place: one logits-sized block alive
                run_sum = run_sum * alpha + e.sum(1)
                for a, w in zip(acc, ws):
                    a.mul_(alpha[:, None])
                    if w.dtype == acc_dt:
                        a.addmm_(e, w[v0:v1])
                    else:
                        a.add_((e.to(w.dtype) @ w[v0:v1]).to(acc_dt))
                run_max = new_max
                del z, e
            lse = run_max + run_sum.log()
            lse_m[t0:t1] = lse
            logp_m[t0:t1] = chosen - lse
            if with_entropy:
                ent_m[t0:t1] = lse - run_ez / run_sum
            for a_out, a, w in zip(a_s, acc, ws):
                a_out[t0:t1] = w[y].to(acc_dt) - a / run_sum[:, None]
        ctx.cfg = cfg
        ctx.k = k
        ctx.set_materialize_grads(False)  # an unused entropy output must arrive as None, not zeros
        ctx.save_for_backward(targets_m, bias, lse_m, ent_m, *hs, *ws, *a_s)
        outs = (logp_m, ent_m) if with_entropy else (logp_m,)
        return outs

    @staticmethod
    def backward(ctx, g_logp, g_ent=None):
        with_entropy, chunk, vchunk, precompute = ctx.cfg
        k = ctx.k
        saved = ctx.saved_tensors
        targets_m, bias, lse_m, ent_m = saved[:4]
        hs, ws, a_s = saved[4:4 + k], saved[4 + k:4 + 2 * k], saved[4 + 2 * k:]
        need_h = ctx.needs_input_grad[3:3 + k]
        need_w = ctx.needs_input_grad[3 + k:3 + 2 * k]
        need_b = bias is not None and ctx.needs_input_grad[1]
        if g_logp is None:
            g_logp = torch.zeros_like(lse_m)
        acc_dt = lse_m.dtype
        g_logp = g_logp.to(acc_dt)
        g_ent = g_ent.to(acc_dt) if g_ent is not None else None
        if precompute and g_ent is None and not any(need_w) and not need_b:
            grads_h = [(g_logp[:, None] * a).to(h.dtype) if n else None for a, h, n in zip(a_s, hs, need_h)]
            return (None, None, None, *grads_h, *([None] * k))
        # Recompute pass: outer loop over vocabulary so each W chunk's gradient is summed once.
        M, V = targets_m.shape[0], ws[0].shape[0]
        gh = [torch.zeros(h.shape, dtype=acc_dt, device=h.device) if n else None for h, n in zip(hs, need_h)]
        gw = [torch.zeros_like(w) if n else None for w, n in zip(ws, need_w)]
        gb = torch.zeros(V, dtype=acc_dt, device=lse_m.device) if need_b else None
        for v0 in range(0, V, vchunk):
            v1 = min(v0 + vchunk, V)
            # accumulate straight into the fp32/fp64 gradient, or into an fp32 block for bf16 weights
            gw_acc = [None if g is None else g[v0:v1] if g.dtype == acc_dt else
                      torch.zeros(v1 - v0, g.shape[1], dtype=acc_dt, device=g.device) for g in gw]
            for t0 in range(0, M, chunk):
                t1 = min(t0 + chunk, M)
                logsm = _logits(hs, ws, bias, t0, t1, v0, v1).sub_(lse_m[t0:t1, None])
                p = logsm.exp()
                gl = g_logp[t0:t1, None]
                if g_ent is not None:  # dH/dz = -p (log p + H)
                    logsm.add_(ent_m[t0:t1, None]).mul_(p).mul_(g_ent[t0:t1, None])
                    grad_z = p.mul_(-gl).sub_(logsm)
                else:
                    grad_z = p.mul_(-gl)  # d logp_y / dz = onehot(y) - p
                y = targets_m[t0:t1]
                rows = ((y >= v0) & (y < v1)).nonzero().squeeze(1)
                grad_z[rows, y[rows] - v0] += g_logp[t0:t1][rows]
                for i in range(k):
                    same = ws[i].dtype == acc_dt
                    gz = grad_z if same else grad_z.to(ws[i].dtype)
                    if gh[i] is not None:
                        if same:
                            gh[i][t0:t1].addmm_(gz, ws[i][v0:v1])
                        else:
                            gh[i][t0:t1] += (gz @ ws[i][v0:v1]).to(acc_dt)
                    if gw_acc[i] is not None:
                        if same:
                            gw_acc[i].addmm_(gz.T, hs[i][t0:t1])
                        else:
                            gw_acc[i] += (gz.T @ hs[i][t0:t1]).to(acc_dt)
                if gb is not None:
                    gb[v0:v1] += grad_z.sum(0)
                del logsm, p, grad_z
            for i in range(k):
                if gw[i] is not None and gw[i].dtype != acc_dt:
                    gw[i][v0:v1] = gw_acc[i].to(gw[i].dtype)
        grads_h = [g.to(h.dtype) if g is not None else None for g, h in zip(gh, hs)]
        grad_b = gb.to(bias.dtype) if gb is not None else None
        return (None, grad_b, None, *grads_h, *gw)


def linear_logprobs(
    hidden_mh: torch.Tensor,
    weight_vh: torch.Tensor,
    targets_m: torch.Tensor,
    *,
    bias_v: torch.Tensor | None = None,
    extra_pairs: list[tuple[torch.Tensor, torch.Tensor]] | tuple = (),
    with_entropy: bool = False,
    chunk_size: int = 1024,
    vocab_chunk_size: int = 16384,
):
    """Log-prob (and entropy) of ``targets_m`` under ``logits = hidden @ weight^T (+ bias)``.

    Args:
        hidden_mh: [M, H] hidden states (already scaled by any temperature / logit scale).
        weight_vh: [V, H] output embedding; bias_v: optional [V].
        targets_m: int [M] token ids.
        extra_pairs: more ``(h_mr, w_vr)`` terms added to the logits, e.g. a LoRA head's
            ``(scaling * lora_A(h), lora_B.weight)``; gradients flow to all of them.
        chunk_size, vocab_chunk_size: the largest logits block is [chunk_size, vocab_chunk_size] fp32.

    Returns:
        (logp_m [M] fp32, entropy_m [M] fp32 or None). Peak extra memory is a few blocks
        of chunk_size x vocab_chunk_size floats, never [M, V].
    """
    hs = [hidden_mh, *[p[0] for p in extra_pairs]]
    ws = [weight_vh, *[p[1] for p in extra_pairs]]
    grad_on = torch.is_grad_enabled()
    need_h = grad_on and any(h.requires_grad for h in hs)
    need_rest = grad_on and (any(w.requires_grad for w in ws) or (bias_v is not None and bias_v.requires_grad))
    # Precompute d logp/dh in the forward only when the backward would need nothing else.
    precompute = need_h and not need_rest
    cfg = (bool(with_entropy), max(1, int(chunk_size)), max(1, int(vocab_chunk_size)), precompute)
    outs = _ChunkedLinearLogprob.apply(targets_m, bias_v, cfg, *hs, *ws)
    return (outs[0], outs[1]) if with_entropy else (outs[0], None)


def full_logits_logprobs(logits_mv: torch.Tensor, targets_m: torch.Tensor, with_entropy: bool = False):
    """The naive twin: fp32 log-softmax over a whole logits tensor [..., V], then gather."""
    logsm = torch.log_softmax(logits_mv.to(torch.promote_types(logits_mv.dtype, torch.float32)), dim=-1)
    logp = logsm.gather(-1, targets_m[..., None]).squeeze(-1)
    entropy = -(logsm.exp() * logsm).sum(-1) if with_entropy else None
    return logp, entropy


# --------------------------------------------------------------------------- model plumbing
def _text_config(config):
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def _logit_scale(config):
    """Scalar the model multiplies its logits by (Cohere ``logit_scale``, Granite ``logits_scaling``)."""
    scale = 1.0
    if getattr(config, "logit_scale", None) is not None:
        scale *= float(config.logit_scale)
    if getattr(config, "logits_scaling", None) is not None:
        scale /= float(config.logits_scaling)
    return scale


def _resolve_head(head):
    """``(weight, bias, lora_terms)`` for an output layer, or None if it is not a plain linear map.

    lora_terms: list of ``(lora_A, lora_B_weight, scaling, dropout)`` for active LoRA adapters.
    """
    if head is None:
        return None
    if hasattr(head, "modules_to_save") and hasattr(head, "original_module"):  # peft ModulesToSaveWrapper
        active = [a for a in head.active_adapters if a in head.modules_to_save]
        head = head.original_module if head.disable_adapters or not active else head.modules_to_save[active[0]]
    if hasattr(head, "base_layer") and hasattr(head, "lora_A"):  # peft LoRA Linear
        base = head.get_base_layer() if hasattr(head, "get_base_layer") else head.base_layer
        if type(base) is not nn.Linear:
            return None
        if head.disable_adapters or head.merged:
            # merged: the base weight already holds the delta; disabled-but-merged is left to peft
            return None if (head.disable_adapters and head.merged) else (base.weight, base.bias, [])
        terms = []
        for name in head.active_adapters:
            if name not in head.lora_A:
                continue
            if getattr(head, "use_dora", {}).get(name, False) or head.lora_B[name].bias is not None:
                return None
            terms.append((head.lora_A[name], head.lora_B[name].weight, head.scaling[name], head.lora_dropout[name]))
        return base.weight, base.bias, terms
    if type(head) is nn.Linear:
        return head.weight, head.bias, []
    return None


def _unwrap(model):
    """``(causal_lm, decoder, head_spec, logit_scale)`` or None where chunking is impossible."""
    lm = model
    if hasattr(model, "peft_config") and hasattr(model, "get_base_model"):
        cfg = getattr(model, "active_peft_config", None)
        if cfg is None or getattr(cfg, "is_prompt_learning", False):
            return None  # prompt/prefix tuning changes the inputs; let peft's forward do it
        lm = model.get_base_model()
    config = getattr(lm, "config", None)
    if config is None:
        return None
    text_cfg = _text_config(config)
    if getattr(config, "model_type", None) not in PLAIN_HEAD_MODEL_TYPES:
        return None
    if getattr(text_cfg, "final_logit_softcapping", None) is not None:
        return None  # tanh soft-capping (Gemma 2/3) is not a linear map; use full logits
    get_out = getattr(lm, "get_output_embeddings", None)
    get_dec = getattr(lm, "get_decoder", None)
    if not callable(get_out) or not callable(get_dec):
        return None
    decoder = get_dec()
    spec = _resolve_head(get_out())
    if decoder is None or decoder is lm or spec is None or not _whole(spec[0]):
        return None
    return lm, decoder, spec, _logit_scale(text_cfg)


def _whole(weight) -> bool:
    """False for a head weight we cannot use outside its module's forward: a DeepSpeed
    ZeRO-3 partition (gathered only inside hooks) or a sharded DTensor (FSDP2)."""
    return not (hasattr(weight, "ds_id") or weight.numel() == 0 or hasattr(weight, "_local_tensor"))


def head_logprobs(h_mh, targets_m, head, scale: float, *, with_entropy: bool, chunk_size: int, vocab_chunk_size: int):
    """``linear_logprobs`` of hidden states [M, H] through an ``_unwrap``ped head ``(weight, bias, lora_terms)``,
    logits multiplied by ``scale`` (logit scale / temperature)."""
    weight, bias, lora_terms = head
    extra = []
    for lora_a, lora_b_w, scaling, dropout in lora_terms:
        x = h_mh.to(lora_a.weight.dtype)
        extra.append((lora_a(dropout(x)) * (scaling * scale), lora_b_w))
    if scale != 1.0:
        h_mh = h_mh * scale
        bias = bias * scale if bias is not None else None
    return linear_logprobs(h_mh, weight, targets_m, bias_v=bias, extra_pairs=extra, with_entropy=with_entropy,
                           chunk_size=chunk_size, vocab_chunk_size=vocab_chunk_size)


def sequence_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    with_entropy: bool = False,
    token_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    vocab_chunk_size: int = 16384,
    backend: str = "auto",
    **model_kwargs,
):
    """Log-prob of each next token under ``model``, without materialising [B, T, V] logits.

    Args:
        model: a HF causal LM (``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ...) or a peft
            ``PeftModel`` around one. Models whose logits are not ``lm_head(hidden) * c``
            (soft-capping, unknown architectures, prompt tuning), ZeRO-3/FSDP2-sharded heads
            and wrappers (DDP, DeepSpeed engine: their forward must run) use full logits.
        input_ids, attention_mask: [B, T].
        token_mask: optional bool [B, T-1]: positions to compute (default: every position
            whose target token is not padding, ``attention_mask[:, 1:] != 0``). Others are 0.
        temperature: logits are divided by it (as the sampler did), default 1.
        chunk_size, vocab_chunk_size: block sizes of the chunked head.
        backend: ``auto`` | ``torch`` | ``triton`` use the chunked path (GEMM-bound, so it
            is torch + cuBLAS under every backend); ``naive`` forces full logits.
        model_kwargs: passed to the model (e.g. ``position_ids``).

    Returns:
        logp_bt [B, T-1] fp32 where ``logp_bt[:, t] = log p(input_ids[:, t+1] | prefix)``,
        and entropy_bt [B, T-1] fp32 (or None). Gradients reach the decoder (and LoRA
        weights in it), the hidden states and the head's trainable weights.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {BACKENDS}")
    B, T = input_ids.shape
    if token_mask is None:
        token_mask = attention_mask[:, 1:] != 0
    sel_bt = token_mask.bool()
    targets_bt = input_ids[:, 1:]
    parts = _unwrap(model) if backend != "naive" else None
    if parts is None:
        if backend != "naive":
            warnings.warn(f"sequence_logprobs: {type(model).__name__} has no plain linear head; using full logits",
                          stacklevel=2)
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **model_kwargs).logits
        logp_bt, ent_bt = full_logits_logprobs(
            logits[:, :-1].to(torch.promote_types(logits.dtype, torch.float32)) / temperature, targets_bt, with_entropy)
        zero = logp_bt.new_zeros(())
        return (torch.where(sel_bt, logp_bt, zero),
                torch.where(sel_bt, ent_bt, zero) if ent_bt is not None else None)
    _, decoder, head, scale = parts
    out = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **model_kwargs)
    hidden_bth = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    h_mh = hidden_bth[:, :-1][sel_bt]  # only the positions asked for: [M, H]
    logp_m, ent_m = head_logprobs(h_mh, targets_bt[sel_bt], head, scale / float(temperature),
                                  with_entropy=with_entropy, chunk_size=chunk_size, vocab_chunk_size=vocab_chunk_size)
    logp_bt = logp_m.new_zeros(B, T - 1).index_put((sel_bt,), logp_m)
    ent_bt = ent_m.new_zeros(B, T - 1).index_put((sel_bt,), ent_m) if ent_m is not None else None
    return logp_bt, ent_bt
