"""The ladder environment: exact answers, composition of levels, a strict parser, a seeded generator."""
import random

import pytest

from curriculum.envs import InvalidProposal, Task, benchmark, make_env
from curriculum.envs.ladder import running_sums


@pytest.mark.parametrize("digits,answer", [("7394", "363"), ("12", "3"), ("55", "0"), ("09", "9"), ("9999", "876"),
                                           ("0000000", "000000")])
def test_running_sums_from_the_right_by_hand(digits, answer):
    assert running_sums(digits) == answer


def test_level_k_answer_extends_level_k_minus_1():
    rng = random.Random(0)
    env = make_env("ladder", num_levels=16)
    for level in range(2, 17):
        t = env.sample_task(level, rng)
        shorter = env.parse_proposal(t.text[1:])  # drop the leftmost digit: one level less
        assert shorter.level == level - 1 and t.answer.startswith(shorter.answer)
        assert len(t.answer) == level


GARBAGE = ["", " ", "\n", "7", "12a", "1 2", "-12", "+12", "1.2", "１２", "٣٤", "12\n34", "0x12", "1e5",
           "9" * 18, "\x00\x01", "abc", "12=3", "\ud800", "a4b3"]


@pytest.mark.parametrize("name", ["ladder", "hinted_ladder"])  # the hinted ladder parses proposals as the plain one
@pytest.mark.parametrize("text", GARBAGE)
def test_parser_rejects_garbage_with_a_reason(text, name):
    env = make_env(name, num_levels=16)
    with pytest.raises(InvalidProposal) as err:
        env.parse_proposal(text)
    assert str(err.value).split(":")[0] in {"empty", "grammar", "too_short", "too_long"}


def test_parse_accepts_surrounding_whitespace_and_counts_levels():
    env = make_env("ladder", num_levels=4)
    assert env.parse_proposal(" 7394\n") == Task("7394", "363", 3)
    assert env.parse_proposal("12345").level == 4
    with pytest.raises(InvalidProposal, match="too_long:5>4"):
        env.parse_proposal("123456")


def test_score_is_exact_and_whole():
    env = make_env("ladder")
    t = env.parse_proposal("7394")
    assert env.score(t, "363") == 1.0 and env.score(t, " 363\n") == 1.0
    for wrong in ("36", "3630", "364", "3 6 3", "", "363 ", "٣٦٣"):
        assert env.score(t, wrong) == float(wrong.strip() == "363")


def test_generator_levels_roundtrip_and_benchmark():
    env = make_env("ladder", num_levels=16)
    rng = random.Random(3)
    for level in range(1, 17):
        t = env.sample_task(level, rng)
        assert t.level == level and env.parse_proposal(env.format_proposal(t)) == t
        assert env.score(t, env.format_answer(t)) == 1.0
    tasks = benchmark(env, 5, 50)
    assert [sum(t.level == k for t in tasks) for k in range(1, 17)] == [50] * 16
    assert tasks == benchmark(env, 5, 50) and len({t.text for t in tasks}) == len(tasks)


@pytest.mark.parametrize("bad", [0, -1, 65, 2.5, "16", True])
def test_bad_num_levels_is_refused(bad):
    with pytest.raises(ValueError, match="num_levels"):
        make_env("ladder", num_levels=bad)


def test_small_levels_keep_half_their_tasks_for_training():
    env = make_env("ladder", num_levels=3)
    tasks = benchmark(env, 7, 100)
    per = [sum(t.level == k for t in tasks) for k in (1, 2, 3)]
    assert per == [50, 100, 100]  # level 1 has only 100 distinct tasks: half stay for training
    arith = make_env("arithmetic", num_levels=2)
    assert [sum(t.level == k for t in benchmark(arith, 7, 100)) for k in (1, 2)] == [100, 100]
