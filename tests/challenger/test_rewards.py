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


def test_bleu_on_words_and_symbols_by_hand():
    # "3+4" -> 3 + 4 vs 3 + 5: unigrams 2/3, bigrams 1/2, trigrams 0/1 floored to 0.1/1, no 4-grams
    # (effective order 3): BLEU = (2/3 * 1/2 * 1/10) ** (1/3). Character BLEU put them at 0.45, one cluster.
    assert bleu_distance("3+4", "3+5") == pytest.approx(1 - (1 / 30) ** (1 / 3), abs=1e-12)
    assert bleu_distance("3+4", "3+5") > 0.5
    # Five words, four shared in order: (4/5 * 3/4 * 2/3 * 1/2) ** (1/4).
    assert bleu_distance("what is two plus two", "what is two plus three") == pytest.approx(1 - 0.2 ** 0.25, abs=1e-12)


def test_bleu_matrix_matches_sacrebleu_sentence_bleu():
    import random

    from sacrebleu.metrics.bleu import BLEU

    from challenger.rewards import bleu_scores, bleu_tokens

    ref = BLEU(tokenize="none", smooth_method="floor", smooth_value=0.1, effective_order=True)
    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "3", "+", "4", "x", "=", "("]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(25)] + ["a a a a a", "", "3+4"]
    scores = bleu_scores(texts)
    for i, a in enumerate(texts):
        for j, b in enumerate(texts):
            want = ref.sentence_score(" ".join(bleu_tokens(a)), [" ".join(bleu_tokens(b))]).score / 100
            assert scores[i, j] == pytest.approx(want, abs=1e-12), (a, b)


def test_repetition_penalty_literal_batch():
    rep = repetition_penalty(["3+4", "3+5", "3+4", "what is two plus two", "what is two plus three"], 0.5)
    # The two 3+4 are one cluster (2/5); 3+5 stands alone (1/5); the two questions are near-duplicates (2/5).
    assert torch.allclose(rep, torch.tensor([0.4, 0.2, 0.4, 0.4, 0.4]))


def test_invalid_proposals_join_no_cluster():
    texts = ["", "", "3+4", "3+4", "garbage"]
    rep = repetition_penalty(texts, 0.5, valid=[False, False, True, True, False])
    assert torch.allclose(rep, torch.tensor([0.0, 0.0, 0.4, 0.4, 0.0]))  # 2 of a batch of 5


def test_average_linkage_not_single(monkeypatch):
    import numpy as np

    import challenger.rewards as rewards

    # a-b (0.3) and b-c (0.4) are close, a-c far (0.9). Single linkage would chain all three into one
    # cluster; average linkage merges a, b first, then {a, b} with c only at (0.9 + 0.4) / 2 = 0.65 > 0.5.
    dist = {("a", "b"): 0.3, ("b", "c"): 0.4, ("a", "c"): 0.9}

    def fake_scores(texts):
        s = np.ones((len(texts), len(texts)))
        for i, x in enumerate(texts):
            for j, y in enumerate(texts):
                if x != y:
                    s[i, j] = 1 - dist.get((x, y), dist.get((y, x)))
        return s

    monkeypatch.setattr(rewards, "bleu_scores", fake_scores)
    rep = rewards.repetition_penalty(["a", "b", "c"], 0.5)
    assert rep.tolist() == pytest.approx([2 / 3, 2 / 3, 1 / 3])


def test_absolute_zero_reward_tiers_tell_format_errors_from_failing_programs():
    from challenger.proposals import parse_proposals
    from challenger.role import Challenger, Proposal
    from curriculum.config import load_config
    from curriculum.envs import make_env

    env = make_env("code_output")
    texts = ["print(", "x = 1", "print(1 // 0)", "print(2 + 3)"]  # syntax, no print, runs into an error, fine
    parsed = parse_proposals(texts, env.parse_proposal)
    assert [p.reason for p in parsed] == ["syntax", "no_print", "exec_error", ""]
    from types import SimpleNamespace

    proposals = [Proposal(SimpleNamespace(text=t, finished=True), p, solve_rate=0.5 if p.valid else None)
                 for t, p in zip(texts, parsed)]
    cfg = load_config(None, ["reward.tiers=true"])
    tiered, _ = Challenger(env, invalid_reward=cfg.reward.invalid, wrong_reward=cfg.reward.failing).rewards(proposals)
    assert tiered[:3].tolist() == [-1.0, -1.0, -0.5]
    flat, _ = Challenger(env, invalid_reward=load_config(None, []).reward.invalid).rewards(proposals)
    assert flat[:3].tolist() == [-1.0, -1.0, -1.0] and flat[3] == tiered[3]  # off by default: one value
