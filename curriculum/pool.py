"""The task pool: accepted tasks with difficulty estimates, ageing and frontier sampling."""
from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import torch

from curriculum.envs.base import Task
from curriculum.errors import ConfigError


@dataclass
class PoolEntry:
    """A task in the pool.

    solve_rate: latest estimate of the solver's success probability.
    round_added: round in which the task entered; proposal: the challenger text.
    """

    task: Task
    solve_rate: float
    round_added: int
    proposal: str
    uses: int = 0

    @property
    def difficulty(self) -> float:
        return 1.0 - self.solve_rate

    def to_dict(self) -> dict:
        d = asdict(self)
        d["task"] = self.task.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PoolEntry":
        """An entry of a saved pool; nonsense (a rate outside [0, 1], a level below 1) is a ValueError."""
        entry = cls(Task.from_dict(d["task"]), float(d["solve_rate"]), int(d["round_added"]), str(d["proposal"]),
                    int(d["uses"]))
        if not (0.0 <= entry.solve_rate <= 1.0 and entry.task.level >= 1 and entry.round_added >= 0
                and entry.uses >= 0 and isinstance(entry.task.text, str) and entry.task.text):
            raise ValueError(f"pool entry {d!r:.200} has values out of range")
        return entry


def in_band(p: float, low: float, high: float) -> bool:
    """Whether a solve rate is inside the band [low, high] (``curriculum.band_low``, ``band_high``), edges included."""
    return low <= p <= high


def near_band(p: float, m: int, low: float, high: float, z: float = 1.5) -> bool:
    """Whether a solve rate measured on ``m`` samples lies within ``z`` standard errors of a band edge
    (admission is then a coin flip: more samples decide it).

    The standard error uses p clipped to [1/2m, 1 - 1/2m], so 0/m and m/m are not certain.
    """
    q = min(max(p, 0.5 / m), 1 - 0.5 / m)
    se = (q * (1 - q) / m) ** 0.5
    return abs(p - low) <= z * se or abs(p - high) <= z * se


