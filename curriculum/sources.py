"""Where the solver's tasks come from: one task source per ``curriculum.mode``, chosen once.

- ``selfplay``: the task pool the challenger fills (``PoolSource``), with replay of retired tasks;
- ``uniform``: the environment's generator, a level drawn uniformly per task;
- ``uniform_filtered``: the same draws; groups with no signal are dropped and drawn again (DAPO);
- ``adaptive``: levels drawn with weight ``p(1 - p) + floor``, where p is a running estimate of
  the solver's solve rate at that level, updated from every solver step's groups.

A new mode is one ``TaskSource`` subclass and a line in ``make_source``.
"""
from __future__ import annotations

import logging
import random
from collections import defaultdict
from typing import Sequence

from curriculum import metrics as M
from curriculum.envs import Environment, Task
from curriculum.pool import TaskPool, replay_split
from solver.role import Attempt, has_signal

log = logging.getLogger("selfplay")

# Weight of the newest step in the running per-level solve rate (an exponential moving average).
EMA = 0.3


class LevelSampler:
    """Draws generator tasks level by level: uniformly, or adaptively toward solve rate 1/2."""

    def __init__(self, env: Environment, max_level: int = 0, *, adaptive: bool = False, floor: float = 0.02):
        top = env.num_levels if max_level <= 0 else min(max_level, env.num_levels)
        self.env = env
        self.levels = list(range(1, top + 1))
        self.adaptive = adaptive
        self.floor = floor
        self.rates: dict[int, float] = {}  # level -> running solve rate (absent: never seen)

    def weights(self) -> list[float]:
        """One weight per level: 1 (uniform), or p(1-p) + floor with p = 1/2 for unseen levels."""
        if not self.adaptive:
            return [1.0] * len(self.levels)
        return [self.rates.get(k, 0.5) * (1 - self.rates.get(k, 0.5)) + self.floor for k in self.levels]

    def draw(self, n: int, rng: random.Random, exclude: set[str] = frozenset()) -> list[Task]:
        """``n`` generator tasks, none of them in ``exclude`` (the held-out benchmark)."""
        weights = self.weights()
        tasks: list[Task] = []
        for _ in range(1000 * max(n, 1)):
            if len(tasks) == n:
                return tasks
            level = rng.choices(self.levels, weights=weights)[0] if self.adaptive else rng.randint(1, self.levels[-1])
            task = self.env.sample_task(level, rng)
            if task.text not in exclude:
                tasks.append(task)
        raise RuntimeError(f"drew {len(tasks)} of {n} tasks outside the held-out benchmark in {1000 * n} tries: "
                           f"levels {self.levels} have (almost) no task left for training")

    def observe(self, tasks: Sequence[Task], rates: Sequence[float]) -> None:
        """Fold one solver step's group solve rates into the per-level estimates."""
        by_level: dict[int, list[float]] = defaultdict(list)
        for t, p in zip(tasks, rates):
            by_level[t.level].append(p)
        for level, ps in by_level.items():
            mean = sum(ps) / len(ps)
            old = self.rates.get(level)
            self.rates[level] = mean if old is None else (1 - EMA) * old + EMA * mean

    def state_dict(self) -> dict:
        return {"rates": {str(k): v for k, v in sorted(self.rates.items())}}

    def load_state_dict(self, state: dict) -> None:
        self.rates = {int(k): float(v) for k, v in state.get("rates", {}).items()}


class TaskSource:
    """A solver step's tasks. The trainer draws ``batch`` up to ``draws`` times a step, keeps the groups
    ``keep`` accepts, then reports their solve rates to ``observe``; the state is checkpointed."""

    proposes = False  # whether the round has challenger phases that feed this source
    draws = 1

    def new_round(self, r: int) -> None:
        pass

    def batch(self, n: int, rng: random.Random) -> list[Task]:
        raise NotImplementedError

    def keep(self, group: list[Attempt]) -> bool:
        return True

    def observe(self, tasks: Sequence[Task], rates: Sequence[float]) -> None:
        pass

    def stats(self, distinct: int, n: int) -> dict[str, float]:
        """Metrics of the step that trained on ``distinct`` distinct tasks of a batch of ``n``."""
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class GeneratorSource(TaskSource):
    """The environment's generator (never a held-out task): uniform, filtered (``filter_draws`` > 1 keeps
    only groups with signal, DAPO) or adaptive levels."""

    def __init__(self, levels: LevelSampler, held_out: set[str], filter_draws: int = 0):
        self.levels, self.held_out = levels, held_out
        self.draws = max(1, filter_draws)
        self.filtered = filter_draws > 0

    def batch(self, n: int, rng: random.Random) -> list[Task]:
        return self.levels.draw(n, rng, self.held_out)

    def keep(self, group: list[Attempt]) -> bool:
        return not self.filtered or has_signal(group)

    def observe(self, tasks: Sequence[Task], rates: Sequence[float]) -> None:
        self.levels.observe(tasks, rates)

    def state_dict(self) -> dict:
        return self.levels.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.levels.load_state_dict(state)


class PoolSource(TaskSource):
    """Self-play: ``replay_fraction`` of each batch replayed from retired tasks (counts by
    ``pool.replay_split``), the rest drawn from the pool; no task twice. Mastered tasks leave the pool.
    While the pool is empty (a challenger that proposes nothing in the band), with replay on the whole
    batch is replayed: the solver keeps its levels instead of skipping steps for rounds on end."""

    proposes = True

    def __init__(self, pool: TaskPool, replay_fraction: float):
        self.pool, self.replay_fraction = pool, replay_fraction
        self.replayed = 0  # retired tasks in the last batch
        self.round, self.starved_round = 0, -1

    def new_round(self, r: int) -> None:
        self.round = r
        self.pool.age_out(r)

    def batch(self, n: int, rng: random.Random) -> list[Task]:
        fresh, k = replay_split(self.replay_fraction, n, len(self.pool.entries), len(self.pool.retired))
        if not self.pool.entries and self.replay_fraction > 0:  # emptied: replay, not starve, until a refill
            fresh, k = 0, n
        replayed = self.pool.replay(k, rng)
        self.replayed = len(replayed)
        return [e.task for e in self.pool.sample(fresh, rng)] + [e.task for e in replayed]

    def observe(self, tasks: Sequence[Task], rates: Sequence[float]) -> None:
        for t, rate in zip(tasks, rates):
            self.pool.update_solve_rate(t.text, rate)

    def stats(self, distinct: int, n: int) -> dict[str, float]:
        if distinct < n and self.starved_round != self.round:
            self.starved_round = self.round  # once a round
            # The same few tasks, step after step, overfit and forget: the batch is cut instead of repeating them.
            log.warning("round %d: the pool holds %d tasks, fewer than a solver batch (%d): the batch has %d "
                        "distinct ones; raise curriculum.fill_proposals or fill_max_batches, or lower "
                        "solver.batch_prompts", self.round, len(self.pool), n, distinct)
        return {M.REPLAYED: self.replayed}


def make_source(mode: str, cc, env: Environment, pool: TaskPool, held_out: set[str]) -> TaskSource:
    """The task source of ``curriculum.mode`` (``cc`` is the curriculum config)."""
    if mode == "selfplay":
        return PoolSource(pool, cc.replay_fraction)
    levels = LevelSampler(env, cc.max_level, adaptive=mode == "adaptive", floor=cc.adaptive_floor)
    return GeneratorSource(levels, held_out, cc.filter_max_batches if mode == "uniform_filtered" else 0)
