"""The challenger role on literal inputs: prompts with references, proposing through a handed sampler, rewards."""
from dataclasses import dataclass

import pytest
import torch

from challenger.role import Challenger, proposal_prompt
from curriculum.envs import make_env


@dataclass
class Comp:
    text: str
    finished: bool = True


def test_proposal_prompt_is_few_shot():
    assert proposal_prompt("Q:", []) == "Q:"
    assert proposal_prompt("Q:", ["3+4", "7-2+1"]) == "Q:3+4\nQ:7-2+1\nQ:"


def test_prompt_renders_reference_tasks_through_the_environment():
    env = make_env("arithmetic", num_levels=4)
    ch = Challenger(env)
    assert ch.prompt() == "Q:"
    assert ch.prompt([env.parse_proposal("1+2"), env.parse_proposal("3-4+5")]) == "Q:1+2\nQ:3-4+5\nQ:"


def test_propose_parses_what_the_sampler_returns_and_rewards_probed_proposals():
    env = make_env("arithmetic", num_levels=3)
    ch = Challenger(env, frontier="uncertainty", repetition_coef=1.0, invalid_reward=-1.0)
    seen = []

    def sample(prompts):
        seen.extend(prompts)
        return [Comp("3+4"), Comp("3+4"), Comp("not math"), Comp("1+2+3+4+5"), Comp("8-1", finished=False)]

    props = ch.propose(["Q:"] * 5, sample)
    assert seen == ["Q:"] * 5
    assert [p.valid for p in props] == [True, True, False, False, False]
    assert [p.parsed.reason for p in props[2:]] == ["grammar", "too_long:4>3", "truncated"]
    props[0].solve_rate = props[1].solve_rate = 0.5
    reward, stats = ch.rewards(props)
    # two identical valid proposals: frontier 1, penalty 2/5 each; the rest are invalid (-1)
    assert torch.allclose(reward, torch.tensor([0.6, 0.6, -1.0, -1.0, -1.0]))
    assert stats["valid_fraction"] == pytest.approx(0.4)
    assert stats["level_mean"] == 1.0 and stats["unique_fraction"] == pytest.approx(4 / 5)
    assert stats["rejected/grammar"] == pytest.approx(0.2) and stats["rejected/truncated"] == pytest.approx(0.2)


def test_a_typed_environment_gets_each_prompts_type_and_stats_per_type():
    env = make_env("code_triplets", num_levels=2, timeout_s=1.0)
    ch = Challenger(env)
    ded = env.parse_proposal("def f(x):\n    return x + 1\n#input: 2", kind="deduction")
    assert ch.prompt([ded], kind="deduction") == "#deduction\ndef f(x):\n    return x + 1\n#input: 2\n#deduction\n"
    assert ch.prompt(kind="induction") == "#induction\n"
    text = "def f(x):\n    return x * 3\n#input: 1\n#input: 2"
    props = ch.propose(["p"] * 4, lambda prompts: [Comp(text), Comp(text), Comp("def f(x):\n    return x\n#input: 1"),
                                                   Comp("junk")],
                       kinds=["deduction", "induction", "abduction", "abduction"])
    assert [p.kind for p in props] == ["deduction", "induction", "abduction", "abduction"]
    # one input line too many for deduction; the same text is a valid induction task (two pairs)
    assert [p.valid for p in props] == [False, True, True, False]
    assert props[1].task.kind == "induction" and props[2].task.kind == "abduction"
    props[1].solve_rate, props[2].solve_rate = 0.25, 1.0
    _, stats = ch.rewards(props)
    assert stats["valid_fraction/type_deduction"] == 0.0 and "solve_rate/type_deduction" not in stats
    assert stats["valid_fraction/type_induction"] == 1.0 and stats["solve_rate/type_induction"] == 0.25
    assert stats["valid_fraction/type_abduction"] == 0.5 and stats["solve_rate/type_abduction"] == 1.0
