"""`selfplay model warmup`: a pretrained model's supervised warm-up on the generator, on a random-init
Qwen2 with a chat template (built offline): worked answers, no held-out problem taught, the answers'
loss lowered, a plain model directory built once and then found by its key, clear refusals."""
import json
import random
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from curriculum.config import load_config
from curriculum.envs import benchmark, held_out_texts, make_env
from curriculum.models import verify
from curriculum.sft import Settings, encode, examples, warm_up_pretrained
from solver.role import Solver
from tests.cli_runner import in_process
from tests.hf_models import save_qwen

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "math_cpu_smoke.yaml"


def test_worked_answers_solve_generated_problems_a_step_a_line():
    env = make_env("math", num_levels=4)
    rng = random.Random(0)
    for _ in range(300):
        task = env.sample_task(rng.randint(1, 4), rng)
        *steps, boxed = env.worked_answer(task).split("\n")
        assert boxed == env.format_answer(task) and len(steps) == task.level
        for line in steps:  # "a op n = b." with b right
            left, right = line.rstrip(".").split(" = ")
            a, op, n = left.split(" ")
            a, n = Fraction(a), Fraction(n)
            assert Fraction(right) == {"+": a + n, "-": a - n, "x": a * n, "/": a / n}[op]
    proposal = env.parse_proposal("<question>What is 2 + 2?</question>")
    assert env.worked_answer(proposal) == env.format_answer(proposal)  # not the generator's words: the answer alone


def test_examples_never_teach_a_held_out_problem():
    env = make_env("arithmetic", num_levels=1, max_digits=1)  # 200 distinct problems: collisions are likely
    exclude = held_out_texts(env, benchmark(env, 0, 30))
    pairs = examples(env, Solver(env), random.Random(0), 400, 1, exclude)
    texts = {prompt[:-1] for prompt, _ in pairs}  # the arithmetic prompt is the problem and "="
    assert len(pairs) == 400 and len(texts) > 100 and not texts & set(exclude)


def _config(tmp_path, *overrides):
    model = save_qwen(tmp_path / "qwen", layers=2)
    return load_config(SMOKE, [f"model.path={model}", "eval.per_level=4", *overrides])


def _answer_loss(model_dir: Path, cfg, pairs) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids, mask, labels = encode(tok, "chat", tok.convert_tokens_to_ids("<|im_end|>"), pairs)
    with torch.no_grad():
        return float(model(input_ids=ids, attention_mask=mask, labels=labels).loss)


def test_warmup_lowers_the_answers_loss_and_is_built_once(tmp_path, monkeypatch):
    cfg = _config(tmp_path)
    env = make_env("math", **cfg.env.kwargs)
    fresh = examples(env, Solver(env), random.Random(99), 16, 2, set())  # not the warm-up's own draws
    out = warm_up_pretrained(cfg, Settings(steps=100, batch_size=4, lr=3e-3), root=tmp_path / "warmups", progress=False)
    assert verify(out) is None and out.name.startswith("qwen-math-")
    record = json.loads((out / "selfplay-warmup.json").read_text())
    assert record["levels"] == [1, 2] and record["loss_last"] < record["loss_first"]
    # merged into a plain model: a random-init 2-layer one learns little in 100 steps (5.96 -> 5.56), none would stay
    assert _answer_loss(out, cfg, fresh) < 0.95 * _answer_loss(Path(cfg.model.path), cfg, fresh)

    # the same config and settings: found, not trained again; another setting: another directory
    import curriculum.engine.policy as policy

    monkeypatch.setattr(policy, "load_pretrained", lambda m: pytest.fail("trained again"))
    assert warm_up_pretrained(cfg, Settings(steps=100, batch_size=4, lr=3e-3), root=tmp_path / "warmups") == out
    monkeypatch.undo()
    other = warm_up_pretrained(cfg, Settings(steps=1, batch_size=2), root=tmp_path / "warmups", progress=False)
    assert other != out and verify(other) is None


def test_the_command_prints_the_directory_last_and_refuses_what_it_cannot_warm_up(tmp_path, monkeypatch):
    monkeypatch.setenv("SELFPLAY_MODELS", str(tmp_path / "models"))
    model = save_qwen(tmp_path / "qwen")
    proc = in_process("model", "warmup", SMOKE, f"model.path={model}", "eval.per_level=2", "log.progress=false",
                      "--steps", "1", "--batch-size", "2")
    out = Path(proc.stdout.strip().splitlines()[-1])
    assert out.parent == tmp_path / "models" / "warmups" and verify(out) is None
    for args, why in [((ROOT / "configs" / "demo_cpu.yaml",), "needs a pretrained model (model.path)"),
                      ((SMOKE, f"model.path={model}", "solver.tools=[python]"), "teaches answers without tool calls")]:
        proc = in_process("model", "warmup", *args, check=False)
        assert proc.returncode == 2 and why in proc.stderr and "Traceback" not in proc.stderr
