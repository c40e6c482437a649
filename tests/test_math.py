"""The math environment in R-Zero's manner, on a random-init Qwen2 with a chat template (built
offline): chat prompts, majority pseudo-labels and their shares, label accuracy, pool tasks that
keep their label; and the environment's parsing and generator on literal inputs."""
import json
import random
import re
from pathlib import Path

import pytest

from curriculum.engine.prompts import encode_prompt, render_prompt
from curriculum.engine.rollout import Completion
from curriculum.envs import InvalidProposal, make_env
from solver.verifier import math_equal
from tests.cli_runner import in_process
from tests.hf_models import qwen_tokenizer, save_qwen
from tests.script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "math_cpu_smoke.yaml"


def test_proposals_are_questions_in_tags_without_an_answer():
    env = make_env("math")
    task = env.parse_proposal("Let me think.\n<question>\nWhat is  half of 3?\n</question>\n\\boxed{1.5}")
    assert (task.text, task.answer) == ("What is half of 3?", "")  # the answer outside the tags is dropped
    assert env.parse_proposal("<question>a</question> <question>What is 2+2?</question>").text == "What is 2+2?"
    for text, reason in [("What is 2+2?", "no_question"), ("<question> </question>", "empty"),
                         ("<question>2+2 = \\boxed{4}</question>", "answer_in_question"),
                         ("<question>" + "x" * 3000 + "</question>", "too_long:3000>2000")]:
        with pytest.raises(InvalidProposal, match=reason):
            env.parse_proposal(text)
    assert env.parse_proposal(env.format_proposal(task)) == task


def test_worked_examples_are_earlier_chat_turns_in_the_proposal_format():
    env = make_env("math", examples=2)
    messages = env.challenger_prompt()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    shots = [env.parse_proposal(m["content"]) for m in messages if m["role"] == "assistant"]
    assert len({t.text for t in shots}) == 2  # each shot parses as a valid, distinct proposal
    rendered = render_prompt(qwen_tokenizer(), messages, "chat")
    assert rendered.count("</question>") == 3 and rendered.rstrip().endswith("assistant")
    assert "expert competition-math" in make_env("math").challenger_prompt()[0]["content"]  # default: R-Zero's
    with pytest.raises(ValueError, match="examples <= 4"):
        make_env("math", examples=5)


def test_generated_word_problems_have_exact_answers():
    env = make_env("math", num_levels=4)
    rng = random.Random(0)
    for level in range(1, 5):
        for _ in range(20):
            task = env.sample_task(level, rng)
            assert task.level == level and task.text.count("Then ") == level and task.answer
            if level == 1:  # one step and no split: a whole number, what a small model can check
                assert "splits" not in task.text and "/" not in task.answer
            assert env.score(task, f"Reasoning... so the answer is \\boxed{{{task.answer}}}.") == 1.0
            assert env.score(task, f"the answer is {task.answer}") == 0.0  # unboxed
    task = env.parse_proposal("<question>Half of one?</question>")
    assert env.score(task, "\\boxed{1/2}") == 0.0  # no reference answer: graded against the majority
    assert env.score(task.__class__(task.text, "0.5", 1), "\\boxed{\\frac{1}{2}}") == 1.0


def test_the_embedded_model_is_refused():
    from curriculum.config import load_config
    from curriculum.errors import ConfigError

    with pytest.raises(ConfigError, match="env.name=math needs a pretrained model"):
        load_config(None, ["env.name=math"])
    with pytest.raises(ConfigError, match="prompt.style=chat needs a model.path model"):
        load_config(None, ["prompt.style=chat"])


def fake_generate(answers):
    """A stand-in for the model: the challenger always asks one question; the solver gives ``answers`` in turn."""
    queue = list(answers)

    def generate(model, tokenizer, prompts, *, style="plain", **kw):
        out = []
        for p in prompts:
            asks = "problem setter" in p[0]["content"]
            text = "<question>What is half of one?</question>" if asks else queue.pop(0) if queue else "\\boxed{2}"
            ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
            out.append(Completion(encode_prompt(tokenizer, p, style), ids, text, True))
        return out

    return generate


