import random

import pytest

from curriculum.envs import ENVIRONMENTS, InvalidProposal, Task, benchmark, make_env
from curriculum.envs.arithmetic import _evaluate


def test_registry_and_bad_kwargs():
    assert "arithmetic" in ENVIRONMENTS
    with pytest.raises(ValueError, match="unknown environment"):
        make_env("nope")
    with pytest.raises(ValueError, match="do not fit"):
        make_env("arithmetic", colour="red")
    with pytest.raises(ValueError, match="max_digits"):
        make_env("arithmetic", max_digits=0)


@pytest.mark.parametrize("expr,value", [("7-2+9-4", 10), ("2+3*4-5", 9), ("0-9-9", -18), ("12*3", 36), ("5", 5)])
def test_evaluate_exact(expr, value):
    assert _evaluate(expr) == value


def test_parse_levels_and_answers():
    env = make_env("arithmetic", num_levels=4, operators="+-*")
    assert env.parse_proposal("3+4") == Task("3+4", "7", 1)
    assert env.parse_proposal(" 2*3-1 ") == Task("2*3-1", "5", 2)
    with pytest.raises(InvalidProposal, match="too_long"):
        env.parse_proposal("1+1+1+1+1+1")
    with pytest.raises(InvalidProposal, match="grammar"):
        env.parse_proposal("12+3")  # max_digits=1


def test_score_is_exact():
    env = make_env("arithmetic")
    t = env.parse_proposal("3-7")
    assert env.score(t, "-4") == 1.0
    assert env.score(t, "-4\n") == 1.0
    assert env.score(t, "4") == 0.0
    assert env.score(t, "-4.0") == 0.0


def test_sample_task_level_and_roundtrip():
    env = make_env("arithmetic", num_levels=5, max_digits=2)
    rng = random.Random(1)
    for level in range(1, 6):
        t = env.sample_task(level, rng)
        assert t.level == level
        assert env.parse_proposal(env.format_proposal(t)) == t
        assert env.score(t, env.format_answer(t)) == 1.0


def test_benchmark_is_seeded_distinct_and_per_level():
    env = make_env("arithmetic", num_levels=3)
    a, b = benchmark(env, 7, 10), benchmark(env, 7, 10)
    assert a == b
    assert benchmark(env, 8, 10) != a
    assert [sum(t.level == k for t in a) for k in (1, 2, 3)] == [10, 10, 10]
    assert len({t.text for t in a}) == 30