def quantiles(values: list[float], prefix: str) -> dict[str, float]:
    """``{prefix}_mean`` and the 10th, 50th and 90th percentiles of ``values`` (nothing if empty)."""
    if not values:
        return {}
    t = torch.tensor(values, dtype=torch.float64)
    qs = torch.quantile(t, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
    return {f"{prefix}_mean": float(t.mean()), f"{prefix}_p10": qs[0], f"{prefix}_p50": qs[1], f"{prefix}_p90": qs[2]}


SAMPLERS: dict[str, Callable[[Sequence[PoolEntry]], list[float]]] = {}


def register_sampler(name: str):
    """Register ``weights(entries) -> list[float]`` (unnormalised) under ``name``."""

    def wrap(fn):
        SAMPLERS[name] = fn
        return fn

    return wrap


@register_sampler("uniform")
def _uniform(entries: Sequence[PoolEntry]) -> list[float]:
    return [1.0] * len(entries)


@register_sampler("frontier")
def _frontier(entries: Sequence[PoolEntry]) -> list[float]:
    """Favour tasks solved about half the time, where a GRPO group has most signal."""
    return [math.exp(-((e.solve_rate - 0.5) ** 2) / (2 * 0.2**2)) for e in entries]


@register_sampler("hard")
def _hard(entries: Sequence[PoolEntry]) -> list[float]:
    """Favour the tasks solved least often (weight 1 - p)."""
    return [e.difficulty for e in entries]


class TaskPool:
    """Deduplicated by task text; holds at most ``capacity`` entries, oldest leave first.

    Tasks that leave (aged out, mastered or evicted) are kept in ``retired``, at most
    ``capacity`` of them, newest last: the challenger's own past tasks, for replay. With
    ``by_level``, a full ``retired`` drops the oldest task of the level it holds most of, and
    replay draws level by level: a level mastered in the first rounds keeps its share of
    replay however many tasks of later levels retire after it.
    """

    def __init__(self, capacity: int, max_age: int, sampler: str = "frontier", by_level: bool = False):
        self.capacity = capacity
        self.max_age = max_age
        self.sampler = sampler
        self.by_level = by_level
        self.entries: dict[str, PoolEntry] = {}
        self.retired: dict[str, PoolEntry] = {}

    def _retire(self, text: str) -> None:
        self._keep(self.entries.pop(text))

    def _keep(self, entry: PoolEntry) -> None:
        self.retired.pop(entry.task.text, None)
        self.retired[entry.task.text] = entry
        while len(self.retired) > self.capacity:
            self.retired.pop(self._evictee())

    def keep_mastered(self, entry: PoolEntry) -> bool:
        """A proposal solved above the band when probed: never in the pool, but kept for replay, so the
        levels below the band are replayed too (the pool itself holds only the band). False if the pool
        holds it."""
        if entry.task.text in self.entries:
            return False
        self._keep(entry)
        return True

    def _evictee(self) -> str:
        """The retired task to drop: the oldest, or with ``by_level`` the oldest of the most-held level."""
        if not self.by_level:
            return next(iter(self.retired))
        counts: dict[int, int] = {}
        for e in self.retired.values():
            counts[e.task.level] = counts.get(e.task.level, 0) + 1
        most = max(counts, key=lambda lv: (counts[lv], lv))  # a tie drops from the higher level
        return next(t for t, e in self.retired.items() if e.task.level == most)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entry: PoolEntry) -> bool:
        """Add a new task; a known text only refreshes its solve rate. Returns True if new."""
        old = self.entries.pop(entry.task.text, None)
        if old is not None:
            old.solve_rate = entry.solve_rate
            self.entries[entry.task.text] = old
            return False
        self.entries[entry.task.text] = entry
        self.retired.pop(entry.task.text, None)  # back on the frontier
        while len(self.entries) > self.capacity:
            self._retire(next(iter(self.entries)))
        return True

    def age_out(self, current_round: int) -> int:
        """Drop tasks older than ``max_age`` rounds; returns how many left."""
        stale = [k for k, e in self.entries.items() if current_round - e.round_added >= self.max_age]
        for k in stale:
            self._retire(k)
        return len(stale)

    def update_solve_rate(self, text: str, rate: float, *, drop_solved: bool = True) -> None:
        """Refresh a task's estimate from new solver samples; mastered tasks leave."""
        entry = self.entries.get(text)
        if entry is None:
            return
        entry.solve_rate = rate
        if drop_solved and rate >= 1.0:
            self._retire(text)

    def sample(self, n: int, rng: random.Random) -> list[PoolEntry]:
        """``n`` distinct entries drawn with the configured sampler; the whole pool if it holds fewer.

        Never with replacement: a batch that repeats a handful of tasks step after step overfits
        them and forgets the rest (measured on the ladder, BENCHMARKS.md).
        """
        entries = list(self.entries.values())
        if not entries or n <= 0:
            return []
        if len(entries) <= n:
            picked = entries
        else:
            picked = weighted_without_replacement(entries, SAMPLERS[self.sampler](entries), n, rng)
        for e in picked:
            e.uses += 1
        return picked

    def replay(self, n: int, rng: random.Random) -> list[PoolEntry]:
        """Up to ``n`` distinct retired tasks (every one if fewer): uniformly, or with ``by_level`` the levels
        in turn, in a random order, a random task of each."""
        retired = list(self.retired.values())
        if len(retired) <= n:
            return retired
        if not self.by_level:
            return rng.sample(retired, n)
        levels: dict[int, list[PoolEntry]] = {}
        for e in retired:
            levels.setdefault(e.task.level, []).append(e)
        queues = [rng.sample(group, len(group)) for _, group in sorted(levels.items())]
        rng.shuffle(queues)
        picked: list[PoolEntry] = []
        while len(picked) < n:
            for q in queues:
                if q and len(picked) < n:
                    picked.append(q.pop())
        return picked

    def references(self, k: int, kind: str, sampler: str, rng: random.Random,
                   generate: Callable[[], Task]) -> list[Task]:
        """``k`` reference tasks of type ``kind`` for a challenger prompt: drawn from the pool with ``sampler``
        (``curriculum.reference_sampler``); while it has none, the newest retired ones (an emptied pool is not
        a solver back at level 1); before anything was accepted, ``generate()``'s tasks."""
        entries = [e for e in self.entries.values() if e.task.kind == kind]
        if entries and sampler == "uniform":
            return [e.task for e in rng.sample(entries, min(k, len(entries)))]
        if entries:
            return [e.task for e in weighted_without_replacement(entries, SAMPLERS[sampler](entries), k, rng)]
        retired = [e.task for e in self.retired.values() if e.task.kind == kind]
        if retired:
            return retired[-k:]
        return [generate() for _ in range(k)]

    def state_dict(self) -> dict:
        return {"entries": [e.to_dict() for e in self.entries.values()],
                "retired": [e.to_dict() for e in self.retired.values()]}

    def load(self, state: dict, where) -> None:
        """``load_state_dict`` of a checkpoint's pool.json at ``where``; a pool this code cannot have written
        is a ConfigError naming the way out."""
        try:
            self.load_state_dict(state)
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{where} holds a pool this run cannot have written ({exc}); "
                              "move that checkpoint aside to resume from the one before") from exc

    def load_state_dict(self, state: dict) -> None:
        self.entries, self.retired = {}, {}
        for d in state["entries"]:
            e = PoolEntry.from_dict(d)
            self.entries[e.task.text] = e
        for d in state.get("retired", []):  # checkpoints from before replay have none
            e = PoolEntry.from_dict(d)
            self.retired[e.task.text] = e


def weighted_without_replacement(items: list, weights: list[float], k: int, rng: random.Random) -> list:
    # Efraimidis-Spirakis: keys u^(1/w), take the k largest.
    keyed = sorted(((rng.random() ** (1.0 / max(w, 1e-12)), i) for i, w in enumerate(weights)), reverse=True)
    return [items[i] for _, i in keyed[:k]]


def replay_split(fraction: float, n: int, fresh_available: int, retired_available: int) -> tuple[int, int]:
    """(fresh, replayed) task counts of a solver batch of ``n`` that replays ``fraction`` of it.

    replayed = ``fraction * n`` rounded half up (0.25 of 6 -> 2, 0.25 of 10 -> 3: the same rule for
    every n, unlike Python's half-to-even ``round``), never more than the retired tasks held; the rest
    fresh from the pool. When the pool holds fewer fresh tasks than that rest, the replayed count is
    scaled down with it, so the batch shrinks but keeps the configured share (0.5 of 10 with 2 fresh
    tasks -> 2 fresh + 2 replayed, not 2 + 5).
    """
    def half_up(x: float) -> int:
        return math.floor(x + 0.5 + 1e-9)  # 1e-9: 0.35 * 10 is 3.4999... in floats

    replayed = min(half_up(fraction * n), retired_available, n)
    fresh = min(n - replayed, fresh_available)
    if fresh < n - replayed and fraction < 1:
        replayed = min(replayed, half_up(fraction * fresh / (1 - fraction)))
    return fresh, replayed


def group_kinds(task_types: Sequence[str], groups: int, rng: random.Random) -> list[str]:
    """The task type each challenger group asks for: the environment's types in turn from a random one
    (Absolute Zero proposes every type each step); "" for an environment without types."""
    if not task_types:
        return [""] * groups
    first = rng.randrange(len(task_types))
    return [task_types[(first + i) % len(task_types)] for i in range(groups)]
