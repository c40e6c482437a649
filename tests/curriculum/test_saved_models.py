"""A saved role is a model anyone loads with transformers / peft, and it behaves as in training:
its tokenizer encodes prompts as the trainer did, and greedy answers from the reloaded pair
are the trainer's."""
import random

import torch

from curriculum.config import load_config
from curriculum.engine.policy import build_roles, save_role
from curriculum.engine.rollout import encode_prompts, generate
from curriculum.engine.tiny import build_model, build_tokenizer
from curriculum.envs import make_env


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


def tiny_roles(overrides: list[str]):
    cfg = load_config(None, ["run.device=cpu"] + overrides)
    tok = build_tokenizer()
    torch.manual_seed(0)
    return cfg, tok, build_roles(cfg, build_model(tok, 32, 1, 2, 64), torch.device("cpu"))


def test_the_saved_tokenizer_encodes_prompts_as_the_trainer(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg, tok, roles = tiny_roles([])
    save_role(roles["solver"], tmp_path / "solver", tok)
    loaded_tok = AutoTokenizer.from_pretrained(tmp_path / "solver")
    texts = prompts()
    assert [loaded_tok(t)["input_ids"] for t in texts] == encode_prompts(tok, texts)
    assert loaded_tok("7-2+5=")["input_ids"][0] == tok.bos_token_id
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "solver").eval()
    want = trainer_answers(roles["solver"].model, tok, texts)
    assert hf_answers(loaded, loaded_tok, texts) == want
    assert any(len(a) > 1 for a in want)  # something was generated, not only eos


def test_the_trainer_feeds_the_same_ids_as_before():
    """The bos added by ``tok(text)`` is not added twice: the trainer's ids are bos + characters."""
    tok = build_tokenizer()
    assert encode_prompts(tok, ["1+2="]) == [[tok.bos_token_id] + [tok.convert_tokens_to_ids(c) for c in "1+2="]]
