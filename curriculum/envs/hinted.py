"""Running sums with index hints: a ladder a small transformer can climb past the lengths it was taught.

The challenger proposes digits, ``4937``: a task of level k has k+1 digits. The solver sees each
digit behind a hint letter, with 0-2 dots before each pair, ``a4..k9c3.z7=``, and writes the
running sums mod 10 from the left behind the same hints: 4, 4+9 -> 3, 3+3 -> 6, 6+7 -> 3, so
``a4k3c6z3``. Hints and dots are drawn from the task's own digits (the same task, the same prompt).

Why the hints: in the plain ladder (``ladder``) each answer step reads the digit a length-dependent
distance back, so a model learns one lookup per length and nothing carries over to the next rung.
Here every step is found by content: the next hint is the one after the previous hint in the
prompt, the digit to add is the one behind the current hint, the running total is two tokens back.
The dots make the distance from an answer step to its pair vary within a task, so a lookup by
position fails and the lookup by hint, which works at any length, is the one that is learned.
With the embedded model built without position embeddings (``model.tiny.position: nope``),
training on levels 1-4 leaves level 5 solved now and then (docs/experiments/climb.md).
Rung k+1 repeats rung k's step once more, as reversed addition does for Lee et al.'s
self-improving transformers. An answer is graded whole; guessing a level out of reach is one
chance in 10^k.
"""
from __future__ import annotations

import random
import re
import string

from curriculum.envs.base import Task
from curriculum.envs.ladder import Ladder
from curriculum.envs.registry import register_env

HINTS = string.ascii_lowercase + string.ascii_uppercase
MAX_LEVELS = len(HINTS) - 1  # k+1 digits need k+1 distinct hints
_HINTED = re.compile(r"(?:[A-Za-z][0-9])+")


@register_env("hinted_ladder")
class HintedLadder(Ladder):
    """Running sums mod 10 from the left behind index hints; level k = k additions (k+1 digits).

    Proposals, their parsing and the exact-match grading are the plain ladder's."""

    env_name, max_levels = "hinted_ladder", MAX_LEVELS

    def __init__(self, num_levels: int = 24):
        super().__init__(num_levels)

    def answer(self, digits: str) -> str:
        return hinted(digits, running_sums(digits))

    def solver_prompt(self, task: Task) -> str:
        return spaced(task.text) + "="

    def extract_answer(self, completion: str) -> str | None:
        """The hinted chain written (for majority votes: ``curriculum.pseudo_labels``); None if anything else."""
        answer = completion.strip()
        return answer if _HINTED.fullmatch(answer) else None


def hints(digits: str) -> list[str]:
    """Distinct letters for ``digits``, a function of the digits alone (a task always reads the same)."""
    return random.Random(f"hints:{digits}").sample(HINTS, len(digits))


def hinted(task_digits: str, shown: str) -> str:
    """``shown``'s characters behind the hints of ``task_digits``: ``hinted("4937", "4363")`` -> ``"a4k3c6z3"``."""
    return "".join(h + c for h, c in zip(hints(task_digits), shown))


def gaps(digits: str) -> list[int]:
    """0-2 dots before each pair, a function of the digits alone."""
    rng = random.Random(f"gaps:{digits}")
    return [rng.randint(0, 2) for _ in digits]


def spaced(digits: str) -> str:
    """The solver's view of a task: each digit behind its hint, 0-2 dots before each pair."""
    return "".join("." * g + h + d for g, h, d in zip(gaps(digits), hints(digits), digits))


def running_sums(digits: str) -> str:
    """``"4937"`` -> ``"4363"``: from the left, the sum mod 10 after each digit."""
    total, out = 0, []
    for d in digits:
        total = (total + int(d)) % 10
        out.append(str(total))
    return "".join(out)
