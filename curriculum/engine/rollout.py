"""Sampling completions and packing them into padded training batches.

Every rollout (proposals, probes, solver attempts, eval) samples through an engine that
``curriculum.rollouts.make_engine`` picks from ``rollout.engine``: ``HFEngine`` (transformers
``generate`` on the role's own module, the default and the path bit-exact resume covers) or
``VLLMEngine`` (``curriculum.engine.vllm_engine``). Both take token-id prompts and return
``Completion``s.
"""
from __future__ import annotations

import inspect
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from curriculum.engine.prompts import Prompt, encode_prompt, stop_ids


@dataclass
class Completion:
    """One sampled completion. ``finished`` is False if it hit the token limit.

    ``mask`` (aligned with ``completion_ids``): 1 for a token the model wrote, 0 for one it was
    handed (a tool's observation); None = every token is the model's.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    finished: bool
    mask: list[int] | None = None
    # The engine's log-prob of each completion token (0 for an observation); None where the engine gives none
    # (transformers' generate: its samples come from the trainer's own weights and numerics).
    logprobs: list[float] | None = None

    @property
    def model_tokens(self) -> int:
        """Tokens the model generated (observations excluded)."""
        return len(self.completion_ids) if self.mask is None else sum(self.mask)


@dataclass
class Rollout:
    """A scored batch ready for a policy-gradient step (B sequences, padded once).

    input_ids, attention_mask: [B, T] right-padded prompt + completion.
    response_mask: [B, T-1], 1 where position t predicts a completion token
        (aligned with ``sequence_logprobs`` output).
    rewards: [B] float; group_ids: [B] int64, one id per GRPO group.
    rollout_logprobs: [B, T-1] the sampling engine's log-probs where ``response_mask`` is 1, or None
        (truncated importance sampling corrects for the engine's numerics with them).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    rewards: torch.Tensor
    group_ids: torch.Tensor
    rollout_logprobs: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def _map(self, fn) -> "Rollout":
        return Rollout(*(None if t is None else fn(t) for t in (self.input_ids, self.attention_mask, self.response_mask,
                                                                self.rewards, self.group_ids, self.rollout_logprobs)))

    def select(self, idx: torch.Tensor) -> "Rollout":
        return self._map(lambda t: t[idx])

    def to(self, device) -> "Rollout":
        return self._map(lambda t: t.to(device))


def encode_prompts(tokenizer, prompts: list[Prompt], style: str = "plain") -> list[list[int]]:
    """Token ids of each prompt as ``style`` renders it (``curriculum.engine.prompts``)."""
    return [encode_prompt(tokenizer, p, style) for p in prompts]


@torch.no_grad()
def generate(model, tokenizer, prompts: list[Prompt], *, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, greedy: bool = False, batch_size: int = 256, seed: int | None = None,
             desc: str | None = None, progress: bool = False, style: str = "plain",
             share_prompts: bool = True) -> list[Completion]:
    """Sample one completion per prompt (repeat prompts for groups), prompts rendered in ``style``.

    A completion ends at its first stop token (eos, the model's other eos ids, a chat
    template's end of turn), which it keeps; ``finished`` is False if none came within
    ``max_new_tokens``; sampling stops once every row has finished. Reproducible: the
    sampling stream is seeded from ``seed`` alone, so the same weights and seed give the
    same completions whatever ran before. ``share_prompts`` (on): a prompt repeated in a batch
    (a GRPO group) is prefilled once (``prompt_cache``) and ``decode`` samples, running each
    step only on the rows still going, with ``model.generate``'s random draws; off (or a model
    ``decode`` cannot drive, ``plain_decoder``) gives plain ``model.generate``.
    """
    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    stops, pad = stop_ids(tokenizer, model, style), tokenizer.pad_token_id
    encoded = encode_prompts(tokenizer, prompts, style)
    was_training = model.training
    model.eval()
    out: list[Completion] = []
    starts = range(0, len(encoded), batch_size)
    # disable=None: off when stderr is no TTY, where a nested bar's cursor moves garble logs
    quiet = not progress or len(starts) < 2
    for start in tqdm(starts, desc=desc, disable=True if quiet else None, leave=False):
        chunk = encoded[start : start + batch_size]
        width = max(map(len, chunk))
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, row in enumerate(chunk):  # left padding, so every row ends at the prompt's end
            ids[i, width - len(row) :] = torch.tensor(row)
            attn[i, width - len(row) :] = 1
        ids, attn = ids.to(device), attn.to(device)
        if share_prompts and plain_decoder(model):
            new_bn = decode(model, ids, attn, prompt_cache(model, ids, attn), max_new_tokens, greedy=greedy,
                            temperature=temperature, top_p=top_p, stops=stops, pad=pad).cpu()
        else:
            kwargs = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=temperature, top_p=top_p,
                                                                top_k=0)
            with _plain_generation_config(model):
                new_bn = model.generate(
                    input_ids=ids, attention_mask=attn, max_new_tokens=max_new_tokens,
                    eos_token_id=stops[0] if len(stops) == 1 else stops, pad_token_id=pad, **kwargs,
                ).cpu()[:, width:]
        out += [completion(row, new_bn[i].tolist(), stops, tokenizer, pad=pad) for i, row in enumerate(chunk)]
    model.train(was_training)
    return out


