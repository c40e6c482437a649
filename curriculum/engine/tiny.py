"""The embedded default: a character tokenizer and a tiny Llama built in code.

Nothing is downloaded. The model is warmed up for a moment on the environment's
own generator (``warm_up``) so that both roles know the formats before RL.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import random
import shutil
import string
from pathlib import Path
from typing import Callable, Union

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerFast,
                          SmolLM3Config, SmolLM3ForCausalLM)

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
CHARS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]

# A warm-up completion: text, or (text, trained) segments (a tool's observation is not trained).
WarmupCompletion = Union[str, list[tuple[str, bool]]]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character, plus pad/bos/eos/unk.

    ``tokenizer(text)`` starts with <bos>, as every prompt the model is trained on does: a saved
    checkpoint's tokenizer then encodes prompts as the trainer did (the trainer encodes plain
    prompts with ``tokenizer(text)`` too: ``curriculum.engine.prompts.encode_prompt``).
    """
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r".|\n"), behavior="isolated")
    core.decoder = decoders.Fuse()
    bos = ("<bos>", vocab["<bos>"])
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[bos])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )


def build_model(tokenizer, hidden_size: int, layers: int, heads: int, max_positions: int,
                position: str = "rope", window: int = 8) -> PreTrainedModel:
    """A tiny Llama (``position="rope"``), or the same blocks on SmolLM3's architecture, a stock
    transformers class, so checkpoints load with ``AutoModelForCausalLM``:

    - ``"nope"``: no position embedding in any layer (positions are told only by the causal mask);
    - ``"local"``: layers alternate, starting with a local one: rotary embeddings over a sliding
      window of ``window`` tokens, then global attention without positions (Llama 4's interleaved
      scheme). Local layers only ever see distances below ``window``, global ones no distances at
      all, so neither meets a position it was not trained on, however long the sequence.
    """
    kwargs = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if position == "nope":
        return SmolLM3ForCausalLM(SmolLM3Config(**kwargs, no_rope_layers=[0] * layers, use_sliding_window=False))
    if position == "local":
        local = [i % 2 == 0 for i in range(layers)]  # no_rope_layers: 1 = this layer uses rope
        return SmolLM3ForCausalLM(SmolLM3Config(
            **kwargs, no_rope_layers=[int(x) for x in local], use_sliding_window=True, sliding_window=window,
            layer_types=["sliding_attention" if x else "full_attention" for x in local]))
    return LlamaForCausalLM(LlamaConfig(**kwargs))


def warmup_examples(env, rng: random.Random, n: int, solver_max_level: int, exclude: set[str],
                    challenger_fraction: float = 0.5, references: int = 0,
                    challenger_prompt: Callable[[list], str] | None = None,
                    level_decay: float = 1.0, tool_demo: Callable | None = None,
                    tool_fraction: float = 0.0) -> list[tuple[str, WarmupCompletion]]:
    """(prompt, completion) pairs: proposals (``challenger_fraction``) and solved tasks, none in ``exclude``.

    Challenger examples span every level, so the challenger can propose what the
    solver cannot yet do; solver examples stop at ``solver_max_level``. With
    ``references`` > 0, a proposal of level L follows ``challenger_prompt(refs)`` whose
    reference tasks lie at levels L-1..L+1: the challenger learns to propose near the
    level of its references, the handle that reference tasks from the pool then pull.
    Solver examples of level L come with weight ``level_decay ** (L - 1)``: below 1, the
    top level is seen less, so it is learned only in part. A typed environment's proposals
    follow the prompt of their task's type, with references of that type.
    With ``tool_demo``, ``tool_fraction`` of the solved tasks are written as one tool call instead:
    ``tool_demo(task)`` gives the prompt with the tools announced and the completion as (text,
    trained) segments, the tool's observation untrained (None: the task is written plainly).
    ``exclude`` holds the held-out (benchmark) tasks' texts: no proposal, reference or solved
    task of either role is one of them.
    """
    levels = list(range(1, solver_max_level + 1))
    weights = [level_decay ** (k - 1) for k in levels]
    out = []
    while len(out) < n:
        if rng.random() < challenger_fraction:
            level = rng.randint(1, env.num_levels)
            task = env.sample_task(level, rng)
            if task.text in exclude:  # a held-out proposal (code_triplets abduction: with its answer) is never taught
                continue
            typed = {"kind": task.kind} if getattr(task, "kind", "") else {}  # a typed environment's prompt per type
            prompt = env.challenger_prompt(**typed)
            if references:
                near = [min(env.num_levels, max(1, level + rng.randint(-1, 1))) for _ in range(references)]
                refs = [env.sample_task(k, rng, **typed) for k in near]
                if any(r.text in exclude for r in refs):
                    continue
                prompt = challenger_prompt(refs, **typed)
            out.append((prompt, env.format_proposal(task)))
        else:
            level = rng.randint(1, solver_max_level) if level_decay == 1.0 else rng.choices(levels, weights)[0]
            task = env.sample_task(level, rng)
            if task.text in exclude:
                continue
            demo = tool_demo(task) if tool_demo is not None and rng.random() < tool_fraction else None
            out.append(demo or (env.solver_prompt(task), env.format_answer(task)))
    return out


def segments(completion: WarmupCompletion) -> list[tuple[str, bool]]:
    return [(completion, True)] if isinstance(completion, str) else completion


