"""Answer extraction and scoring of solver completions.

Pure functions over strings and lists; the environment decides what a correct
answer is, these helpers cover the common cases.
"""
from __future__ import annotations

import functools
import re
import threading
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


def majority_answer(answers: Sequence[str | None], same: Callable[[str, str], bool] | None = None) -> tuple[str | None, float]:
    """Most common non-None answer and its share of all answers (R-Zero's pseudo-label).

    With ``same`` (an equivalence such as ``math_equal``) answers are counted by class, not by
    string: ``["1/2", "0.5", "3"]`` gives ``("1/2", 2/3)``. See ``vote``.
    """
    label, members = vote(answers, same)
    return label, (sum(members) / len(answers) if answers else 0.0)


def vote(answers: Sequence[str | None], same: Callable[[str, str], bool] | None = None) -> tuple[str | None, list[bool]]:
    """The majority label and which answers voted for it.

    Each answer joins the first class (in order of appearance) whose first answer it is
    ``same`` as (string equality without ``same``); the largest class wins, the earliest on a
    tie, and its first answer is the label. None (no answer) joins no class. The label's share,
    ``sum(members) / len(answers)``, is the task's solve rate p.
    """
    same = same or str.__eq__
    heads: list[str] = []
    joined: list[int | None] = []
    for a in answers:
        k = None
        if a is not None:
            k = next((i for i, h in enumerate(heads) if a == h or same(a, h)), None)
            if k is None:
                heads.append(a)
                k = len(heads) - 1
        joined.append(k)
    if not heads:
        return None, [False] * len(answers)
    counts = Counter(k for k in joined if k is not None)
    best = max(range(len(heads)), key=lambda i: (counts[i], -i))
    return heads[best], [k == best for k in joined]


def label_accuracy(labels: Sequence[str | None], truths: Sequence[str], same: Callable[[str, str], bool] | None = None) -> float:
    """Share of majority pseudo-labels equal (by ``same``) to the true answers; no label is a wrong one."""
    same = same or str.__eq__
    right = [label is not None and (label == truth or same(label, truth)) for label, truth in zip(labels, truths)]
    return sum(right) / len(right) if right else 0.0


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def extract_boxed(completion: str) -> str | None:
    r"""The content of the last ``\boxed{...}`` (braces balanced), stripped; None if there is none,
    it is empty, or it is not closed (a completion cut short)."""
    starts = [m.end() for m in _BOXED.finditer(completion or "")]
    if not starts:
        return None
    i, depth = starts[-1], 1
    for j in range(i, len(completion)):
        depth += {"{": 1, "}": -1}.get(completion[j], 0)
        if depth == 0:
            return completion[i:j].strip() or None
    return None


# Longer answers are compared as strings only: sympy on a long garbage string can take seconds.
MAX_PARSED_CHARS = 200


def math_equal(a: str, b: str) -> bool:
    """Two final answers are the same number or expression (``1/2``, ``0.5``, ``\\frac{1}{2}``), by
    math-verify (Hugging Face's LaTeX/sympy answer checker); equal strings always are, empty ones never."""
    a, b = a.strip(), b.strip()
    if not a or not b:  # an empty answer is no answer
        return False
    if a == b:
        return True
    if max(len(a), len(b)) > MAX_PARSED_CHARS:
        return False
    return _math_equal(*sorted((a, b)))


@functools.lru_cache(maxsize=1 << 16)
def _math_equal(a: str, b: str) -> bool:
    from math_verify import verify

    pa, pb = _parse_math(a), _parse_math(b)
    if not pa or not pb:
        return False
    try:
        timeout = _timeout()
        pa, pb = list(pa), list(pb)  # verify takes lists (a tuple is one "answer")
        return bool(verify(pa, pb, timeout_seconds=timeout) or verify(pb, pa, timeout_seconds=timeout))
    except Exception:  # noqa: BLE001 - a comparison that fails is no match
        return False


@functools.lru_cache(maxsize=1 << 16)
def _parse_math(answer: str) -> tuple:
    from math_verify import parse

    try:
        return tuple(parse(f"\\boxed{{{answer}}}", parsing_timeout=_timeout()))
    except Exception:  # noqa: BLE001 - unparsable is no answer to compare
        return ()


def _timeout() -> int | None:
    """math-verify's timeouts use SIGALRM, which only the main thread may set."""
    return 5 if threading.current_thread() is threading.main_thread() else None


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
