import pytest
import torch

from curriculum.config import ConfigError, EvalConfig, load_config
from curriculum.envs import benchmark, make_env
from curriculum.engine.policy import build_roles
from curriculum.engine.tiny import build_model, build_tokenizer
from curriculum.evaluate import evaluate_solver


@pytest.fixture(scope="module")
def setup():
    cfg = load_config(None, ["run.device=cpu"])
    tok = build_tokenizer()
    torch.manual_seed(0)
    roles = build_roles(cfg, build_model(tok, 32, 1, 2, 32), torch.device("cpu"))
    env = make_env("arithmetic", num_levels=3)
    return roles["solver"], tok, env, benchmark(env, 3, 5)


def test_greedy_and_sampled_eval_are_reproducible(setup):
    solver, tok, env, tasks = setup
    greedy = EvalConfig(per_level=5, max_new_tokens=4)
    a = evaluate_solver(solver, tok, env, tasks, greedy, batch_size=64)
    assert set(a) == {"eval/accuracy", "eval/accuracy/tier_1", "eval/accuracy/tier_2", "eval/accuracy/tier_3",
                      "eval/frontier_level"}
    assert all(0.0 <= v <= 1.0 for k, v in a.items() if k != "eval/frontier_level")
    assert evaluate_solver(solver, tok, env, tasks, greedy, batch_size=7) == a
    sampled = EvalConfig(per_level=5, max_new_tokens=4, greedy=False, temperature=1.0, samples=3)
    b = evaluate_solver(solver, tok, env, tasks, sampled, batch_size=64)
    assert {k for k in b if k.startswith("eval/mean_at_k")} == {"eval/mean_at_k"} | {f"eval/mean_at_k/tier_{k}" for k in (1, 2, 3)}
    assert "eval/accuracy" not in b
    torch.rand(5)  # unrelated draws do not change the eval's random stream
    assert evaluate_solver(solver, tok, env, tasks, sampled, batch_size=64) == b
    both = evaluate_solver(solver, tok, env, tasks, EvalConfig(per_level=5, max_new_tokens=4, temperature=1.0, samples=3),
                           batch_size=64)
    assert both == {**a, **b}  # greedy and mean@k from the same streams as alone


def test_eval_aggregates_per_tier_and_over_samples(setup, monkeypatch):
    from curriculum.engine.rollout import Completion

    solver, tok, env, tasks = setup
    answers = {env.solver_prompt(t): t for t in tasks}
    calls = []

    def fake_generate(model, tokenizer, prompts, **kw):
        calls.append(kw)
        out = []
        for i, p in enumerate(prompts):
            t = answers[p]
            # Level 1 always right; level 2 right on every other sample; level 3 never; one unfinished.
            right = t.level == 1 or (t.level == 2 and i % 2 == 0)
            out.append(Completion([], [], t.answer if right else "x", finished=t.level != 3))
        return out

    monkeypatch.setattr("curriculum.engine.rollout.generate", fake_generate)  # what the default engine samples with
    res = evaluate_solver(solver, tok, env, tasks, EvalConfig(greedy=False, temperature=1.0, samples=2), batch_size=8)
    assert res["eval/mean_at_k/tier_1"] == 1.0
    assert res["eval/mean_at_k/tier_2"] == 0.5
    assert res["eval/mean_at_k/tier_3"] == 0.0
    assert res["eval/mean_at_k"] == pytest.approx(0.5)
    assert res["eval/frontier_level"] == 2  # the highest level with mean@k >= 0.5
    assert calls[0]["greedy"] is False and calls[0]["seed"] == EvalConfig().seed


@pytest.mark.parametrize("tiers,want", [({1: 0.9, 2: 0.6, 3: 0.1}, 2), ({1: 0.4, 2: 0.2}, 0), ({1: 0.2, 2: 0.5, 3: 0.0}, 2),
                                        ({1: 1.0, 2: 1.0, 3: 0.5}, 3)])
def test_frontier_level_is_the_highest_level_at_half(tiers, want):
    from curriculum.evaluate import frontier_level

    report = {"eval/mean_at_k": 0.3, **{f"eval/mean_at_k/tier_{k}": v for k, v in tiers.items()}}
    assert frontier_level(report, "eval/mean_at_k") == want


def test_sampled_eval_config_is_validated():
    with pytest.raises(ConfigError, match=r"eval.samples \(4\) > 0 needs eval.temperature > 0"):
        load_config(None, ["eval.samples=4", "eval.temperature=0"])
    with pytest.raises(ConfigError, match="leave nothing to evaluate"):
        load_config(None, ["eval.greedy=false"])
    assert load_config(None, ["eval.samples=4", "eval.temperature=0.7"]).eval.samples == 4


def test_accuracy_is_reported_per_task_type_too():
    from curriculum.envs import Task
    from curriculum.evaluate import accuracy_report

    tasks = [Task("a", "1", 1, "deduction"), Task("b", "1", 1, "induction"), Task("c", "1", 2, "deduction")]
    report = accuracy_report(tasks, [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    assert report["eval/accuracy"] == 0.5 and report["eval/accuracy/tier_2"] == 1.0
    assert report["eval/accuracy/type_deduction"] == 0.75 and report["eval/accuracy/type_induction"] == 0.0
    assert not any("type_" in k for k in accuracy_report([Task("a", "1", 1)], [[1.0]]))  # untyped: none
