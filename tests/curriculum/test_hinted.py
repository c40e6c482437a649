"""The hinted ladder: running sums from the left behind index hints, a strict parser, prompts fixed by the digits."""
import random

import pytest

from curriculum.envs import InvalidProposal, Task, benchmark, make_env
from curriculum.envs.hinted import HINTS, MAX_LEVELS, gaps, hinted, hints, running_sums, spaced


@pytest.mark.parametrize("digits,sums", [("4937", "4363"), ("12", "13"), ("55", "50"), ("90", "99"), ("9999", "9876"),
                                         ("0000000", "0000000")])
def test_running_sums_from_the_left_by_hand(digits, sums):
    assert running_sums(digits) == sums


def test_a_task_reads_the_same_every_time_with_distinct_hints_and_short_gaps():
    env = make_env("hinted_ladder")
    t = env.parse_proposal("4937")
    h = hints("4937")
    assert len(set(h)) == 4 and set(h) <= set(HINTS) and h == hints("4937")
    assert t.answer == "".join(a + b for a, b in zip(h, "4363")) == hinted("4937", "4363")
    assert all(0 <= g <= 2 for g in gaps("4937"))
    prompt = env.solver_prompt(t)
    assert prompt == spaced("4937") + "=" and prompt.replace(".", "") == "".join(a + b for a, b in zip(h, "4937")) + "="
    assert env.score(t, t.answer) == 1.0 and env.score(t, f" {t.answer}\n") == 1.0


def test_hints_and_gaps_vary_across_tasks():
    rng = random.Random(0)
    tasks = ["".join(str(rng.randrange(10)) for _ in range(8)) for _ in range(50)]
    assert len({tuple(hints(d)) for d in tasks}) == 50  # the lookup must go by hint, not by a fixed letter
    assert len({tuple(gaps(d)) for d in tasks}) > 10  # nor by position


def test_level_k_answer_extends_level_k_minus_1_step_by_step():
    env = make_env("hinted_ladder", num_levels=16)
    rng = random.Random(1)
    for level in range(2, 17):
        t = env.sample_task(level, rng)
        sums = t.answer[1::2]
        assert t.level == level and len(sums) == level + 1
        assert sums[:-1] == running_sums(t.text[:-1])  # the same chain, one step shorter
        assert sums[-1] == str((int(sums[-2]) + int(t.text[-1])) % 10)


def test_parse_accepts_surrounding_whitespace_and_counts_levels():
    env = make_env("hinted_ladder", num_levels=4)
    assert env.parse_proposal(" 4937\n") == Task("4937", hinted("4937", "4363"), 3)
    assert env.parse_proposal("12345").level == 4
    with pytest.raises(InvalidProposal, match="too_long:5>4"):
        env.parse_proposal("123456")


def test_score_and_extract_are_exact():
    env = make_env("hinted_ladder")
    t = env.parse_proposal("4937")
    wrong = [t.answer[:-1], t.answer + "1", "4363", t.answer.swapcase(), "", t.answer.replace("3", "4", 1)]
    assert [env.score(t, w) for w in wrong] == [0.0] * len(wrong)
    assert env.extract_answer(f" {t.answer} ") == t.answer
    assert env.extract_answer("4363") is None and env.extract_answer("a4b") is None and env.extract_answer("") is None


def test_levels_are_bounded_by_the_hint_alphabet():
    assert make_env("hinted_ladder", num_levels=MAX_LEVELS).num_levels == MAX_LEVELS
    with pytest.raises(Exception, match="num_levels"):
        make_env("hinted_ladder", num_levels=MAX_LEVELS + 1)
    t = make_env("hinted_ladder", num_levels=MAX_LEVELS).sample_task(MAX_LEVELS, random.Random(0))
    assert len(set(t.answer[0::2])) == MAX_LEVELS + 1


def test_generator_roundtrips_and_benchmark_is_seeded():
    env = make_env("hinted_ladder", num_levels=8)
    rng = random.Random(3)
    for level in range(1, 9):
        t = env.sample_task(level, rng)
        assert env.parse_proposal(env.format_proposal(t)) == t and env.score(t, env.format_answer(t)) == 1.0
    a, b = benchmark(env, 7, 5), benchmark(env, 7, 5)
    assert [t.text for t in a] == [t.text for t in b] and {t.level for t in a} == set(range(1, 9))
