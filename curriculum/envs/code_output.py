"""Program-output prediction (Absolute Zero's deduction task), grounded by execution.

The challenger writes a short Python program; the environment runs it twice in the
sandbox (``solver.sandbox``), and a program that runs cleanly, prints a short answer
and prints the same thing both times becomes a task whose reference answer is that
output. The solver reads the program and predicts what it prints. Difficulty level
grows with the program's size (AST nodes) and its loops.
"""
from __future__ import annotations

import ast
import atexit
import functools
import random
import threading

from curriculum.envs.base import FailedProposal, InvalidProposal, Task
from curriculum.envs.registry import int_kwarg, register_env

_SHARED: dict[tuple, object] = {}
_LOCK = threading.Lock()


def shared_sandbox(workers: int, timeout_s: float, memory_mb: int):
    """One sandbox pool per process and settings, closed at exit."""
    from solver.sandbox import Sandbox

    key = (workers, timeout_s, memory_mb)
    with _LOCK:
        if key not in _SHARED:
            box = Sandbox(workers=workers, timeout_s=timeout_s, memory_mb=memory_mb, max_output_bytes=4096)
            atexit.register(box.close)
            _SHARED[key] = box
        return _SHARED[key]


@register_env("code_output")
class CodeOutput:
    """Predict the output of a small deterministic Python program."""

    def __init__(self, num_levels: int = 4, max_chars: int = 300, max_answer_chars: int = 24,
                 workers: int = 2, timeout_s: float = 2.0, memory_mb: int = 256):
        # Levels grow with program size (1 + loops + nodes / 20), so proposals of a few hundred
        # characters stay below 16; the bound keeps the benchmark (50 x eval.per_level draws per
        # level at most) quick to build.
        self.num_levels = int_kwarg("code_output", "num_levels", num_levels, 1, 16)
        self.max_chars = int_kwarg("code_output", "max_chars", max_chars, 8, 4096)
        self.max_answer_chars = int_kwarg("code_output", "max_answer_chars", max_answer_chars, 1, 1024)
        int_kwarg("code_output", "workers", workers, 1, 64)
        int_kwarg("code_output", "memory_mb", memory_mb, 32, 1 << 16)  # the sandbox needs 32
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= 60:
            raise ValueError(f"code_output needs a number 0 < timeout_s <= 60 (got {timeout_s!r})")
        self._box_args = (workers, timeout_s, memory_mb)

    @property
    def sandbox(self):
        return shared_sandbox(*self._box_args)

    def challenger_prompt(self) -> str:
        return "#program\n"

    def parse_proposal(self, text: str) -> Task:
        code = text.strip("\n")
        if not code.strip():
            raise InvalidProposal("empty")
        if len(code) > self.max_chars:
            raise InvalidProposal(f"too_long:{len(code)}>{self.max_chars}")
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError):
            raise InvalidProposal("syntax") from None
        if not any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "print" for n in ast.walk(tree)):
            raise InvalidProposal("no_print")
        return Task(text=code, answer=self._ground(code), level=self.level_of(tree))

    @functools.lru_cache(maxsize=65536)  # the warm-up generator repeats programs; execution is the cost
    def _ground(self, code: str) -> str:
        """The reference answer: the program's output, run twice in the sandbox."""
        report = self.sandbox.check_determinism(code)
        result = report.result
        if result.status != "ok":
            raise FailedProposal(f"exec_{result.status}")
        if not report.deterministic:
            raise FailedProposal("nondeterministic")
        answer = result.stdout.strip()
        if not answer or len(answer) > self.max_answer_chars:
            raise FailedProposal("answer_length")
        return answer

    def level_of(self, tree: ast.AST) -> int:
        """1 + loops + AST size / 20, capped at num_levels."""
        nodes = sum(1 for _ in ast.walk(tree))
        loops = sum(isinstance(n, (ast.For, ast.While, ast.ListComp)) for n in ast.walk(tree))
        return max(1, min(self.num_levels, 1 + loops + nodes // 20))

    @staticmethod
    def canonical(text: str) -> str:
        """The program as ``ast.unparse`` writes it (spacing, comments and quotes normalised), else the
        stripped text: the held-out exclusion's key, so a variant of a benchmark program never joins the pool."""
        try:
            return ast.unparse(ast.parse(text))
        except (SyntaxError, ValueError):
            return text.strip()

    def format_proposal(self, task: Task) -> str:
        return task.text

    def solver_prompt(self, task: Task) -> str:
        return f"{task.text}\n#output:"

    def format_answer(self, task: Task) -> str:
        return task.answer

    def score(self, task: Task, completion: str) -> float:
        return float(completion.strip() == task.answer)

    def sample_task(self, level: int, rng: random.Random) -> Task:
        """Straight-line arithmetic, then loops and lists as the level rises."""
        a, b, n = rng.randint(0, 9), rng.randint(1, 9), rng.randint(2, 5)
        templates = [
            f"print({a}+{b})",
            f"x={a}\nfor i in range({n}):\n    x+={b}\nprint(x)",
            f"s=[{a},{b},{n}]\ns.sort()\nprint(s[1]*{b})",
            f"t=0\nfor i in range({n}):\n    for j in range({b % 3 + 1}):\n        t+=i*j+{a}\nprint(t)",
            f"print(sum([k*{b} for k in range({n})])-{a})",
        ]
        candidates = []
        for t in templates:
            task = self.parse_proposal(t)
            candidates.append(task)
            if task.level == level:
                return task
        return min(candidates, key=lambda t: abs(t.level - level))
