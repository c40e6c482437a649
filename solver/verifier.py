"""Answer extraction and scoring of solver completions.

Pure functions over strings and lists; the environment decides what a correct
answer is, these helpers cover the common cases.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Sequence

_INT = re.compile(r"^\s*([+-]?[0-9]+)\s*$")


def extract_int(completion: str) -> int | None:
    """The integer a completion states (first line only), or None if it is not one."""
    first = completion.strip().split("\n", 1)[0] if completion else ""
    m = _INT.match(first)
    if m is None or len(m.group(1)) > 40:
        return None
    return int(m.group(1))


def majority_answer(answers: Sequence[str | None]) -> tuple[str | None, float]:
    """Most common non-None answer and its share of all answers (R-Zero's pseudo-label)."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None, 0.0
    answer, n = counts.most_common(1)[0]
    return answer, n / len(answers)


def solve_rate(scores: Sequence[float]) -> float:
    """Mean score over the m probe samples of one task."""
    return float(sum(scores)) / len(scores) if scores else 0.0


def score_all(score_fn: Callable[[str], float], completions: Sequence[str]) -> list[float]:
    """Scores of completions, with any scorer failure counted as 0 (never a crash)."""
    out = []
    for c in completions:
        try:
            s = float(score_fn(c))
        except Exception:  # noqa: BLE001 - model output must never take the trainer down
            s = 0.0
        out.append(s if 0.0 <= s <= 1.0 else 0.0)
    return out
