"""Integer arithmetic chains: ``7-2+9-4``, difficulty = number of operations.

The challenger writes an expression; the environment checks it against a strict
grammar and computes the reference answer exactly. The solver answers with an
integer. Level k has k operations (k+1 operands), so a tiny model that masters
short chains has longer ones to climb towards.
"""
from __future__ import annotations

import random
import re

from curriculum.envs.base import InvalidProposal, Task
from curriculum.envs.registry import int_kwarg, register_env
from solver.verifier import extract_int

MAX_LEVELS = 64
MAX_DIGITS = 18


@register_env("arithmetic")
class Arithmetic:
    """Chains of +/- over integers with ``max_digits`` digits each."""

    def __init__(self, num_levels: int = 6, max_digits: int = 1, operators: str = "+-"):
        self.num_levels = int_kwarg("arithmetic", "num_levels", num_levels, 1, MAX_LEVELS)
        self.max_digits = int_kwarg("arithmetic", "max_digits", max_digits, 1, MAX_DIGITS)
        # A repeated operator would count twice in a proposal's level.
        if not isinstance(operators, str) or not operators or set(operators) - set("+-*") \
                or len(set(operators)) < len(operators):
            raise ValueError(f"arithmetic needs operators: distinct characters of '+-*' (got {operators!r})")
        self.operators = operators
        number = rf"[0-9]{{1,{max_digits}}}"  # ASCII digits only: \d admits any script
        ops = re.escape(operators)
        self._grammar = re.compile(rf"{number}(?:[{ops}]{number})+")

    def challenger_prompt(self) -> str:
        return "Q:"

    def parse_proposal(self, text: str) -> Task:
        expr = text.strip()
        if not expr:
            raise InvalidProposal("empty")
        if not self._grammar.fullmatch(expr):
            raise InvalidProposal("grammar")
        level = sum(expr.count(op) for op in self.operators)
        if level > self.num_levels:
            raise InvalidProposal(f"too_long:{level}>{self.num_levels}")
        return Task(text=expr, answer=str(_evaluate(expr)), level=level)

    def format_proposal(self, task: Task) -> str:
        return task.text

    def solver_prompt(self, task: Task) -> str:
        return f"{task.text}="

    def format_answer(self, task: Task) -> str:
        return task.answer

    def tool_code(self, task: Task) -> str:
        """A program whose output is the answer (the expression itself, a notebook cell): the warm-up's tool call."""
        return task.text

    def score(self, task: Task, completion: str) -> float:
        value = extract_int(completion)
        return float(value is not None and str(value) == task.answer)

    def sample_task(self, level: int, rng: random.Random) -> Task:
        hi = 10**self.max_digits - 1
        parts = [str(rng.randint(0, hi))]
        for _ in range(level):
            parts += [rng.choice(self.operators), str(rng.randint(0, hi))]
        return self.parse_proposal("".join(parts))


def _evaluate(expr: str) -> int:
    """Exact value with the usual precedence (* before +/-), no eval()."""
    terms = re.split(r"(?=[+-])", expr)
    total = 0
    for term in terms:
        sign = -1 if term.startswith("-") else 1
        product = 1
        for factor in term.lstrip("+-").split("*"):
            product *= int(factor)
        total += sign * product
    return total
