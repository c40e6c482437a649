"""scripts/learnability.py: where greedy answers first go wrong, and the supervised bound's updates."""
from pathlib import Path
from types import SimpleNamespace

from curriculum.config import load_config
from curriculum.envs.ladder import Ladder
from tests.script_loader import load_script

lb = load_script("learnability")


def attempt(text, score):
    return SimpleNamespace(completion=SimpleNamespace(text=text), score=score)


def test_first_errors_counts_the_character_where_each_wrong_answer_leaves_the_reference():
    env = Ladder(4)
    four = env.parse_proposal("73941")  # 1, 1+4, 5+9, 4+3, 7+7 (mod 10)
    three = env.parse_proposal("7394")  # answer "363"
    assert four.answer == "5474" and three.answer == "363"
    tasks = [four, four, four, three, three]
    attempts = [attempt("5474", 1.0), attempt("5484", 0.0), attempt(" 5471 ", 0.0), attempt("36", 0.0), attempt("963", 0.0)]
    # 5484 leaves at character 2, 5471 at 3; "36" is one short (stops at 2); 963 leaves at 0; solved answers are not counted
    assert lb.first_errors(tasks, attempts, env) == {3: {0: 1, 2: 1}, 4: {2: 1, 3: 1}}


def test_the_bound_trains_on_reference_answers_and_reports_each_evaluation(tiny_overrides):
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "ladder_cpu.yaml",
                      [*tiny_overrides, "env.name=ladder", "env.kwargs={num_levels: 2}", "model.tiny.max_positions=64",
                       "solver.optim.lr=0.01", "eval.per_level=6", "eval.samples=2", "curriculum.max_level=0"])
    lines = []
    result = lb.check_seed(cfg, steps=12, every=6, log=lines.append)
    assert [p["step"] for p in result["curve"]] == [0, 6, 12] and len(lines) == 3
    assert result["curve"][2]["loss"] < result["curve"][1]["loss"]  # the updates fit the answers
    assert set(result["first_error"]) <= {1, 2}
    table = lb.summary([result, result])
    assert table[2].startswith("| eval/mean_at_k |") and table[2].endswith("| 0.000 ± 0.000 |")  # identical seeds: no gain
    assert lb.summary([result])[2].endswith("| 0.000 ± nan |")  # one seed: no interval
