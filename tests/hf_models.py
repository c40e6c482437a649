"""Models as users have them, built offline: a random-init Qwen2 (a real architecture) saved with a
byte-level BPE tokenizer in Qwen's format (no bos, <|endoftext|> ends and pads, a chat template);
and greedy answers as the trainer computes them and as a user of transformers does."""
from __future__ import annotations

import random
from pathlib import Path

import torch

from curriculum.engine.rollout import generate
from curriculum.envs import make_env

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def qwen_tokenizer():
    """A byte-level BPE (as Qwen2's) trained on arithmetic text; every string encodes, none is unknown."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    rng = random.Random(0)
    corpus = [f"Q: {rng.randint(0, 99)}{rng.choice('+-*')}{rng.randint(0, 99)}=\nA: {rng.randint(0, 999)}" for _ in range(500)]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   chat_template=CHAT_TEMPLATE)


def qwen_model(tokenizer, layers: int = 1, seed: int = 0, hidden: int = 32, heads: int = 2, kv_heads: int = 1,
               tied: bool = True):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=4096,
                         tie_word_embeddings=tied, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    return Qwen2ForCausalLM(config)


def save_qwen(path: Path, *, tokenizer: bool = True, layers: int = 1, seed: int = 0) -> Path:
    """A model directory as `save_pretrained` writes it; ``tokenizer=False`` leaves the tokenizer out."""
    tok = qwen_tokenizer()
    qwen_model(tok, layers, seed).save_pretrained(path)
    if tokenizer:
        tok.save_pretrained(path)
    return path


def cache_qwen(cache: Path, repo_id: str, revisions: dict[str, int]) -> dict[str, str]:
    """A local Hugging Face hub cache holding ``repo_id`` at ``revisions`` (name -> layers), as
    huggingface_hub lays one out (refs/NAME -> commit, snapshots/COMMIT/); returns name -> commit."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commits = {}
    for i, (name, layers) in enumerate(revisions.items()):
        commit = f"{i + 1:x}" * 40
        save_qwen(repo / "snapshots" / commit, layers=layers)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / name).write_text(commit)
        commits[name] = commit
    return commits


def prompts(n: int = 6) -> list[str]:
    env, rng = make_env("arithmetic"), random.Random(0)
    return [env.solver_prompt(env.sample_task(1 + i % 3, rng)) for i in range(n)] + [env.challenger_prompt()]


def trainer_answers(model, tok, texts: list[str], max_new_tokens: int = 8) -> list[list[int]]:
    return [c.completion_ids for c in generate(model, tok, texts, max_new_tokens=max_new_tokens, greedy=True)]


def hf_answers(model, tok, texts: list[str], max_new_tokens: int = 8) -> list[list[int]]:
    """Greedy answers the way a user writes them: ``tok(text)``, ``generate``, cut after eos."""
    out = []
    for text in texts:
        enc = tok(text, return_tensors="pt")
        seq = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)[0, enc.input_ids.shape[1]:].tolist()
        out.append(seq[: seq.index(tok.eos_token_id) + 1] if tok.eos_token_id in seq else seq)
    return out
