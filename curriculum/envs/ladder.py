"""Running sums from the right: a ladder of levels where level k needs level k-1.

A task of level k is a string of k+1 digits, ``7394``. The solver adds them up from the
right, writing the running sum mod 10 after each digit it adds: 4, then 4+9 -> ``3``,
3+3 -> ``6``, 6+7 -> ``3``, so the answer is ``363``. Level k's answer is level k-1's (for
the last k digits) plus one more step, so the skills compose and a solver reaches level k
only through level k-1. Each step reads the digit one place further left: every level
adds exactly one new thing to learn, and the first steps stay the same at every length.
An answer has k digits and is graded whole: guessing a level out of reach (one chance in
10^k) does not happen.
"""
from __future__ import annotations

import random
import re

from curriculum.envs.base import InvalidProposal, Task
from curriculum.envs.registry import int_kwarg, register_env

_DIGITS = re.compile(r"[0-9]+")  # ASCII only: \d admits any script's digits
MAX_LEVELS = 64


@register_env("ladder")
class Ladder:
    """Running sums mod 10 from the right; level k = k additions (k+1 digits).

    Its variants (``hinted_ladder``) keep the proposal format and grading and change ``answer`` and
    the solver's view."""

    env_name, max_levels = "ladder", MAX_LEVELS  # for kwarg errors, and the longest task

    def __init__(self, num_levels: int = 16):
        self.num_levels = int_kwarg(self.env_name, "num_levels", num_levels, 1, self.max_levels)

    def challenger_prompt(self) -> str:
        return "L:"

    def parse_proposal(self, text: str) -> Task:
        digits = text.strip()
        if not digits:
            raise InvalidProposal("empty")
        if not _DIGITS.fullmatch(digits):
            raise InvalidProposal("grammar")
        level = len(digits) - 1
        if level < 1:
            raise InvalidProposal("too_short")
        if level > self.num_levels:
            raise InvalidProposal(f"too_long:{level}>{self.num_levels}")
        return Task(text=digits, answer=self.answer(digits), level=level)

    def answer(self, digits: str) -> str:
        return running_sums(digits)

    def format_proposal(self, task: Task) -> str:
        return task.text

    def solver_prompt(self, task: Task) -> str:
        return f"{task.text}="

    def format_answer(self, task: Task) -> str:
        return task.answer

    def score(self, task: Task, completion: str) -> float:
        """1 for exactly the chain of running sums (surrounding whitespace aside), else 0."""
        return float(completion.strip() == task.answer)

    def extract_answer(self, completion: str) -> str | None:
        """The digits written (for majority votes: ``curriculum.pseudo_labels``); None if anything else."""
        answer = completion.strip()
        return answer if _DIGITS.fullmatch(answer) else None

    def same_answer(self, a: str, b: str) -> bool:
        return a == b

    def sample_task(self, level: int, rng: random.Random) -> Task:
        return self.parse_proposal("".join(str(rng.randrange(10)) for _ in range(level + 1)))


def running_sums(digits: str) -> str:
    """``"7394"`` -> ``"363"``: from the right, the sum mod 10 after each added digit."""
    total = int(digits[-1])
    out = []
    for d in reversed(digits[:-1]):
        total = (total + int(d)) % 10
        out.append(str(total))
    return "".join(out)
