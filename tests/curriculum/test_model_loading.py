"""Loading what users have: a model directory or a cached model id (at a revision), a tokenizer
kept elsewhere, a dtype, an attention kernel, a model that ships its own code."""
import pytest
import torch

from curriculum.config import load_config
from curriculum.warmup import load_base
from curriculum.envs import make_env
from curriculum.errors import ConfigError
from tests.hf_models import cache_qwen, qwen_tokenizer, save_qwen


def base(overrides):
    cfg = load_config(None, ["run.device=cpu"] + overrides)
    return cfg, *load_base(cfg, make_env("arithmetic"), set(), progress=False)


def test_a_model_directory_with_its_tokenizer_elsewhere(tmp_path):
    save_qwen(tmp_path / "model", tokenizer=False)
    qwen_tokenizer().save_pretrained(tmp_path / "tok")
    # transformers would build an empty tokenizer here, without a word
    with pytest.raises(ConfigError, match="holds no tokenizer .*; name its directory in model.tokenizer_path"):
        load_config(None, [f"model.path={tmp_path / 'model'}"])
    with pytest.raises(ConfigError, match="model.tokenizer_path '.*model' holds no tokenizer"):
        load_config(None, [f"model.path={tmp_path / 'model'}", f"model.tokenizer_path={tmp_path / 'model'}"])
    cfg, model, tok = base([f"model.path={tmp_path / 'model'}", f"model.tokenizer_path={tmp_path / 'tok'}",
                            "model.dtype=bfloat16", "model.attn_implementation=eager"])
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.config._attn_implementation == "eager"
    assert tok("1+2=")["input_ids"] == qwen_tokenizer()("1+2=")["input_ids"]
    assert tok.bos_token_id is None  # Qwen's tokenizer has no bos, and the trainer lends it none


def test_the_attention_kernel_defaults_to_transformers_choice(tmp_path):
    save_qwen(tmp_path / "model")
    _, model, _ = base([f"model.path={tmp_path / 'model'}"])
    assert model.config._attn_implementation == "sdpa"
    assert next(model.parameters()).dtype == torch.float32


def test_a_model_id_from_the_local_cache_at_a_revision(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    commits = cache_qwen(tmp_path / "hub", "org/tiny-qwen", {"main": 1, "v2": 2})
    assert base(["model.path=org/tiny-qwen"])[1].config.num_hidden_layers == 1
    assert base(["model.path=org/tiny-qwen", "model.revision=v2"])[1].config.num_hidden_layers == 2
    assert base(["model.path=org/tiny-qwen", f"model.revision={commits['v2']}"])[1].config.num_hidden_layers == 2
    with pytest.raises(ConfigError, match="model.path 'org/tiny-qwen' is not a local directory, nor a model id in "
                                          "the local Hugging Face cache at revision 'v3'"):
        load_config(None, ["model.path=org/tiny-qwen", "model.revision=v3"])
    with pytest.raises(ConfigError, match="model.path 'org/other' is not a local directory"):
        load_config(None, ["model.path=org/other"])


CONFIG_CODE = """from transformers import Qwen2Config


class ShippedConfig(Qwen2Config):
    model_type = "shipped_qwen"
"""
MODEL_CODE = """from transformers import Qwen2ForCausalLM

from .configuration_shipped import ShippedConfig


class ShippedForCausalLM(Qwen2ForCausalLM):
    config_class = ShippedConfig
"""


def test_a_model_that_ships_its_own_code_needs_trust_remote_code(tmp_path):
    import json

    path = save_qwen(tmp_path / "shipped")
    (path / "configuration_shipped.py").write_text(CONFIG_CODE)
    (path / "modeling_shipped.py").write_text(MODEL_CODE)
    config = json.loads((path / "config.json").read_text())
    config.update(model_type="shipped_qwen", architectures=["ShippedForCausalLM"],
                  auto_map={"AutoConfig": "configuration_shipped.ShippedConfig",
                            "AutoModelForCausalLM": "modeling_shipped.ShippedForCausalLM"})
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="trust_remote_code"):
        base([f"model.path={path}"])
    _, model, _ = base([f"model.path={path}", "model.trust_remote_code=true"])
    assert type(model).__name__ == "ShippedForCausalLM"
