import random

import pytest

from curriculum.envs import Task
from curriculum.pool import PoolEntry, TaskPool


def entry(text, p, r=1):
    return PoolEntry(Task(text, "0", 1), p, r, text)


def test_dedup_capacity_and_age():
    pool = TaskPool(capacity=3, max_age=2)
    assert pool.add(entry("a", 0.5)) and pool.add(entry("b", 0.5))
    assert not pool.add(entry("a", 0.3))  # known text: refresh only
    assert len(pool) == 2 and pool.entries["a"].solve_rate == 0.3
    pool.add(entry("c", 0.5, r=2))
    pool.add(entry("d", 0.5, r=2))  # over capacity: oldest ("b") leaves
    assert list(pool.entries) == ["a", "c", "d"]
    assert pool.age_out(3) == 1 and list(pool.entries) == ["c", "d"]


def test_mastered_tasks_leave():
    pool = TaskPool(10, 5)
    pool.add(entry("a", 0.5))
    pool.update_solve_rate("a", 1.0)
    assert len(pool) == 0


def test_frontier_sampler_prefers_half():
    pool = TaskPool(100, 5, sampler="frontier")
    for i in range(50):
        pool.add(entry(f"easy{i}", 0.95))
        pool.add(entry(f"mid{i}", 0.5))
    picked = pool.sample(20, random.Random(0))
    assert len({e.task.text for e in picked}) == 20
    assert sum(e.task.text.startswith("mid") for e in picked) >= 16


def test_hard_sampler_weights_by_difficulty():
    from curriculum.pool import SAMPLERS

    assert SAMPLERS["hard"]([entry("a", 0.25), entry("b", 0.8), entry("c", 1.0)]) == [0.75, 0.19999999999999996, 0.0]
    pool = TaskPool(100, 5, sampler="hard")
    for i in range(50):
        pool.add(entry(f"easy{i}", 0.95))
        pool.add(entry(f"hard{i}", 0.25))
    picked = pool.sample(20, random.Random(0))
    # weights 0.75 against 0.05: about 15 to 1 per draw
    assert sum(e.task.text.startswith("hard") for e in picked) >= 17


def test_sample_small_pool_and_state_roundtrip():
    pool = TaskPool(10, 5, sampler="uniform")
    pool.add(entry("a", 0.5))
    pool.add(entry("b", 0.4))
    picked = pool.sample(5, random.Random(0))  # a pool smaller than the batch: each task once, no repeats
    assert sorted(e.task.text for e in picked) == ["a", "b"] and all(e.uses == 1 for e in picked)
    clone = TaskPool(10, 5)
    clone.load_state_dict(pool.state_dict())
    assert clone.state_dict() == pool.state_dict()
    assert TaskPool(10, 5).sample(3, random.Random(0)) == []


def test_nonsense_pool_values_are_refused_on_load():
    import pytest

    good = entry("a", 0.5).to_dict()
    for bad in ({**good, "solve_rate": 7.0}, {**good, "solve_rate": float("nan")}, {**good, "uses": -1},
                {**good, "task": {**good["task"], "level": 0}}, {**good, "task": {**good["task"], "text": ""}}):
        with pytest.raises(ValueError, match="out of range"):
            TaskPool(10, 5).load_state_dict({"entries": [bad]})


def test_tasks_that_leave_are_retired_for_replay_and_saved():
    pool = TaskPool(3, max_age=2, sampler="uniform")
    for text in "abcd":  # capacity 3: "a" is evicted
        pool.add(entry(text, 0.5))
    pool.update_solve_rate("b", 1.0)  # mastered
    assert list(pool.retired) == ["a", "b"] and set(pool.entries) == {"c", "d"}
    pool.add(entry("a", 0.4))  # proposed again: back on the frontier, no longer retired
    assert list(pool.retired) == ["b"] and "a" in pool.entries
    replayed = pool.replay(5, random.Random(0))
    assert [e.task.text for e in replayed] == ["b"]
    clone = TaskPool(3, 2)
    clone.load_state_dict(pool.state_dict())
    assert clone.state_dict() == pool.state_dict() and list(clone.retired) == ["b"]
    clone.load_state_dict({"entries": []})  # a checkpoint from before replay
    assert clone.retired == {}
    for text in "wxyz":
        pool.retired[text] = entry(text, 0.5)
    assert len({e.task.text for e in pool.replay(3, random.Random(1))}) == 3


@pytest.mark.parametrize("fraction,n,fresh,retired,expected", [
    (0.25, 6, 100, 100, (4, 2)),   # 1.5 rounds up
    (0.25, 10, 100, 100, (7, 3)),  # 2.5 rounds up too (half-to-even gave 2)
    (0.35, 10, 100, 100, (6, 4)),  # 3.5 although 0.35 * 10 < 3.5 in floats
    (0.3, 10, 100, 100, (7, 3)),
    (0.5, 10, 2, 100, (2, 2)),     # pool short of fresh tasks: the batch shrinks, the share stays
    (0.25, 8, 3, 100, (3, 1)),
    (0.5, 10, 100, 3, (7, 3)),     # never more than the retired tasks held
    (0.0, 10, 100, 100, (10, 0)),
    (1.0, 4, 0, 100, (0, 4)),
    (1.0, 4, 0, 2, (0, 2)),
    (0.5, 10, 0, 100, (0, 0)),
])
def test_replay_split_keeps_the_configured_share(fraction, n, fresh, retired, expected):
    from curriculum.pool import replay_split
    assert replay_split(fraction, n, fresh, retired) == expected
