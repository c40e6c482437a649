"""The environment protocol: what a task family must provide to the loop."""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Task:
    """One task in flight.

    text: what the solver is shown (canonical form, used for deduplication).
    answer: the reference answer, canonical string; "" when the environment has
        none: the solver's answers are then graded against their majority (``Solver.grade``;
        the environment provides ``extract_answer`` and ``same_answer``), and a task admitted
        to the pool carries that majority as its answer (a pseudo-label).
    level: the environment's own difficulty level, 1 (easiest) .. num_levels.
    kind: the task type in an environment with several (``code_triplets``: deduction, abduction,
        induction); "" in one without.
    """

    text: str
    answer: str
    level: int
    kind: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Task":
        return cls(text=d["text"], answer=d["answer"], level=int(d["level"]), kind=str(d.get("kind", "")))


class HeldOut(frozenset):
    """The held-out benchmark's task texts; ``in`` also matches by the environment's ``canonical(text)``
    where it has one (``code_output``: a program re-spaced or with comments is the same program)."""

    def __new__(cls, texts, canonical=None):
        self = super().__new__(cls, texts)
        self._canonical = canonical
        self._keys = frozenset(canonical(t) for t in self) if canonical else frozenset()
        return self

    def __contains__(self, text) -> bool:
        if frozenset.__contains__(self, text):
            return True
        return self._canonical is not None and self._canonical(text) in self._keys

    def __reduce__(self):
        return HeldOut, (frozenset(self), self._canonical)


def held_out_texts(env, tasks) -> HeldOut:
    """``HeldOut`` of ``tasks``' texts under ``env``'s optional ``canonical``."""
    return HeldOut((t.text for t in tasks), getattr(env, "canonical", None))


class InvalidProposal(ValueError):
    """A proposal the environment refuses; ``str(exc)`` is the short reason."""


class FailedProposal(InvalidProposal):
    """A well-formed proposal (it parses) that fails the environment's check when run (an error, a timeout,
    different outputs twice): Absolute Zero's "wrong" tier, apart from format errors (``reward.tiers``, ``reward.failing``)."""

    well_formed = True


@runtime_checkable
class Environment(Protocol):
    """A task family. Register an implementation with ``@register_env("name")``.

    Methods may raise ``InvalidProposal`` from ``parse_proposal``; any other
    exception raised while parsing model output is also turned into a
    rejection by the caller, never a crash.

    Prompts are text or chat messages (``[{"role": "system", "content": ...}, {"role":
    "user", "content": ...}]``); ``prompt.style`` decides how the model reads them. An
    environment whose tasks may lack a reference answer also implements
    ``extract_answer(completion) -> str | None`` and ``same_answer(a, b) -> bool``.

    An environment with several task types lists them in ``task_types`` (see ``task_types``) and
    takes the type as a keyword: ``challenger_prompt(kind=...)``, ``parse_proposal(text, kind=...)``
    and ``sample_task(level, rng, kind=...)`` (a random type when None); its tasks carry it in
    ``Task.kind``. The loop then gives each challenger group one type, in turn, and logs metrics
    per type. An environment may also report counters (``stats() -> dict[str, float]``, cumulative,
    e.g. sandbox executions); the loop logs their growth over each round.
    """

    num_levels: int

    def challenger_prompt(self) -> str | list[dict]:
        """The prompt the challenger completes with a proposal (text or messages)."""

    def parse_proposal(self, text: str) -> Task:
        """Turn challenger output into a grounded Task, or raise InvalidProposal."""

    def format_proposal(self, task: Task) -> str:
        """The challenger output that would propose ``task`` (for the warm-up)."""

    def solver_prompt(self, task: Task) -> str | list[dict]:
        """The prompt the solver completes with an answer (text or messages)."""

    def format_answer(self, task: Task) -> str:
        """The solver output for a correct answer (for the warm-up; ``worked_answer(task)``, optional,
        is a worked one for a pretrained model's warm-up, ``selfplay model warmup``)."""

    def score(self, task: Task, completion: str) -> float:
        """Reward in [0, 1] of one solver completion against ``task.answer``."""

    def sample_task(self, level: int, rng: random.Random) -> Task:
        """A task of the given level from the environment's own generator."""


def task_types(env) -> tuple[str, ...]:
    """The environment's task types; () for one with a single kind of task."""
    return tuple(getattr(env, "task_types", ()))


def typed(kind: str) -> dict:
    """The keyword a typed environment's methods take: ``{"kind": kind}``, or nothing for ""."""
    return {"kind": kind} if kind else {}
