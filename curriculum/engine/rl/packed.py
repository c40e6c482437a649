"""Token log-probs of a right-padded batch without computing its padding or its repeated prompts.

``packed_logprobs`` returns what ``sequence_logprobs`` returns at the positions asked for,
computed as follows (each step exact in arithmetic, so only float rounding differs):

1. A row needs hidden states only up to its last asked position (causal attention: later
   tokens change nothing before them); positions before its first asked one are needed only
   as keys and values.
2. That prefix is computed once for all rows that share it (a GRPO group's prompt), with
   gradients, and its KV cache is indexed out to the rows (Prefix sharing as in Hydragen,
   Juravsky et al., 2024, here for the training forward).
3. The rest of each row (its suffix) runs on top of the cache, rows sorted by suffix length
   into micro-batches so padding stays small (``length_buckets``); the head runs once over
   every asked position.

Gradients sum over a prefix's rows through the indexing, as they would over its copies.
Models the chunked head cannot run (``sequence_logprobs`` falls back to full logits there),
caches other than a plain ``DynamicCache`` (sliding windows) and left-padded batches take
``sequence_logprobs`` itself.
"""
from __future__ import annotations

import inspect
from collections import Counter

import torch

from curriculum.engine.rl.logprobs import _unwrap, head_logprobs, sequence_logprobs

# A micro-batch of its own must save at least this many padded tokens: each costs a forward's overhead.
BUCKET_OVERHEAD_TOKENS = 128


