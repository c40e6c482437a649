"""Prompts as the model reads them: a chat template's rendering, or plain text as its tokenizer encodes it.

An environment writes a prompt as plain text (``"7-2+9="``) or as chat messages
(``[{"role": "system", "content": ...}, {"role": "user", "content": ...}]``). ``prompt.style``
decides how the model sees it:

- ``chat``: ``tokenizer.apply_chat_template(messages, add_generation_prompt=True)``, exactly
  (a text prompt is one user message); the template decides every special token, the
  completion starts right after the generation prompt.
- ``plain``: the text as ``tokenizer(text)`` encodes it (the embedded tokenizer and Llama's
  put their bos in front, Qwen's nothing); messages are their contents joined by blank lines.
- ``auto``: ``chat`` when the tokenizer has a chat template, else ``plain``.
"""
from __future__ import annotations

from typing import Union

from curriculum.errors import ConfigError

Messages = list[dict[str, str]]


class TokenIds(tuple):
    """A prompt already encoded: its ids reach the model as they are (a multi-turn trajectory so far)."""


Prompt = Union[str, Messages, TokenIds]
STYLES = ("auto", "chat", "plain")


def resolve_style(style: str, tokenizer) -> str:
    """``chat`` or ``plain`` for this tokenizer; ``chat`` without a template is a config error."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if style == "auto":
        return "chat" if has_template else "plain"
    if style == "chat" and not has_template:
        raise ConfigError("prompt.style=chat but the tokenizer has no chat template (tokenizer_config.json "
                          "chat_template); use prompt.style=plain or auto")
    return style


def as_messages(prompt: Prompt) -> Messages:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def as_text(prompt: Prompt) -> str:
    """Plain text of a prompt: itself, or the messages' contents joined by blank lines, ending in one."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(m["content"] for m in prompt) + "\n\n"


def encode_prompt(tokenizer, prompt: Prompt, style: str) -> list[int]:
    """Token ids of one prompt in ``style`` (``chat`` or ``plain``, see the module docstring); ``TokenIds`` as they are."""
    if isinstance(prompt, TokenIds):
        return list(prompt)
    if style == "chat":
        ids = tokenizer.apply_chat_template(as_messages(prompt), add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # transformers 5 returns a BatchEncoding
    return list(tokenizer(as_text(prompt))["input_ids"])


def render_prompt(tokenizer, prompt: Prompt, style: str) -> str:
    """What the model reads, as text (special tokens kept): for logs and task records."""
    return tokenizer.decode(encode_prompt(tokenizer, prompt, style), skip_special_tokens=False)


def stop_ids(tokenizer, model=None, style: str = "plain") -> list[int]:
    """Tokens that end a completion: eos, the model's generation-config eos ids and, in chat style,
    the token the template writes after an assistant turn (``<|im_end|>``, ``<|eot_id|>``, ...).

    The tokenizer's eos comes first; for the embedded model it is the only one.
    """
    out = [tokenizer.eos_token_id]
    gen = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    out += gen if isinstance(gen, list) else [gen]
    if style == "chat":
        out.append(end_of_turn_id(tokenizer))
    return list(dict.fromkeys(t for t in out if t is not None))


def end_of_turn_id(tokenizer) -> int | None:
    """The special token a chat template puts right after an assistant's message, if any."""
    marker = "\u2063END\u2063"
    turns = [{"role": "user", "content": "x"}, {"role": "assistant", "content": marker}]
    try:
        text = tokenizer.apply_chat_template(turns, tokenize=False)
    except Exception:  # noqa: BLE001 - a template that cannot render this is one without a known end
        return None
    if marker not in text:
        return None
    ids = tokenizer.encode(text.split(marker, 1)[1], add_special_tokens=False)
    special = {i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items() if t.special}
    return ids[0] if ids and ids[0] in special else None
