"""The solver role: attempt tasks through a sampling function it is handed, and score the attempts.

The solver does not own a model: the loop hands it ``sample(prompts) -> completions``
(the rollout engine, seeded and sharded by the caller), so the same code serves probing,
training batches and evaluation. A completion is anything with ``text`` and ``finished``.

A task with a reference answer is scored by the environment. A task without one
(``task.answer == ""``, as the math environment's proposals) is graded against the majority:
the environment extracts each attempt's final answer, the most common one up to the
environment's equivalence is the pseudo-label (R-Zero), and an attempt scores 1 if it voted for
it; the label's share of the attempts is then the task's solve rate.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from solver.tools import demonstration, with_tool_prompt
from solver.verifier import score_all, solve_rate, vote


class SolverEnv(Protocol):
    """What the solver needs of an environment.

    Environments whose tasks may lack a reference answer also provide
    ``extract_answer(completion) -> str | None`` and ``same_answer(a, b) -> bool``.
    """

    def solver_prompt(self, task: Any) -> str | list[dict]: ...

    def score(self, task: Any, completion: str) -> float: ...


@dataclass
class Attempt:
    """One answer to one task: the sampled completion, its verified score in [0, 1] and, for a
    task graded against the majority, the final answer extracted from it."""

    task: Any
    completion: Any
    score: float
    answer: str | None = None


class Solver:
    """Answers tasks of ``env`` and scores the answers with the environment's verifier.

    ``tool_prompt`` announces the tools (``solver.tools``) before every prompt; the sampling
    function then runs them (``curriculum.engine.tools``) and a completion's ``text`` is the answer.
    """

    def __init__(self, env: SolverEnv, tool_prompt: str = ""):
        self.env = env
        self.tool_prompt = tool_prompt

    def prompt(self, task: Any) -> str | list[dict]:
        return with_tool_prompt(self.env.solver_prompt(task), self.tool_prompt)

    def demonstration(self, task: Any, output_chars: int = 256) -> tuple[Any, list[tuple[str, bool]]] | None:
        """``task`` solved with one tool call, for a supervised warm-up: (prompt, (text, trained) segments),
        or None if the environment offers no program for it (``tool_code(task)``, whose output is the answer)."""
        code = getattr(self.env, "tool_code", None)
        if code is None or not self.tool_prompt:
            return None
        return self.prompt(task), demonstration(code(task), self.env.format_answer(task), output_chars)

    @property
    def votes(self) -> bool:
        """Whether tasks without a reference answer can be graded (the environment extracts answers)."""
        return hasattr(self.env, "extract_answer") and hasattr(self.env, "same_answer")

    def attempt(self, tasks: Sequence[Any], sample: Callable[[list], list]) -> list[Attempt]:
        """One sampled answer per entry of ``tasks`` (repeat a task for a group), scored; consecutive
        attempts at one task without a reference answer are graded against their majority."""
        completions = sample([self.prompt(t) for t in tasks])
        attempts = [Attempt(t, c, 0.0) for t, c in zip(tasks, completions)]
        for _, group in itertools.groupby(attempts, key=lambda a: a.task):
            self.grade(list(group))
        return attempts

    def grade(self, attempts: Sequence[Attempt]) -> str | None:
        """Score attempts at one task in place; returns the answer they were graded against.

        The reference answer if the task has one (or the environment cannot vote), else the
        majority of the attempts' extracted answers (None if none gave one: every score 0).
        """
        task = attempts[0].task
        if task.answer or not self.votes:
            for a in attempts:
                a.score = self.score(task, a.completion)
            return task.answer
        for a in attempts:
            a.answer = self.extract(a.completion)
        label, members = vote([a.answer for a in attempts], self._same)
        for a, member in zip(attempts, members):
            a.score = float(member)
        return label

    def extract(self, completion: Any) -> str | None:
        """The final answer of a finished completion; None if it was cut short or extraction failed."""
        if not completion.finished:
            return None
        try:
            answer = self.env.extract_answer(completion.text)
        except Exception:  # noqa: BLE001 - model output must never take the trainer down
            return None
        return answer if isinstance(answer, str) else None

    def same(self, a: str | None, b: str | None) -> bool:
        """The environment's answer equivalence; None matches nothing, a failure is no match."""
        return a is not None and b is not None and self._same(a, b)

    def _same(self, a: str, b: str) -> bool:
        try:
            return bool(self.env.same_answer(a, b))
        except Exception:  # noqa: BLE001
            return False

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
