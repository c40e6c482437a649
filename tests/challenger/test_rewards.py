import pytest
import torch

from challenger.rewards import (
    FRONTIER_REWARDS,
    bleu_distance,
    challenger_rewards,
    learnability_reward,
    repetition_penalty,
    uncertainty_reward,
)


def test_uncertainty_reward_literal():
    p = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0])
    assert torch.allclose(uncertainty_reward(p), torch.tensor([0.0, 0.5, 1.0, 0.5, 0.0]))


def test_learnability_reward_literal():
    p = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0])
    assert torch.allclose(learnability_reward(p), torch.tensor([0.0, 0.75, 0.5, 0.25, 0.0]))


def test_registry_has_both():
    assert {"uncertainty", "learnability"} <= set(FRONTIER_REWARDS)


def test_bleu_distance_identical_and_disjoint():
    assert bleu_distance("3+4-5", "3+4-5") == 0.0
    assert bleu_distance("1+2+3+4", "9-8") > 0.9


def test_repetition_penalty_clusters():
    texts = ["3+4+5+6", "3+4+5+6", "3+4+5+7", "9*8"]
    rep = repetition_penalty(texts, threshold=0.5)
    # The three near-identical chains form one cluster of 3 out of 4; "9*8" stands alone.
    assert torch.allclose(rep, torch.tensor([0.75, 0.75, 0.75, 0.25]))


def test_repetition_penalty_all_distinct_and_empty():
    assert torch.allclose(repetition_penalty(["1+1", "7*9*3", "4-5-6-2"], 0.3), torch.full((3,), 1 / 3))
    assert repetition_penalty([]).numel() == 0


def test_challenger_rewards_gate_and_penalty():
    valid = torch.tensor([True, True, False, True])
    p = torch.tensor([0.5, 1.0, 0.0, 0.25])
    rep = torch.tensor([0.25, 0.25, 0.25, 0.5])
    reward, stats = challenger_rewards(valid, p, rep, frontier="uncertainty", repetition_coef=1.0, invalid_reward=-1.0)
    assert torch.allclose(reward, torch.tensor([0.75, -0.25, -1.0, 0.0]))
    assert stats["valid_fraction"] == 0.75
    assert stats["frontier_mean"] == pytest.approx((1.0 + 0.0 + 0.5) / 3)


def test_challenger_rewards_learnability_and_unknown():
    reward, _ = challenger_rewards(torch.tensor([True]), torch.tensor([0.25]), torch.tensor([0.0]), frontier="learnability")
    assert reward.item() == pytest.approx(0.75)
    with pytest.raises(ValueError, match="unknown frontier reward"):
        challenger_rewards(torch.tensor([True]), torch.tensor([0.5]), torch.tensor([0.0]), frontier="nope")
