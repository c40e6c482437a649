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
    """The registered environment ``name`` built with ``kwargs``; a mismatch is a config error.

    The constructor is the environment's validation of its kwargs: whatever it raises
    (a plugin's own exception too) becomes a ConfigError naming env.kwargs.
    """
    if name not in ENVIRONMENTS:
        raise ConfigError(f"unknown environment {name!r}; registered: {sorted(ENVIRONMENTS)}")
    try:
        return ENVIRONMENTS[name](**kwargs)
    except Exception as exc:  # noqa: BLE001 - any failure is the kwargs', named as such
        # An unexpected keyword is often the config file's kwargs of another environment.
        hint = " (env.kwargs={...} given as an override replaces the config file's)" if isinstance(exc, TypeError) else ""
        raise ConfigError(f"env.kwargs do not fit environment {name!r}: {exc}{hint}") from exc


def int_kwarg(env: str, key: str, value, lo: int, hi: int) -> int:
    """``value`` if it is an integer in [lo, hi] (not a bool, not a float), else a ValueError naming it.

    The upper bounds keep every config's benchmark and prompts small enough to build in seconds.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{env} needs an integer {lo} <= {key} <= {hi} (got {value!r})")
    return value


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
