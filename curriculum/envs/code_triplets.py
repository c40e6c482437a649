"""Absolute Zero's three code tasks on triplets (program, input, output), grounded in the sandbox.

A triplet is a program defining ``f``, an input (``f``'s arguments as Python literals) and the
output ``repr(f(input))``, which the sandbox computes. Each task type reads it another way
(Absolute Zero Reasoner, Zhao et al., 2025):

- ``deduction``: program and input -> the output. An answer scores 1 if it is the same literal
  (``[1,2]`` = ``[1, 2]``); no execution needed.
- ``abduction``: program and output -> an input. The program runs in the sandbox on the solver's
  input (literals only, never code), and *any* input that gives the same output scores 1.
- ``induction``: a message and the first half of the input/output pairs -> the program. The
  solver's program runs in the sandbox on the held-back inputs; it scores the share of them
  whose output matches.

The challenger is asked for one type per prompt (``#deduction``, ...) and writes a program and
its input(s)::

    def f(x):
        return x * 2 + 1
    #input: 3

(induction: 2 to ``induction_inputs`` distinct ``#input:`` lines, then an optional ``#message:``).
The environment runs the program on them twice in the sandbox; a program that fails, times out,
prints, differs between runs or returns something that is no literal is rejected with the reason
(``exec_timeout``, ``nondeterministic``, ``prints``, ``output_not_literal``, ...). A task's text is
the whole triplet (``#deduction`` line first, then program, ``#input:``/``#output:`` pairs, message);
its prompt to the solver shows only the type's part of it. Levels count the statements of the
program's functions. ``sample_task`` draws from ``curriculum.envs.programs``, a generator that
composes typed steps with random constants.
"""
from __future__ import annotations

import ast
import functools
import random
import warnings
from dataclasses import dataclass

from curriculum.envs.base import FailedProposal, InvalidProposal, Task
from curriculum.envs.code_output import shared_sandbox
from curriculum.envs.programs import random_input, random_program, run_program
from curriculum.envs.registry import int_kwarg, register_env

KINDS = ("deduction", "abduction", "induction")
# With ``restrict`` (Absolute Zero bans such keywords too), programs are about computation: imports from
# this list only, none of these names, no dunder attributes. A policy, not the security boundary: the
# sandbox contains whatever gets past it (``restrict=False`` sends everything there).
ALLOWED_IMPORTS = frozenset({"math", "itertools", "functools", "collections", "string", "re", "heapq", "bisect",
                             "operator", "statistics", "fractions", "decimal", "copy", "typing", "dataclasses"})
FORBIDDEN_NAMES = frozenset({"__import__", "eval", "exec", "compile", "open", "input", "breakpoint", "globals",
                             "locals", "vars", "getattr", "setattr", "delattr", "exit", "quit", "help", "memoryview"})
INPUT, OUTPUT, MESSAGE = "#input:", "#output:", "#message:"


@dataclass(frozen=True)
class Triplet:
    """A grounded task: ``outputs[i] == repr(f(inputs[i]))``; one pair except for induction."""

    kind: str
    program: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    message: str = ""

    @property
    def shown(self) -> int:
        """Pairs shown to the solver: all but induction's held-back half (the first ceil(n/2) are shown)."""
        return (len(self.inputs) + 1) // 2 if self.kind == "induction" else len(self.inputs)

    def text(self) -> str:
        pairs = "".join(f"\n{INPUT} {i}\n{OUTPUT} {o}" for i, o in zip(self.inputs, self.outputs))
        return f"#{self.kind}\n{self.program}{pairs}" + (f"\n{MESSAGE} {self.message}" if self.message else "")

    @staticmethod
    @functools.lru_cache(maxsize=65536)
    def from_text(text: str) -> "Triplet":
        """The inverse of ``text()`` (a task's text is always written by ``text()``)."""
        head, rest = text.split("\n", 1)
        lines = rest.split("\n")
        cut = next(i for i, ln in enumerate(lines) if ln.startswith(INPUT))
        tail = lines[cut:]
        message = tail.pop()[len(MESSAGE):].strip() if tail[-1].startswith(MESSAGE) else ""
        inputs = tuple(ln[len(INPUT):].strip() for ln in tail[0::2])
        outputs = tuple(ln[len(OUTPUT):].strip() for ln in tail[1::2])
        return Triplet(head[1:], "\n".join(lines[:cut]), inputs, outputs, message)