def length_buckets(lengths: list[int], overhead: int = BUCKET_OVERHEAD_TOKENS) -> list[list[int]]:
    """Indices sorted by length and cut into runs minimising padded tokens + ``overhead`` per run.

    A run pads every row to its longest one; dynamic programming over the distinct lengths
    (O(distinct^2)) finds the cheapest cut, e.g. [2, 3, 16, 16, 17] -> one run (5 x 17 = 85
    tokens beats 2 x 3 + 3 x 17 + 128).
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    counts = Counter(lengths)
    values = sorted(counts)
    best = [0.0] + [float("inf")] * len(values)  # best[k]: cost of the k shortest distinct lengths
    cut = [0] * (len(values) + 1)
    for k in range(1, len(values) + 1):
        rows = 0
        for j in range(k, 0, -1):  # the last run holds distinct lengths j-1 .. k-1
            rows += counts[values[j - 1]]
            cost = best[j - 1] + rows * values[k - 1] + overhead
            if cost < best[k]:
                best[k], cut[k] = cost, j - 1
    bounds, k = [], len(values)
    while k > 0:
        bounds.append(values[k - 1])
        k = cut[k]
    runs, start = [], 0
    for top in reversed(bounds):
        end = start
        while end < len(order) and lengths[order[end]] <= top:
            end += 1
        runs.append(order[start:end])
        start = end
    return runs


def _cache_api(decoder):
    """``(DynamicCache, name of the forward's cache keyword)``, or None where this transformers lacks them."""
    try:
        from transformers import DynamicCache
    except ImportError:  # pragma: no cover - every supported transformers has it
        return None
    params = inspect.signature(decoder.forward).parameters
    name = "cache" if "cache" in params else "past_key_values" if "past_key_values" in params else None
    if name is None or not hasattr(DynamicCache(), "layers"):
        return None
    return DynamicCache, name


def _plain_full_attention(config) -> bool:
    """Every layer attends to the whole past (no sliding window: a cache that would drop keys)."""
    types = getattr(config, "layer_types", None)
    windowed = getattr(config, "use_sliding_window", None) is True or (
        getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", None) is None)
    return not windowed and (types is None or all(t == "full_attention" for t in types))


def packed_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_mask: torch.Tensor,
    *,
    with_entropy: bool = False,
    chunk_size: int = 1024,
    vocab_chunk_size: int = 16384,
    backend: str = "auto",
    overhead: int = BUCKET_OVERHEAD_TOKENS,
    temperature: float = 1.0,
):
    """``sequence_logprobs(model, input_ids, attention_mask, token_mask=token_mask, ...)`` without padding waste.

    Args:
        model: as ``sequence_logprobs``.
        input_ids, attention_mask: [B, T], right-padded (as ``rollout.pack`` builds them).
        token_mask: [B, T-1]; nonzero where a log-prob is wanted (``Rollout.response_mask``: any
            0/1 or weight pattern inside a completion is honoured). Other positions are 0.
        overhead: ``length_buckets``' price of one more micro-batch, in tokens.
        temperature: logits are divided by it, as the sampler did (verl's ``logits / temperature``).

    Returns:
        logp_bt [B, T-1] fp32 and entropy_bt [B, T-1] fp32 (or None), as ``sequence_logprobs``.
    """
    B, T = input_ids.shape
    sel_bt = (token_mask != 0) & (attention_mask[:, 1:] != 0)
    parts = _unwrap(model) if backend != "naive" else None
    api = _cache_api(parts[1]) if parts is not None else None
    lengths = attention_mask.sum(1)
    right_padded = bool((attention_mask != 0).eq(torch.arange(T, device=input_ids.device) < lengths[:, None]).all())
    if api is None or not right_padded or not _plain_full_attention(parts[0].config):
        return sequence_logprobs(model, input_ids, attention_mask, token_mask=sel_bt, with_entropy=with_entropy,
                                 chunk_size=chunk_size, vocab_chunk_size=vocab_chunk_size, backend=backend,
                                 temperature=temperature)
    _, decoder, head, scale = parts
    DynamicCache, cache_kw = api
    device = input_ids.device
    rows = sel_bt.any(1).nonzero().squeeze(1).tolist()
    if not rows:
        return sequence_logprobs(model, input_ids, attention_mask, token_mask=sel_bt, with_entropy=with_entropy,
                                 chunk_size=chunk_size, vocab_chunk_size=vocab_chunk_size, backend=backend,
                                 temperature=temperature)
    asked = sel_bt.int()
    first = asked.argmax(1).tolist()  # first asked position of each row
    last = (T - 2 - asked.flip(1).argmax(1)).tolist()  # last asked position
    ids = input_ids.tolist()

    # 1. Prefixes: tokens before a row's first asked position, computed once where two rows share one.
    key = {i: tuple(ids[i][: first[i]]) for i in rows}
    shared = Counter(key.values())
    cut = {i: first[i] if first[i] > 0 and shared[key[i]] > 1 else 0 for i in rows}
    prefixes = list(dict.fromkeys(key[i] for i in rows if cut[i]))
    slot = {p: u for u, p in enumerate(prefixes)}
    kv, width = [], 0
    if prefixes:
        width = max(map(len, prefixes))
        p_ids = torch.zeros(len(prefixes), width, dtype=input_ids.dtype, device=device)
        p_mask = torch.zeros(len(prefixes), width, dtype=attention_mask.dtype, device=device)
        for u, p in enumerate(prefixes):  # right-padded: pads attend to the real tokens before them
            p_ids[u, : len(p)] = torch.tensor(p, device=device)
            p_mask[u, : len(p)] = 1
        cache = DynamicCache(config=decoder.config)
        decoder(input_ids=p_ids, attention_mask=p_mask, use_cache=True, **{cache_kw: cache})
        kv = [(layer.keys, layer.values) for layer in cache.layers]  # [U, heads, width, head_dim], with grad

    # 2. Suffixes from the cut to the last asked position, in length buckets.
    hs, targets, where_b, where_t = [], [], [], []
    suffix = {i: last[i] + 1 - cut[i] for i in rows}
    for bucket in length_buckets([suffix[i] for i in rows], overhead):
        b_rows = [rows[k] for k in bucket]
        S = max(suffix[i] for i in b_rows)
        b_idx = torch.tensor(b_rows, device=device)[:, None]  # [b, 1]
        c_b = torch.tensor([cut[i] for i in b_rows], device=device)[:, None]
        real = torch.arange(S, device=device) < torch.tensor([suffix[i] for i in b_rows], device=device)[:, None]
        t_idx = c_b + torch.arange(S, device=device)  # [b, S] positions in the row (and position ids)
        s_ids = torch.where(real, input_ids[b_idx, t_idx.clamp(max=T - 1)], 0)
        mask = real.to(attention_mask.dtype)
        if kv:
            slots = torch.tensor([slot[key[i]] if cut[i] else 0 for i in b_rows], device=device)
            cache = DynamicCache(ddp_cache_data=[(k.index_select(0, slots), v.index_select(0, slots)) for k, v in kv],
                                 config=decoder.config)
            # the row's prefix keys (none for an unshared row: cut 0), then its own tokens
            mask = torch.cat([(torch.arange(width, device=device) < c_b).to(mask.dtype), mask], 1)
            kwargs = {cache_kw: cache, "use_cache": True}
        else:
            kwargs = {"use_cache": False}
        out = decoder(input_ids=s_ids, attention_mask=mask, position_ids=t_idx, **kwargs)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]  # [b, S, H]
        t_idx = t_idx.clamp(max=T - 2)
        pick = sel_bt[b_idx, t_idx] & real  # [b, S]: the asked positions
        b_pick, t_pick = b_idx.expand(-1, S)[pick], t_idx[pick]
        hs.append(hidden[pick])
        targets.append(input_ids[b_pick, t_pick + 1])
        where_b.append(b_pick)
        where_t.append(t_pick)

    # 3. One pass of the head over every asked position.
    logp_m, ent_m = head_logprobs(torch.cat(hs), torch.cat(targets), head, scale / float(temperature), with_entropy=with_entropy,
                                  chunk_size=chunk_size, vocab_chunk_size=vocab_chunk_size)
    at = (torch.cat(where_b), torch.cat(where_t))
    logp_bt = logp_m.new_zeros(B, T - 1).index_put(at, logp_m)
    ent_bt = ent_m.new_zeros(B, T - 1).index_put(at, ent_m) if ent_m is not None else None
    return logp_bt, ent_bt