def completion(prompt_ids: list[int], sampled: list[int], stops: list[int], tokenizer, *, pad: int | None = None,
               logprobs: list[float] | None = None) -> Completion:
    """The Completion of ``sampled`` ids: cut after its first stop token (kept), else whole but for ``pad``
    ids (a batch's filler; None: keep all); ``logprobs`` (one per sampled id) cut alike."""
    end = next((j for j, t in enumerate(sampled) if t in stops), None)
    keep = range(end + 1) if end is not None else [j for j, t in enumerate(sampled) if t != pad]
    ids = [sampled[j] for j in keep]
    text = tokenizer.decode([t for t in ids if t not in stops], skip_special_tokens=True)
    return Completion(list(prompt_ids), ids, text, end is not None,
                      logprobs=None if logprobs is None else [logprobs[j] for j in keep])


class HFEngine:
    """transformers' ``generate`` on the role's own module: samples come from the weights being trained."""

    name = "hf"

    def generate(self, role, tokenizer, prompts: list[Prompt], **kwargs) -> list[Completion]:
        """``generate`` on ``role``'s module (its adapter made active), same keywords."""
        return generate(role.activate().model, tokenizer, prompts, **kwargs)

    def release(self) -> None:
        """Nothing to free before an update: the trainer's module is the sampler."""

    def close(self) -> None:
        """Nothing to shut down."""


