"""Environment registry: pick a task family by name (``env.name`` in the config)."""
from __future__ import annotations

import random
from typing import Callable

from curriculum.envs.base import Environment, Task
from curriculum.errors import ConfigError

ENVIRONMENTS: dict[str, Callable[..., Environment]] = {}


def register_env(name: str):
    """Class decorator: make an environment constructible as ``env.name=<name>``."""

    def wrap(cls):
        ENVIRONMENTS[name] = cls
        return cls

    return wrap


def make_env(name: str, **kwargs) -> Environment:
    """The registered environment ``name`` built with ``kwargs``; a mismatch is a config error."""
    if name not in ENVIRONMENTS:
        raise ConfigError(f"unknown environment {name!r}; registered: {sorted(ENVIRONMENTS)}")
    try:
        return ENVIRONMENTS[name](**kwargs)
    except TypeError as exc:
        raise ConfigError(f"env.kwargs do not fit environment {name!r}: {exc} (env.kwargs={{...}} given "
                          "as an override replaces the config file's)") from exc


def benchmark(env: Environment, seed: int, per_level: int) -> list[Task]:
    """The held-out benchmark: ``per_level`` distinct tasks per level from ``seed``.

    A level with fewer than ``2 * per_level`` distinct tasks (ladder level 1 has 100) gives
    only half of them, so training always has tasks left at every level.
    """
    rng = random.Random(f"benchmark:{seed}")
    tasks: list[Task] = []
    for level in range(1, env.num_levels + 1):
        seen: dict[str, Task] = {}
        for _ in range(per_level * 50):
            if len(seen) == 2 * per_level:
                break
            task = env.sample_task(level, rng)
            seen.setdefault(task.text, task)
        found = list(seen.values())
        tasks += found[: min(per_level, len(found) // 2) if len(found) < 2 * per_level else per_level]
    return tasks
