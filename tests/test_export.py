"""`selfplay export`: a checkpointed role as a directory transformers (or peft) loads, answering
as the checkpointed role does; the run directory is only read."""
import json
from pathlib import Path

import pytest
import torch

from curriculum import cli, runstate
from curriculum.checkpoint import CheckpointManager
from curriculum.config import load_config, to_yaml
from curriculum.engine.distributed import SingleProcess
from curriculum.engine.policy import build_roles
from curriculum.engine.rollout import encode_prompts
from curriculum.engine.tiny import build_model, build_tokenizer
from curriculum.envs import make_env
from curriculum.rundir import RunDir, RunLock
from curriculum.warmup import load_role
from tests.cli_runner import in_process
from tests.conftest import TINY_OVERRIDES
from tests.hf_models import hf_answers, prompts, trainer_answers


def train(run: Path, cache: Path, *overrides: str) -> Path:
    """One round of `selfplay train`, in this process."""
    in_process("train", "configs/demo_cpu.yaml", *TINY_OVERRIDES, f"model.warmup.cache_dir={cache}",
               "model.warmup.steps=100", "train.rounds=1", *overrides, "--run-dir", run)
    return run


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, warmup_cache):
    return train(tmp_path_factory.mktemp("full") / "run", warmup_cache)


def export(capsys, *args) -> tuple[int, str, str]:
    rc = cli.main(["export", *map(str, args)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def tree(path: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``path`` with its size and modification time."""
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*")}


def checkpointed(run: Path, name: str, checkpoint: str):
    """Role ``name`` of ``checkpoint`` loaded the trainer's way (the checkpoint's config, its weights)."""
    path = run / "checkpoints" / checkpoint
    cfg = load_config(path / "config.yaml")
    return load_role(cfg, path, name, make_env(cfg.env.name, **cfg.env.kwargs), set())


def assert_loads_and_answers_as(out: Path, role, tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert not (out / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    texts = prompts()
    with torch.no_grad():  # the same next-token distributions, from the user's encoding and the trainer's
        for text in texts:
            ids = torch.tensor(encode_prompts(tokenizer, [text]))
            torch.testing.assert_close(model(**tok(text, return_tensors="pt")).logits, role.model(input_ids=ids).logits,
                                       rtol=1e-4, atol=1e-4)
    want = trainer_answers(role.model, tokenizer, texts)
    assert hf_answers(model, tok, texts) == want
    assert any(len(a) > 1 for a in want)  # more than eos: the comparison has something to compare


@pytest.mark.slow
def test_export_the_latest_solver_and_a_named_challenger(full_run, tmp_path, capsys):
    before = tree(full_run)
    with RunLock(RunDir(full_run)):  # a live run: export takes no lock, so it is not refused
        rc, out, err = export(capsys, full_run, "--out", tmp_path / "solver")
    assert rc == 0, err
    assert out.strip() == f"solver of round_0001 -> {tmp_path / 'solver'} (model)"
    assert_loads_and_answers_as(tmp_path / "solver", *checkpointed(full_run, "solver", "round_0001"))
    (tmp_path / "empty").mkdir()  # an empty directory is a fine --out
    rc, _, err = export(capsys, full_run, "--role", "challenger", "--checkpoint", "round_0000", "--out", tmp_path / "empty")
    assert rc == 0, err
    assert_loads_and_answers_as(tmp_path / "empty", *checkpointed(full_run, "challenger", "round_0000"))
    after = tree(full_run)
    before.pop(".lock"), after.pop(".lock")  # the trainer's, then the test's own
    assert after == before, "export wrote into the run directory"


@pytest.mark.slow
def test_export_refuses_in_one_line(full_run, tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    cases = [([tmp_path / "nope", "--out", tmp_path / "a"], f"{tmp_path / 'nope'} has no config.yaml"),
             ([full_run, "--checkpoint", "round_0042", "--out", tmp_path / "a"],
              "has no checkpoint 'round_0042'; it has round_0000, round_0001"),
             ([full_run, "--role", "referee", "--out", tmp_path / "a"], "--role 'referee': choose solver or challenger"),
             ([full_run, "--out", tmp_path / "full"], f"cannot write {tmp_path / 'full'}: exists and is not empty")]
    for args, expect in cases:
        rc, out, err = export(capsys, *args)
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert expect in err, err
    assert not (tmp_path / "a").exists() and (tmp_path / "full" / "x").read_text() == "mine"
    empty = tmp_path / "empty_run"
    empty.mkdir()
    (empty / "config.yaml").write_text((full_run / "config.yaml").read_text())
    rc, _, err = export(capsys, empty, "--out", tmp_path / "a")
    assert rc == 2 and "has no complete checkpoint yet" in err


@pytest.fixture
def lora_run(tmp_path):
    """A run directory holding one LoRA checkpoint whose adapters are far from their zero init (a
    one-round CLI run barely moves them), as the trainer writes it; and its roles in memory."""
    run = tmp_path / "lora_run"
    cfg = load_config(None, TINY_OVERRIDES + [f"run.dir={run}", "model.lora.enabled=true", "model.tiny.max_positions=64"])
    tok = build_tokenizer()
    torch.manual_seed(0)
    roles = build_roles(cfg, build_model(tok, 32, 1, 2, 64), torch.device("cpu"))
    with torch.no_grad():
        for role in roles.values():
            for p in role.params:
                p.add_(0.3 * torch.randn_like(p))
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(cfg))
    runstate.save(CheckpointManager(run / "checkpoints"), "round_0001", SingleProcess(), roles, tok, {"round": 1},
                  {"config.yaml": to_yaml(cfg)}, with_base=True)
    return run, roles, tok


def test_export_lora_merged_and_as_an_adapter(lora_run, tmp_path, capsys):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run, roles, tok = lora_run
    before = tree(run)
    for name in ("solver", "challenger"):
        role = roles[name].activate()
        rc, out, err = export(capsys, run, "--role", name, "--merge", "--out", tmp_path / name / "merged")
        assert rc == 0 and "LoRA merged into its base" in out, err
        assert_loads_and_answers_as(tmp_path / name / "merged", role, tok)

        adapter = tmp_path / name / "adapter"
        rc, out, err = export(capsys, run, "--role", name, "--out", adapter)
        assert rc == 0 and "peft adapter" in out, err
        config = json.loads((adapter / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == str(adapter / "base")
        texts = prompts()
        want = trainer_answers(role.model, tok, texts)
        model = AutoPeftModelForCausalLM.from_pretrained(adapter).eval()
        assert hf_answers(model, AutoTokenizer.from_pretrained(adapter), texts) == want
        base = AutoModelForCausalLM.from_pretrained(adapter / "base").eval()
        assert hf_answers(base, AutoTokenizer.from_pretrained(adapter), texts) != want  # the adapter matters
    assert tree(run) == before


@pytest.mark.slow
def test_export_a_trained_lora_run(tmp_path, capsys, warmup_cache):
    run = train(tmp_path / "run", warmup_cache, "model.lora.enabled=true")
    rc, out, err = export(capsys, run, "--merge", "--out", tmp_path / "merged")
    assert rc == 0, err
    assert_loads_and_answers_as(tmp_path / "merged", *checkpointed(run, "solver", "round_0001"))
