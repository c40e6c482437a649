"""A saved role is a model anyone loads with transformers / peft, and it behaves as in training:
its tokenizer encodes prompts as the trainer did, and greedy answers from the reloaded pair
are the trainer's."""
import json

import pytest
import torch

from curriculum import runstate
from curriculum.checkpoint import CheckpointManager
from curriculum.config import load_config
from curriculum.engine.distributed import SingleProcess
from curriculum.engine.policy import build_roles, load_role_weights, save_role
from curriculum.engine.rollout import encode_prompts
from curriculum.engine.tiny import build_model, build_tokenizer
from tests.hf_models import hf_answers, prompts, trainer_answers


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


def train_adapters(roles):
    """Move every adapter off its zero init, so a load that dropped it would show."""
    with torch.no_grad():
        for role in roles.values():
            for p in role.params:
                p.add_(0.3 * torch.randn_like(p))


@pytest.mark.parametrize("share_base", [True, False])
def test_a_lora_checkpoint_loads_with_peft(tmp_path, share_base):
    from peft import AutoPeftModelForCausalLM, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg, tok, roles = tiny_roles(["model.lora.enabled=true", f"model.share_base={str(share_base).lower()}"])
    train_adapters(roles)
    path = runstate.save(CheckpointManager(tmp_path / "run" / "checkpoints"), "round_0001", SingleProcess(), roles, tok,
                         {"round": 1}, {}, with_base=True)
    texts = prompts()
    for name, role in roles.items():
        role_dir = path / name
        assert (role_dir / "adapter_config.json").is_file() and not (role_dir / name).exists()
        config = json.loads((role_dir / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == str(path.resolve() / "base")
        want = trainer_answers(role.activate().model, tok, texts)
        auto = AutoPeftModelForCausalLM.from_pretrained(role_dir).eval()
        loaded_tok = AutoTokenizer.from_pretrained(role_dir)
        assert hf_answers(auto, loaded_tok, texts) == want, name
        onto = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(path / "base"), role_dir).eval()
        assert hf_answers(onto, loaded_tok, texts) == want, name
        without = AutoModelForCausalLM.from_pretrained(path / "base").eval()
        assert hf_answers(without, loaded_tok, texts) != want, "the adapters change nothing: the test cannot tell"
    assert CheckpointManager(path.parent).verify(path) is None


def test_lora_weights_load_from_the_old_nested_layout(tmp_path):
    """Checkpoints of earlier versions kept a role's adapter in ROLE_DIR/<adapter>/."""
    cfg, tok, roles = tiny_roles(["model.lora.enabled=true"])
    train_adapters(roles)
    sv = roles["solver"]
    sv.model.save_pretrained(tmp_path / "solver", selected_adapters=["solver"])
    assert (tmp_path / "solver" / "solver" / "adapter_model.safetensors").is_file()
    trained = [p.detach().clone() for p in sv.params]
    for p in sv.params:
        torch.nn.init.zeros_(p)
    load_role_weights(sv, tmp_path / "solver")
    assert all(torch.equal(p, q) for p, q in zip(sv.params, trained))