def encode_pairs(tokenizer, pairs: list[tuple[str, WarmupCompletion]]):
    """Right-padded [B, T] ids, attention mask, and a loss mask on trained completion tokens (+EOS)."""
    rows, masks = [], []
    for prompt, completion in pairs:
        p = [tokenizer.bos_token_id] + tokenizer.encode(prompt, add_special_tokens=False)
        c, m = [], []
        for text, trained in segments(completion):
            ids = tokenizer.encode(text, add_special_tokens=False)
            c += ids
            m += [int(trained)] * len(ids)
        c.append(tokenizer.eos_token_id)
        rows.append(p + c)
        masks.append([0] * len(p) + m + [1])
    t = max(map(len, rows))
    ids = torch.full((len(rows), t), tokenizer.pad_token_id, dtype=torch.long)
    attn = torch.zeros((len(rows), t), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), t), dtype=torch.long)
    for i, (r, m) in enumerate(zip(rows, masks)):
        ids[i, : len(r)] = torch.tensor(r)
        attn[i, : len(r)] = 1
        loss_mask[i, : len(m)] = torch.tensor(m)
    return ids, attn, loss_mask


def length_buckets(lengths: list[int], slack: float = 1.5) -> list[list[int]]:
    """Indices grouped by length, shortest first; a group ends where a length passes ``slack`` x its shortest.

    Short solver examples then do not pad to the length of long reference-conditioned
    challenger prompts, which would make a batch several times more expensive.
    """
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if not groups or lengths[i] > slack * lengths[groups[-1][0]]:
            groups.append([])
        groups[-1].append(i)
    return groups


def batch_loss(model, tokenizer, pairs: list[tuple[str, WarmupCompletion]]) -> torch.Tensor:
    """Mean cross-entropy over the completion tokens of ``pairs``, backpropagated bucket by bucket.

    The same loss and gradient as one padded batch (each bucket's token sum is divided by the
    whole batch's token count); returns the loss, detached.
    """
    lengths = [len(tokenizer.encode(p + "".join(t for t, _ in segments(c)), add_special_tokens=False)) for p, c in pairs]
    buckets = [encode_pairs(tokenizer, [pairs[i] for i in b]) for b in length_buckets(lengths)]
    tokens = sum(int(mask[:, 1:].sum()) for _, _, mask in buckets)
    total = 0.0
    for ids, attn, mask in buckets:
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        labels = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100, reduction="sum") / tokens
        loss.backward()
        total += float(loss.detach())
    return torch.tensor(total)


def warm_up(model, tokenizer, env, *, steps: int, batch_size: int, lr: float, solver_max_level: int,
            seed: int, exclude: set[str], challenger_fraction: float = 0.5, references: int = 0,
            challenger_prompt: Callable[[list], str] | None = None, level_decay: float = 1.0,
            tool_demo: Callable | None = None, tool_fraction: float = 0.0, progress: bool = False) -> list[float]:
    """Supervised steps on generator examples; returns the loss curve."""
    from tqdm.auto import tqdm

    rng = random.Random(f"warmup:{seed}")
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50) * max(0.1, 1 - s / max(1, steps)))
    model.train()
    losses = []
    for _ in tqdm(range(steps), desc="warm-up", disable=not progress, leave=False):
        pairs = warmup_examples(env, rng, batch_size, solver_max_level, exclude, challenger_fraction, references,
                                challenger_prompt, level_decay, tool_demo, tool_fraction)
        loss = batch_loss(model, tokenizer, pairs)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def cache_key(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _weights_sha(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.glob("*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()


def load_or_build(cache_dir: str, payload: dict, build, progress: bool = False):
    """Build the warmed-up model with ``build()``, or load it from ``cache_dir/<hash of payload>``.

    An entry records the SHA-256 of its weights; one that does not match (flipped bytes, a
    torn copy) is rebuilt with a warning, never used. Processes that want the same entry at
    once (arms of a comparison, ranks on one host) take turns on a lock file: one builds,
    the others wait and load it.
    """
    if not cache_dir:
        return build()
    path = Path(cache_dir).expanduser() / f"tiny-{cache_key(payload)}"
    model = _load_cached(path)
    if model is not None:
        return model
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        model = _load_cached(path)  # another process may have built it while this one waited
        if model is not None:
            return model
        model = build()
        tmp = path.with_name(path.name + f".tmp{random.getrandbits(32)}")
        model.save_pretrained(tmp)
        (tmp / "done").write_text(json.dumps({**payload, "weights_sha256": _weights_sha(tmp)}))
        try:
            tmp.rename(path)
        except OSError:  # an entry written without the lock (an older version); theirs is the same model
            shutil.rmtree(tmp, ignore_errors=True)
    return model


def _load_cached(path: Path):
    """The entry's model if it is complete and its weights match their checksum; else None (and gone)."""
    if not (path / "done").exists():
        return None
    try:
        expected = json.loads((path / "done").read_text()).get("weights_sha256")
    except (OSError, ValueError, AttributeError):
        expected = None
    if expected is not None and expected == _weights_sha(path):
        return AutoModelForCausalLM.from_pretrained(path)
    log.warning("warm-up cache entry %s does not match its recorded checksum; rebuilding it", path)
    shutil.rmtree(path, ignore_errors=True)
    return None
