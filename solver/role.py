"""The solver role: attempt tasks through a sampling function it is handed, and score the attempts.

The solver does not own a model: the loop hands it ``sample(prompts) -> completions``
(the rollout engine, seeded and sharded by the caller), so the same code serves probing,
training batches and evaluation. A completion is anything with ``text`` and ``finished``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from solver.verifier import score_all, solve_rate


class SolverEnv(Protocol):
    """What the solver needs of an environment."""

    def solver_prompt(self, task: Any) -> str: ...

    def score(self, task: Any, completion: str) -> float: ...


@dataclass
class Attempt:
    """One answer to one task: the sampled completion and its verified score in [0, 1]."""

    task: Any
    completion: Any
    score: float


class Solver:
    """Answers tasks of ``env`` and scores the answers with the environment's verifier."""

    def __init__(self, env: SolverEnv):
        self.env = env

    def prompt(self, task: Any) -> str:
        return self.env.solver_prompt(task)

    def attempt(self, tasks: Sequence[Any], sample: Callable[[list[str]], list]) -> list[Attempt]:
        """One sampled answer per entry of ``tasks`` (repeat a task for a group), scored."""
        completions = sample([self.prompt(t) for t in tasks])
        return [Attempt(t, c, self.score(t, c)) for t, c in zip(tasks, completions)]

    def score(self, task: Any, completion: Any) -> float:
        """The verifier's score; an unfinished answer (cut at the token limit) or a scorer failure is 0."""
        if not completion.finished:
            return 0.0
        return score_all(lambda text: self.env.score(task, text), [completion.text])[0]


def has_signal(group: Sequence[Attempt]) -> bool:
    """A GRPO group teaches only if its answers did not all score the same."""
    return len({a.score for a in group}) > 1


def solve_rates(scores: Sequence[float], m: int) -> list[float]:
    """Task-major scores, ``m`` per task -> one solve rate per task."""
    return [solve_rate(scores[i : i + m]) for i in range(0, len(scores), m)]