@register_env("code_triplets")
class CodeTriplets:
    """Deduction, abduction and induction on sandbox-grounded triplets (``task_types`` picks which)."""

    def __init__(self, task_types=KINDS, num_levels: int = 4, max_chars: int = 300, max_answer_chars: int = 32,
                 max_message_chars: int = 64, induction_inputs: int = 4, restrict: bool = True, workers: int = 2,
                 timeout_s: float = 2.0, memory_mb: int = 256):
        types = tuple(task_types) if isinstance(task_types, (list, tuple)) else ()
        if not types or len(set(types)) < len(types) or set(types) - set(KINDS):
            raise ValueError(f"code_triplets needs task_types: distinct names of {list(KINDS)} (got {task_types!r})")
        self.task_types = tuple(k for k in KINDS if k in types)  # one order, whatever the config's
        # Levels count statements (one per generator step); the bound keeps programs to a few hundred characters.
        self.num_levels = int_kwarg("code_triplets", "num_levels", num_levels, 1, 12)
        self.max_chars = int_kwarg("code_triplets", "max_chars", max_chars, 32, 4096)
        self.max_answer_chars = int_kwarg("code_triplets", "max_answer_chars", max_answer_chars, 8, 1024)
        self.max_message_chars = int_kwarg("code_triplets", "max_message_chars", max_message_chars, 0, 1024)
        self.induction_inputs = int_kwarg("code_triplets", "induction_inputs", induction_inputs, 2, 16)
        if not isinstance(restrict, bool):
            raise ValueError(f"code_triplets needs restrict: true or false (got {restrict!r})")
        self.restrict = restrict
        int_kwarg("code_triplets", "workers", workers, 1, 64)
        int_kwarg("code_triplets", "memory_mb", memory_mb, 32, 1 << 16)  # the sandbox needs 32
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= 60:
            raise ValueError(f"code_triplets needs a number 0 < timeout_s <= 60 (got {timeout_s!r})")
        self._box_args = (workers, timeout_s, memory_mb)
        self.executions = 0  # sandbox runs, cumulative (stats())
        self.timeouts = 0
        for level in range(1, self.num_levels + 1):  # too small a max_chars fails here, not mid-run
            for kind in self.task_types:
                self.sample_task(level, random.Random(level), kind=kind)

    @property
    def sandbox(self):
        return shared_sandbox(*self._box_args)

    def stats(self) -> dict[str, float]:
        """Cumulative counters: sandbox runs (grounding and scoring; cached results are not run again)."""
        return {"sandbox/executions": self.executions, "sandbox/timeouts": self.timeouts}

    # ------------------------------------------------------------ challenger

    def challenger_prompt(self, kind: str | None = None) -> str:
        return f"#{self._kind(kind)}\n"

    def parse_proposal(self, text: str, kind: str | None = None) -> Task:
        kind = self._kind(kind)
        lines = text.strip("\n").split("\n")
        cut = next((i for i, ln in enumerate(lines) if ln.startswith(INPUT)), None)
        if cut is None:
            raise InvalidProposal("no_input")
        program = self._program("\n".join(lines[:cut]))
        inputs, message = [], None
        for ln in lines[cut:]:
            if ln.startswith(INPUT) and message is None:
                inputs.append(self._args(ln[len(INPUT):]))
            elif ln.startswith(MESSAGE) and message is None and kind == "induction":
                message = ln[len(MESSAGE):].strip()
            else:
                raise InvalidProposal("format")
        most = self.induction_inputs if kind == "induction" else 1
        least = 2 if kind == "induction" else 1
        if not least <= len(inputs) <= most:
            raise InvalidProposal(f"inputs:{len(inputs)} not in [{least}, {most}]")
        if len(set(inputs)) < len(inputs):
            raise InvalidProposal("repeated_input")
        if message is not None and len(message) > self.max_message_chars:
            raise InvalidProposal("message_length")
        outputs = self._ground(program, tuple(inputs))
        if kind == "induction" and len(set(outputs)) < 2:
            raise FailedProposal("constant_outputs")  # `return c` would solve it
        return self._task(Triplet(kind, program, tuple(inputs), outputs, message or ""))

    def format_proposal(self, task: Task) -> str:
        t = Triplet.from_text(task.text)
        inputs = "".join(f"\n{INPUT} {i}" for i in t.inputs)
        return t.program + inputs + (f"\n{MESSAGE} {t.message}" if t.message else "")

    def _kind(self, kind: str | None) -> str:
        kind = kind or self.task_types[0]
        if kind not in self.task_types:
            raise ValueError(f"task type {kind!r} is not one of this environment's {list(self.task_types)}")
        return kind

    def _task(self, t: Triplet) -> Task:
        # The answer: what a correct solver writes (abduction: the challenger's input, one of many right ones).
        answer = {"deduction": t.outputs[0], "abduction": t.inputs[0], "induction": t.program}[t.kind]
        return Task(text=t.text(), answer=answer, level=self.level_of(t.program), kind=t.kind)

    def _program(self, source: str) -> str:
        """A program's canonical source (``ast.unparse``): imports and definitions only, one of them ``f``."""
        if not source.strip():
            raise InvalidProposal("empty")
        if len(source) > self.max_chars:
            raise InvalidProposal(f"too_long:{len(source)}>{self.max_chars}")
        try:
            tree = _parse(source)
            code = ast.unparse(tree)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise InvalidProposal("syntax") from None
        defs = (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
        if not all(isinstance(node, defs) for node in tree.body):
            raise InvalidProposal("top_level_code")  # nothing runs (or prints) but f
        if not any(isinstance(node, ast.FunctionDef) and node.name == "f" for node in tree.body):
            raise InvalidProposal("no_f")
        if self.restrict and (name := _forbidden(tree)):
            raise InvalidProposal(f"forbidden:{name}")
        if len(code) > self.max_chars:
            raise InvalidProposal(f"too_long:{len(code)}>{self.max_chars}")
        if any(ln.startswith((INPUT, OUTPUT, MESSAGE, "#")) for ln in code.split("\n")):
            raise InvalidProposal("markers")  # a multi-line string that would split the task's text
        return code

    def _args(self, text: str) -> str:
        """Arguments of f as canonical literals (``3,'ab'`` -> ``3, 'ab'``); code is refused, never run."""
        s = text.strip()
        if not s or len(s) > self.max_answer_chars:
            raise InvalidProposal("input_length")
        try:
            call = _parse(f"f({s})", mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise InvalidProposal("input_syntax") from None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "f"
                and call.args and not call.keywords and not any(isinstance(a, ast.Starred) for a in call.args)):
            raise InvalidProposal("input_form")
        try:
            values = [ast.literal_eval(a) for a in call.args]
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise InvalidProposal("input_not_literal") from None
        if any(_has_set(v) for v in values):
            raise InvalidProposal("input_set")  # a set of strings prints in a per-process order
        return ", ".join(repr(v) for v in values)

    def _ground(self, program: str, inputs: tuple[str, ...]) -> tuple[str, ...]:
        """The outputs: ``repr(f(input))`` per input, run twice in the sandbox; else InvalidProposal."""
        outputs, reason = self._run_twice(program, inputs)
        if reason:
            raise FailedProposal(reason)
        return outputs

    @functools.lru_cache(maxsize=65536)  # proposals repeat, rejected ones too; execution is the cost
    def _run_twice(self, program: str, inputs: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
        """(outputs, "") or ((), the reason for rejecting them)."""
        code = program + "".join(f"\nprint(repr(f({a})))" for a in inputs)
        report = self.sandbox.check_determinism(code)
        self._count(report.results)
        result = report.result
        if result.status != "ok":
            return (), f"exec_{result.status}"
        if not report.deterministic:
            return (), "nondeterministic"
        outputs = result.stdout.split("\n")
        if outputs.pop() != "" or len(outputs) != len(inputs):
            return (), "prints"
        for out in outputs:
            if len(out) > self.max_answer_chars:
                return (), "answer_length"
            if not _is_literal(out):
                return (), "output_not_literal"
        return tuple(outputs), ""

    def level_of(self, program: str) -> int:
        """Statements of the program's functions (a trailing ``return`` not counted), in [1, num_levels]."""
        tree = ast.parse(program)
        count = 0
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                count += len(node.body) - isinstance(node.body[-1], ast.Return)
        return max(1, min(self.num_levels, count))

    # ------------------------------------------------------------ solver

    def solver_prompt(self, task: Task) -> str:
        t = Triplet.from_text(task.text)
        if t.kind == "deduction":
            return f"{t.program}\n{INPUT} {t.inputs[0]}\n{OUTPUT}"
        if t.kind == "abduction":
            return f"{t.program}\n{OUTPUT} {t.outputs[0]}\n{INPUT}"
        pairs = "".join(f"{INPUT} {i}\n{OUTPUT} {o}\n" for i, o in zip(t.inputs[: t.shown], t.outputs[: t.shown]))
        return (f"{MESSAGE} {t.message}\n" if t.message else "") + pairs + "#program:\n"

    def format_answer(self, task: Task) -> str:
        return task.answer

    def score(self, task: Task, completion: str) -> float:
        return self._score(task.text, completion.strip())

    @functools.lru_cache(maxsize=65536)  # a group's answers repeat; each distinct one runs once
    def _score(self, text: str, answer: str) -> float:
        t = Triplet.from_text(text)
        if t.kind == "deduction":
            return float(_same_literal(answer, t.outputs[0], 4 * self.max_answer_chars))
        try:
            if t.kind == "abduction":
                program, inputs, outputs = t.program, [self._args(answer)], t.outputs
            else:
                program, inputs, outputs = self._program(answer), t.inputs[t.shown :], t.outputs[t.shown :]
        except InvalidProposal:
            return 0.0
        return self._matches(program, inputs, outputs)

    def _matches(self, program: str, inputs, outputs) -> float:
        """Share of ``inputs`` on which ``program`` prints ``outputs`` (one sandbox run; 0 unless it ends cleanly)."""
        calls = "".join(f"\ntry:\n    print(repr(f({a})))\nexcept Exception:\n    print('!')" for a in inputs)
        result = self.sandbox.run(program + calls)
        self._count([result])
        lines = result.stdout.split("\n")
        if result.status != "ok" or lines.pop() != "" or len(lines) != len(outputs):
            return 0.0
        return sum(a == b for a, b in zip(lines, outputs)) / len(outputs)

    def _count(self, results) -> None:
        self.executions += len(results)
        self.timeouts += sum(r.status == "timeout" for r in results)

    # ------------------------------------------------------------ generator

    def sample_task(self, level: int, rng: random.Random, kind: str | None = None) -> Task:
        """A generated program of ``level`` steps and random inputs (the type drawn at random if None)."""
        kind = kind or rng.choice(self.task_types)
        n = self.induction_inputs if kind == "induction" else 1
        for _ in range(200):
            prog = random_program(level, rng)
            inputs = list(dict.fromkeys(random_input(prog.takes, rng) for _ in range(3 * n)))[:n]
            try:
                outputs = run_program(prog.source, inputs)
            except Exception:  # noqa: BLE001 - a step that fails on this input: draw again
                continue
            if (len(inputs) < n or len(prog.source) > self.max_chars
                    or max(map(len, inputs + outputs)) > self.max_answer_chars
                    or (kind == "induction" and len(set(outputs)) < 2)):
                continue
            message = prog.hint[: self.max_message_chars] if kind == "induction" else ""
            return self._task(Triplet(kind, prog.source, tuple(inputs), tuple(outputs), message.strip()))
        raise ValueError(f"code_triplets could not generate a level-{level} {kind} task within max_chars "
                         f"({self.max_chars}) and max_answer_chars ({self.max_answer_chars}); raise them")


def _parse(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse`` without the SyntaxWarnings (``1a``, ``"\\d"``) that model output would print on stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(source, mode=mode)


def _is_literal(text: str) -> bool:
    try:
        ast.literal_eval(_parse(text, "eval"))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _same_literal(answer: str, gold: str, max_chars: int) -> bool:
    """``answer`` is the literal ``gold`` (a repr) up to spelling: ``[1,2]`` matches ``[1, 2]``."""
    if answer == gold:
        return True
    if len(answer) > max_chars:
        return False
    try:
        return repr(ast.literal_eval(_parse(answer, "eval"))) == gold
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _forbidden(tree: ast.AST) -> str | None:
    """The first import outside ALLOWED_IMPORTS, name of FORBIDDEN_NAMES or dunder attribute; None if none."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if a.name.split(".")[0] not in ALLOWED_IMPORTS]
        elif isinstance(node, ast.ImportFrom):
            allowed = node.level == 0 and (node.module or "").split(".")[0] in ALLOWED_IMPORTS
            bad = [] if allowed else [node.module or "."]
        elif isinstance(node, ast.Name):
            bad = [node.id] if node.id in FORBIDDEN_NAMES else []
        elif isinstance(node, ast.Attribute):
            bad = [node.attr] if node.attr.startswith("__") else []
        else:
            continue
        if bad:
            return bad[0]
    return None


def _has_set(value) -> bool:
    if isinstance(value, (set, frozenset)):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_set(v) for v in value)
    if isinstance(value, dict):
        return any(_has_set(k) or _has_set(v) for k, v in value.items())
    return False
