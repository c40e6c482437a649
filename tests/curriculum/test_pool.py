import random

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
