"""scripts/compare_curriculum.py's arithmetic on hand-built curves: interpolation at a token budget and
the pairing of each arm with self-play at the lower of their budgets."""
import pytest

from tests.script_loader import load_script

cc = load_script("compare_curriculum")


def points(tokens, values):
    return [{"round": r, "tokens": t, "eval/mean_at_k": v, "eval/frontier_level": 3} for r, (t, v) in enumerate(zip(tokens, values))]


def test_at_tokens_interpolates_between_evaluated_rounds_and_refuses_outside():
    p = points([0, 100, 300], [0.1, 0.2, 0.6])
    assert cc.at_tokens(p, 200)["eval/mean_at_k"] == pytest.approx(0.4)
    assert cc.at_tokens(p, 100)["eval/mean_at_k"] == pytest.approx(0.2)
    with pytest.raises(ValueError):
        cc.at_tokens(p, 301)


def test_each_arm_meets_self_play_at_the_lower_budget():
    # Seed 0: uniform is cheaper (budget 100), so self-play is read at 100 tokens (its value 0.3).
    # Seed 1: uniform is costlier (budget 400 vs self-play's 200), so uniform is read at 200 (0.25).
    curves = {("uniform", 0): points([0, 50, 100], [0.1, 0.1, 0.2]), ("selfplay", 0): points([0, 200, 400], [0.1, 0.5, 0.9]),
              ("uniform", 1): points([0, 200, 400], [0.2, 0.25, 0.3]), ("selfplay", 1): points([0, 100, 200], [0.2, 0.4, 0.5])}
    results = {m: {s: {"tokens": curves[m, s][-1]["tokens"]} for s in (0, 1)} for m in ("uniform", "selfplay")}
    rows = cc.paired_at_lower_budget(curves, results, ["uniform", "selfplay"], [0, 1], rounds=2)
    row = next(r for r in rows if r.startswith("| eval/mean_at_k |")).split(" | ")
    # uniform: mean(0.2, 0.25); self-play: mean(0.3, 0.5); difference: mean(0.1, 0.25)
    assert row[1].startswith("0.225 ±") and row[2].startswith("0.400 ±") and row[3].startswith("0.175 ±")
    tokens = next(r for r in rows if r.startswith("| tokens |"))
    assert "150.000" in tokens  # mean of the budgets 100 and 200
