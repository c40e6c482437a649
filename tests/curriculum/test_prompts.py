"""Prompts as the model reads them: a chat template's rendering exactly, or plain text as the model's
own tokenizer encodes it (no stray bos or eos in front for a model without a bos)."""
import pytest
import torch

from curriculum.engine.prompts import as_text, encode_prompt, end_of_turn_id, render_prompt, resolve_style, stop_ids
from curriculum.engine.rollout import encode_prompts, generate
from curriculum.engine.tiny import build_model, build_tokenizer
from curriculum.envs import make_env
from curriculum.errors import ConfigError
from tests.hf_models import qwen_model, qwen_tokenizer

MESSAGES = [{"role": "system", "content": "Reason step by step."}, {"role": "user", "content": "What is 1+2?"}]


def test_chat_prompts_are_exactly_the_templates_ids():
    tok = qwen_tokenizer()
    want = tok.apply_chat_template(MESSAGES, add_generation_prompt=True)["input_ids"]
    assert encode_prompt(tok, MESSAGES, "chat") == want
    assert render_prompt(tok, MESSAGES, "chat").endswith("<|im_start|>assistant\n")
    # a text prompt is one user message
    user = tok.apply_chat_template([{"role": "user", "content": "7-2="}], add_generation_prompt=True)["input_ids"]
    assert encode_prompts(tok, ["7-2="], "chat") == [user]


def test_plain_prompts_get_no_stray_prefix_on_a_model_without_bos():
    tok = qwen_tokenizer()
    assert tok.bos_token_id is None
    assert encode_prompt(tok, "7-2=", "plain") == tok("7-2=")["input_ids"] == tok.encode("7-2=", add_special_tokens=False)
    assert tok.eos_token_id not in encode_prompt(tok, "7-2=", "plain")
    assert as_text(MESSAGES) == "Reason step by step.\n\nWhat is 1+2?\n\n"


def test_the_embedded_model_reads_the_same_ids_as_before():
    tok = build_tokenizer()
    for text in ["Q:", "7-2+9=", "L:12\nL:"]:
        assert encode_prompt(tok, text, "plain") == [tok.bos_token_id] + tok.encode(text, add_special_tokens=False)
    assert resolve_style("auto", tok) == "plain"
    with pytest.raises(ConfigError, match="no chat template"):
        resolve_style("chat", tok)
    assert stop_ids(tok, build_model(tok, 32, 1, 2, 32)) == [tok.eos_token_id]


def test_chat_completions_stop_at_the_end_of_turn():
    tok = qwen_tokenizer()
    assert resolve_style("auto", tok) == "chat"
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert end_of_turn_id(tok) == im_end
    model = qwen_model(tok)
    assert stop_ids(tok, model, "chat") == [tok.eos_token_id, im_end]
    assert stop_ids(tok, model, "plain") == [tok.eos_token_id]
    bonus, block = torch.zeros(len(tok)), torch.zeros(len(tok))
    bonus[im_end] = 1e4  # the model says <|im_end|> on its third token, and no stop token before
    block[[im_end, tok.eos_token_id]] = -1e4
    calls = []

    def hook(module, args, logits):
        calls.append(1)
        return logits + (bonus if len(calls) % 3 == 0 else block)

    model.lm_head.register_forward_hook(hook)
    outs = generate(model, tok, [MESSAGES] * 2, max_new_tokens=6, greedy=True, style="chat")
    for c in outs:
        assert c.prompt_ids == encode_prompt(tok, MESSAGES, "chat")
        assert c.finished and len(c.completion_ids) == 3 and c.completion_ids[-1] == im_end
        assert "<|im_end|>" not in c.text


def test_environments_messages_render_in_both_styles():
    env = make_env("math")
    task = env.sample_task(2, __import__("random").Random(0))
    tok = qwen_tokenizer()
    chat = render_prompt(tok, env.solver_prompt(task), "chat")
    assert chat.startswith("<|im_start|>system\n") and task.text in chat and chat.endswith("<|im_start|>assistant\n")
    plain = render_prompt(tok, env.solver_prompt(task), "plain")
    assert "<|im_start|>" not in plain and task.text in plain
