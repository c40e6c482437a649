"""Where the solver's tasks come from when no challenger proposes them (``curriculum.mode``).

- ``uniform``: the environment's generator, a level drawn uniformly per task;
- ``uniform_filtered``: the same draws; the trainer drops groups with no signal and refills (DAPO);
- ``adaptive``: levels drawn with weight ``p(1 - p) + floor``, where p is a running estimate of
  the solver's solve rate at that level, updated from every solver step's groups.

``selfplay`` draws from the task pool instead (``curriculum.pool``).
"""
from __future__ import annotations

import random
from collections import defaultdict
from typing import Sequence

from curriculum.envs import Environment, Task

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
