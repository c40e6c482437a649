"""model.tiny.position: nope builds the tiny model without position embeddings; it runs past any trained
length and saves and loads as a stock transformers model."""
import pytest
import torch
from transformers import AutoModelForCausalLM

from curriculum.config import load_config
from curriculum.engine.tiny import build_model, build_tokenizer
from curriculum.errors import ConfigError


def outputs(model, ids, stride: int):
    """Logits with positions 0, stride, 2 x stride, ... (RoPE is relative: a mere shift would change nothing)."""
    return model(input_ids=ids, position_ids=torch.arange(ids.shape[1])[None] * stride).logits


def test_nope_ignores_positions_and_rope_does_not():
    tok = build_tokenizer()
    ids = torch.tensor([tok.encode("1234=56", add_special_tokens=True)])
    nope, rope = build_model(tok, 32, 2, 2, 16, "nope").eval(), build_model(tok, 32, 2, 2, 16, "rope").eval()
    with torch.no_grad():
        assert torch.allclose(outputs(nope, ids, 1), outputs(nope, ids, 7), atol=1e-6)  # positions carry nothing
        assert not torch.allclose(outputs(rope, ids, 1), outputs(rope, ids, 7), atol=1e-3)


def test_nope_runs_past_max_positions_and_round_trips(tmp_path):
    tok = build_tokenizer()
    model = build_model(tok, 32, 2, 2, 16, "nope").eval()
    long = torch.tensor([tok.encode("7" * 60, add_special_tokens=True)])  # ~4x max_positions
    with torch.no_grad():
        logits = model(input_ids=long).logits
        out = model.generate(long[:, :20], max_new_tokens=30, do_sample=False, pad_token_id=tok.pad_token_id)
    assert torch.isfinite(logits).all() and out.shape[1] > 20
    model.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(again) is type(model)
    with torch.no_grad():
        assert torch.equal(again(input_ids=long).logits, logits)


def test_unknown_position_scheme_is_refused():
    with pytest.raises(ConfigError, match="model.tiny.position 'alibi'; choose rope or nope"):
        load_config("configs/demo_cpu.yaml", ["model.tiny.position=alibi"])


def test_local_window_runs_past_max_positions_and_its_cache_matches_a_full_forward():
    """position="local" (scripts/length_probe.py): sliding-window RoPE layers between global NoPE ones."""
    tok = build_tokenizer()
    torch.manual_seed(0)
    model = build_model(tok, 32, 2, 2, 16, "local", window=4).eval()
    assert model.config.layer_types == ["sliding_attention", "full_attention"]
    prompt = torch.tensor([tok.encode("31415926535897932384", add_special_tokens=True)])  # past max_positions
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id,
                             eos_token_id=None)
        full = model(input_ids=out[:, :-1]).logits.argmax(-1)
    new = out[:, prompt.shape[1]:]
    assert new.shape[1] == 12
    assert torch.equal(full[:, prompt.shape[1] - 1:], new)  # the windowed cache sees what a full pass sees
