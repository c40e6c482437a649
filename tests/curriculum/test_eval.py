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
    assert set(a) == {"eval/accuracy", "eval/accuracy/tier_1", "eval/accuracy/tier_2", "eval/accuracy/tier_3"}
    assert all(0.0 <= v <= 1.0 for v in a.values())
    assert evaluate_solver(solver, tok, env, tasks, greedy, batch_size=7) == a
    sampled = EvalConfig(per_level=5, max_new_tokens=4, temperature=1.0, samples=3)
    b = evaluate_solver(solver, tok, env, tasks, sampled, batch_size=64)
    torch.rand(5)  # unrelated draws do not change the eval's random stream
    assert evaluate_solver(solver, tok, env, tasks, sampled, batch_size=64) == b


def test_eval_aggregates_per_tier_and_over_samples(setup, monkeypatch):
    import curriculum.evaluate as evaluate
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

    monkeypatch.setattr(evaluate, "generate", fake_generate)
    res = evaluate_solver(solver, tok, env, tasks, EvalConfig(temperature=1.0, samples=2), batch_size=8)
    assert res["eval/accuracy/tier_1"] == 1.0
    assert res["eval/accuracy/tier_2"] == 0.5
    assert res["eval/accuracy/tier_3"] == 0.0
    assert res["eval/accuracy"] == pytest.approx(0.5)
    assert calls[0]["greedy"] is False and calls[0]["seed"] == EvalConfig().seed


def test_sampled_eval_config_is_validated():
    with pytest.raises(ConfigError, match=r"eval.samples \(4\) > 1 needs eval.temperature > 0"):
        load_config(None, ["eval.samples=4"])
    assert load_config(None, ["eval.samples=4", "eval.temperature=0.7"]).eval.samples == 4