@contextmanager
def _plain_generation_config(model):
    """``model.generate`` with none of the loaded model's sampling defaults.

    transformers fills every sampling option a call leaves unset from the model's own
    ``generation_config`` (an instruct model's ``repetition_penalty``, ``top_k``, ``min_p``, ...),
    which would sample from another distribution than the one the loss scores. Inside this
    context that config holds only the special token ids: samples follow the call's settings alone.
    """
    from transformers import GenerationConfig

    base = _unwrapped(model)
    own = getattr(base, "generation_config", None)
    if own is None:
        yield
        return
    ids = {k: getattr(own, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")}
    base.generation_config = GenerationConfig(**{k: v for k, v in ids.items() if v is not None})
    try:
        yield
    finally:
        base.generation_config = own


def _unwrapped(model):
    """The transformers model under a peft wrapper (the model itself otherwise)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _cache_kwarg(module) -> str:
    """The name a model's forward gives its KV cache: ``cache`` (transformers 5.x) or ``past_key_values``."""
    base = _unwrapped(module)
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _synced_ranks() -> bool:
    """True where ``model.generate`` steps every rank together (ZeRO-3 over several ranks)."""
    import torch.distributed as dist
    from transformers.integrations import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled() and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def plain_decoder(model) -> bool:
    """True for a decoder-only model with a plain ``DynamicCache`` and a separate decoder stack, outside a
    ZeRO-3 group that must step its ranks together: what ``prompt_cache`` and ``decode`` drive."""
    config = getattr(model, "config", None)
    base = _unwrapped(model)
    decoder = base.get_decoder() if callable(getattr(base, "get_decoder", None)) else None
    plain_cache = getattr(base, "_supports_default_dynamic_cache", lambda: False)()
    prompt_tuning = getattr(getattr(model, "active_peft_config", None), "is_prompt_learning", False)
    return not (config is None or getattr(config, "is_encoder_decoder", False) or not plain_cache
                or decoder is None or decoder is base or prompt_tuning
                or getattr(getattr(base, "generation_config", None), "cache_implementation", None) or _synced_ranks())


@torch.no_grad()
def decode(model, ids_bw: torch.Tensor, attn_bw: torch.Tensor, cache, max_new_tokens: int, *, greedy: bool,
           temperature: float, top_p: float, stops: list[int], pad: int) -> torch.Tensor:
    """[B, max_new_tokens] new tokens of left-padded prompts, ``pad`` after a row's stop token.

    ``model.generate``'s sampling (float32 logits, temperature, then top-p, softmax and one
    multinomial draw over all B rows per step, or argmax), with each step's forward run only
    on the rows still going: a row that wrote a stop token leaves the batch and its KV cache.
    The draw still covers all B rows (an ended row's slot holds a dummy distribution), and a
    row's draw does not depend on the others', so the random stream and the samples are
    ``generate``'s (tests hold them equal). ``cache``: ``prompt_cache``'s (each prompt but its
    last token), or None to prefill here. Stops once every row has ended.
    """
    from transformers import DynamicCache

    B, device = ids_bw.shape[0], ids_bw.device
    out = torch.full((B, max_new_tokens), pad, dtype=torch.long, device=device)
    past = cache if cache is not None else DynamicCache(config=model.config)
    step_ids = ids_bw[:, -1:] if cache is not None else ids_bw
    attn = attn_bw
    live = torch.arange(B, device=device)  # the batch row of each row still going
    stop = torch.tensor(stops, device=device)
    base = _unwrapped(model)
    kwargs = {_cache_kwarg(model): past}
    if "logits_to_keep" in inspect.signature(base.forward).parameters:
        kwargs["logits_to_keep"] = 1
    for t in range(max_new_tokens):
        positions = (attn.long().cumsum(-1) - 1).masked_fill(attn == 0, 1)[:, -step_ids.shape[1]:]
        logits = model(input_ids=step_ids, attention_mask=attn, position_ids=positions, use_cache=True,
                       **kwargs).logits[:, -1].float()
        if greedy:
            nxt = logits.argmax(-1)
        else:
            scores = logits / temperature
            if top_p < 1.0:
                scores = _top_p(scores, top_p)
            probs = torch.zeros((B, scores.shape[-1]), dtype=scores.dtype, device=device)
            probs[:, 0] = 1.0  # ended rows: a dummy distribution, drawn from so the stream stays generate's
            probs[live] = scores.softmax(-1)
            nxt = torch.multinomial(probs, num_samples=1).squeeze(1)[live]
        out[live, t] = nxt
        attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=-1)
        going = ~torch.isin(nxt, stop)
        if not going.all():
            keep = going.nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            past.batch_select_indices(keep)
            live, attn, nxt = live[keep], attn[keep], nxt[keep]
        step_ids = nxt[:, None]
    return out


def _top_p(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """transformers' ``TopPLogitsWarper`` (one token kept at least): the smallest set of tokens whose
    probability reaches ``top_p``, the rest at -inf."""
    sorted_scores, order = torch.sort(scores, descending=False)
    remove = sorted_scores.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
    remove[..., -1:] = False
    return scores.masked_fill(remove.scatter(1, order, remove), -float("inf"))


@torch.no_grad()
def prompt_cache(model, ids_bw: torch.Tensor, attn_bw: torch.Tensor):
    """The KV cache of each left-padded row's prompt but its last token, one forward per distinct prompt.

    ``decode`` (or ``model.generate``) handed this cache runs only the rows' last prompt token
    before it samples, so the G copies of a group's prompt cost one prefill instead of G.
    Nothing is sampled in a prefill, so the sampling stream is that of a plain ``generate``: the
    same tokens up to float rounding of the prompt's keys (tests hold greedy and float64 samples
    identical). None where nothing repeats or the model is not a ``plain_decoder``.
    """
    from transformers import DynamicCache

    config = getattr(model, "config", None)
    base = _unwrapped(model)
    decoder = base.get_decoder() if callable(getattr(base, "get_decoder", None)) else None
    if ids_bw.shape[1] < 2 or not plain_decoder(model):
        return None
    prefix_bw, mask_bw = ids_bw[:, :-1], attn_bw[:, :-1]
    keys = list(zip(map(tuple, prefix_bw.tolist()), map(tuple, mask_bw.tolist())))
    first: dict[tuple, int] = {}  # distinct (prefix, mask) -> the first row that has it
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    if len(first) == len(keys):
        return None
    slot = {key: u for u, key in enumerate(first)}
    inverse = [slot[key] for key in keys]
    rows = torch.tensor(list(first.values()), device=ids_bw.device)
    ids_uw, mask_uw = prefix_bw[rows], mask_bw[rows]
    position_uw = (mask_uw.long().cumsum(-1) - 1).masked_fill(mask_uw == 0, 0)  # as generate numbers them
    cache = DynamicCache(config=config)
    # the decoder alone (LoRA layers included): only its keys and values are kept, no logits
    decoder(input_ids=ids_uw, attention_mask=mask_uw, position_ids=position_uw, use_cache=True,
            **{_cache_kwarg(decoder): cache})
    cache.batch_select_indices(torch.tensor(inverse, device=ids_bw.device))  # [U, ...] -> [B, ...]
    return cache


def pack(completions: list[Completion], rewards: list[float], group_ids: list[int], pad_id: int) -> Rollout:
    """Right-pad prompt + completion into a Rollout; a completion's ``mask`` zeroes its observation
    tokens in ``response_mask`` (no log-prob, advantage or loss there). ``rollout_logprobs`` is set when
    every completion carries the engine's log-probs."""
    rows = [c.prompt_ids + c.completion_ids for c in completions]
    width = max(map(len, rows))
    n = len(rows)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    resp = torch.zeros((n, width - 1), dtype=torch.float32)
    for i, (c, row) in enumerate(zip(completions, rows)):
        ids[i, : len(row)] = torch.tensor(row)
        attn[i, : len(row)] = 1
        p = len(c.prompt_ids)
        resp[i, p - 1 : len(row) - 1] = 1.0  # position t predicts token t+1
        if c.mask is not None:
            if len(c.mask) != len(c.completion_ids):
                raise ValueError(f"completion {i}: mask has {len(c.mask)} entries for {len(c.completion_ids)} tokens")
            resp[i, p - 1 : len(row) - 1] = torch.tensor(c.mask, dtype=torch.float32)
    engine_lp = None
    if completions and all(c.logprobs is not None for c in completions):
        engine_lp = torch.zeros((n, width - 1), dtype=torch.float32)
        for i, (c, row) in enumerate(zip(completions, rows)):
            if len(c.logprobs) != len(c.completion_ids):
                raise ValueError(f"completion {i}: {len(c.logprobs)} log-probs for {len(c.completion_ids)} tokens")
            p = len(c.prompt_ids)
            engine_lp[i, p - 1 : len(row) - 1] = torch.tensor(c.logprobs, dtype=torch.float32)
    return Rollout(ids, attn, resp, torch.tensor(rewards, dtype=torch.float32), torch.tensor(group_ids, dtype=torch.long),
                   engine_lp)