def test_pool_tasks_carry_the_majority_label_and_its_share(tmp_path, monkeypatch):
    from curriculum.config import load_config
    from curriculum.trainer import SelfPlayTrainer

    model = save_qwen(tmp_path / "model")
    cfg = load_config(SMOKE, [f"model.path={model}", f"run.dir={tmp_path / 'run'}", "log.progress=false",
                              "curriculum.probe_samples=4", "curriculum.label_check_rate=0",
                              "curriculum.fill_max_batches=1"])  # one fill batch: its probe's label and share
    # four probe answers: 1/2, 0.5 and \frac{1}{2} are one answer (3 of 4), 3 another
    monkeypatch.setattr("curriculum.engine.rollout.generate",
                        fake_generate(["\\boxed{1/2}", "so \\boxed{0.5}", "\\boxed{3}", "\\boxed{\\frac{1}{2}}"]))
    trainer = SelfPlayTrainer(cfg)
    try:
        trainer.fill_pool(1)
        [entry] = trainer.pool.entries.values()
        assert (entry.task.text, entry.task.answer, entry.solve_rate) == ("What is half of one?", "1/2", 0.75)
        recs = [r for r in trainer.task_log if r["phase"] == "fill"]
        assert all(r["label"] == "1/2" and r["solve_rate"] == 0.75 and r["accepted"] for r in recs)
        assert recs[0]["solver_prompt"] == render_prompt(trainer.tokenizer, trainer.env.solver_prompt(entry.task), "chat")
        # the solver is now graded against the label, not against a new majority (3)
        monkeypatch.setattr("curriculum.engine.rollout.generate",
                            fake_generate(["\\boxed{3}", "\\boxed{0.5}", "\\boxed{3}", "\\boxed{3}"]))
        tasks, attempts, _ = trainer.solver_batch(1, 0)
        assert {t.answer for t in tasks} == {"1/2"}
        assert [a.score for a in attempts] == [0.0, 1.0]  # the pool's one task, once: G=2 answers, no repeat
    finally:
        trainer.close()


def selfplay(*args):
    return in_process(*args)


@pytest.mark.slow
def test_a_math_round_on_a_random_chat_model(tmp_path):
    """The CPU smoke config for one round: chat-templated prompts in the task records, majority labels and
    shares of the hidden labelled tasks, curriculum/label_accuracy logged; the random model's garbage
    (no question, no box) crashes nothing."""
    model, run = save_qwen(tmp_path / "model"), tmp_path / "run"
    selfplay("train", SMOKE, f"model.path={model}", f"run.dir={run}", "log.progress=false",
             "curriculum.fill_max_batches=1")  # the random model fills no pool: one fill batch keeps the counts below
    tok, env = qwen_tokenizer(), make_env("math", num_levels=2)
    recs = [json.loads(line) for line in (run / "tasks" / "round_0001.jsonl").read_text().splitlines()]
    proposals = [r for r in recs if r["phase"] in ("challenger_step_0", "fill")]
    assert len(proposals) == 2 * 2 + 4
    chat = tok.decode(tok.apply_chat_template(env.challenger_prompt(), add_generation_prompt=True)["input_ids"])
    assert chat.startswith("<|im_start|>system\nYou are an expert") and chat.endswith("<|im_start|>assistant\n")
    assert all(r["prompt"] == chat for r in proposals)
    checks = [r for r in recs if r["phase"].endswith("_label_check")]
    assert len(checks) == 2 + 2  # label_check_rate 0.5 of the 4 proposals of each probe
    for c in checks:
        assert c["task"]["answer"] and 0.0 <= c["solve_rate"] <= 1.0
        assert c["label_correct"] == (c["label"] is not None and math_equal(c["label"], c["task"]["answer"]))
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    [fill] = [r for r in lines if r["phase"] == "fill_pool"]
    assert fill["curriculum/label_checks"] == 4 and 0.0 <= fill["curriculum/label_accuracy"] <= 1.0
    assert "Pseudo-label accuracy" in (run / "dashboard.html").read_text()
    assert json.loads(selfplay("eval", run).stdout)["round"] == 1  # the checkpoint's solver, chat prompts again


def test_math_probe_families_have_exact_one_step_answers():
    """scripts/math_probe.py's problem families: one step each, worded as the environment words it, answered exactly."""
    probe = load_script("math_probe")
    env = make_env("math", num_levels=2)
    rng = random.Random(0)
    for name, make in probe.FAMILIES.items():
        for _ in range(30):
            task = make(rng)
            numbers = [int(x) for x in re.findall(r"[0-9]+", task.text)]
            assert task.text.count("Then ") == 1 and len(numbers) == 2, (name, task.text)
            a, b = numbers
            if "more" in task.text:
                assert int(task.answer) == a + b
            elif "uses" in task.text:
                assert int(task.answer) == a - b >= 0
            else:
                assert int(task.answer) == a * b
            assert env.score(task, f"\\boxed{{{task.answer}}}") == 1.0
