"""curriculum.replay_by_level: the retired store keeps every level it ever held, and replay draws them in turn."""
import random

from curriculum.envs.base import Task
from curriculum.pool import PoolEntry, TaskPool


def retire_all(pool: TaskPool, tasks: list[tuple[str, int]]) -> None:
    for text, level in tasks:
        pool.add(PoolEntry(Task(text, "0", level), 0.5, 1, text))
        pool.update_solve_rate(text, 1.0)  # mastered: it leaves for the retired store


EARLY = [("e0", 1), ("e1", 1)]  # level 1, mastered in the first rounds
LATE = [(f"l{i}", 3) for i in range(10)]


def test_a_full_store_drops_the_most_held_level_not_the_oldest_tasks():
    plain, balanced = TaskPool(6, 5), TaskPool(6, 5, by_level=True)
    for pool in (plain, balanced):
        retire_all(pool, EARLY + LATE)
    assert {e.task.level for e in plain.retired.values()} == {3}  # level 1 forgotten by the store
    assert [t for t, e in balanced.retired.items() if e.task.level == 1] == ["e0", "e1"]
    assert list(balanced.retired)[2:] == ["l6", "l7", "l8", "l9"]  # the newest of level 3


def test_replay_takes_the_levels_in_turn():
    pool = TaskPool(12, 5, by_level=True)
    retire_all(pool, EARLY + LATE)
    for seed in range(20):
        drawn = pool.replay(4, random.Random(seed))
        assert sorted(e.task.level for e in drawn) == [1, 1, 3, 3] and len({e.task.text for e in drawn}) == 4
    odd = [sorted(e.task.level for e in pool.replay(3, random.Random(s))) for s in range(40)]
    assert {tuple(x) for x in odd} == {(1, 1, 3), (1, 3, 3)}  # which level gets the third is random
    assert len(pool.replay(50, random.Random(0))) == 12  # fewer than asked: all of them


def test_uniform_replay_is_unchanged():
    pool = TaskPool(12, 5)
    retire_all(pool, EARLY + LATE)
    rng, again = random.Random(3), random.Random(3)
    assert pool.replay(4, rng) == again.sample(list(pool.retired.values()), 4)


def test_proposals_above_the_band_are_kept_for_replay_but_never_join_the_pool():
    pool = TaskPool(4, 5, by_level=True)
    pool.add(PoolEntry(Task("p", "0", 3), 0.5, 1, "p"))
    assert not pool.keep_mastered(PoolEntry(Task("p", "0", 3), 1.0, 1, "p"))  # in the band now: stays in the pool
    for i in range(6):
        assert pool.keep_mastered(PoolEntry(Task(f"m{i}", "0", 1), 1.0, 1, f"m{i}"))
    assert list(pool.entries) == ["p"] and "p" not in pool.retired
    assert len(pool.retired) == 4 and {e.task.level for e in pool.retired.values()} == {1}
    retire_all(pool, [("l0", 3), ("l1", 3)])  # later levels retire: level 1 keeps its share
    assert sorted(e.task.level for e in pool.replay(4, random.Random(0))) == [1, 1, 3, 3]
