"""A generator of small Python functions for the code environments: typed steps composed into ``def f(x)``.

A program of level L is ``def f(x):`` with L steps, each one statement that rewrites ``x``
(arithmetic, a string op, a list op, a loop, a conditional), then ``return x``. Steps are chained
so their types line up (an int step may turn ``x`` into a str, a str step into a list, ...) and
their constants are drawn at random, so the space of programs is large even at level 1::

    def f(x):
        x = [v for v in x if v > 3]
        for i in range(len(x)):
            x[i] = x[i] + i
        x = sum(x)
        return x

Each step also has a short hint ("keep above 3"), which the induction task shows as its message.
Every step is bounded (no step grows a value more than a few times), so a generated program ends
fast on any input the generator draws; ``run_program`` evaluates one in-process (the generator's
own code, trusted: a warm-up draws tens of thousands), and the tests hold its outputs equal to the
sandbox's.
"""
from __future__ import annotations

import ast
import random
from dataclasses import dataclass

TYPES = ("int", "str", "list")
LETTERS = "abcde"


@dataclass(frozen=True)
class Step:
    """One statement on ``x`` (four-space indented lines of f's body), typed ``takes -> gives``.

    ``src`` and ``hint`` hold placeholders ``{a}``, ``{b}`` (integers from ``a``, ``b``: inclusive
    ranges) and ``{c}``, ``{d}`` (letters of ``LETTERS``).
    """

    takes: str
    gives: str
    src: str
    hint: str
    a: tuple[int, int] = (1, 9)
    b: tuple[int, int] = (1, 5)


STEPS = (
    # int -> int
    Step("int", "int", "x = x + {a}", "add {a}"),
    Step("int", "int", "x = x - {a}", "subtract {a}"),
    Step("int", "int", "x = x * {a}", "times {a}", a=(2, 4)),
    Step("int", "int", "x = x // {a}", "divide by {a}", a=(2, 4)),
    Step("int", "int", "x = x % {a}", "mod {a}", a=(3, 9)),
    Step("int", "int", "x = abs(x - {a})", "distance to {a}"),
    Step("int", "int", "x = max(x, {a})", "at least {a}", a=(0, 9)),
    Step("int", "int", "if x > {a}:\n    x = x - {b}\nelse:\n    x = x + {b}", "step {b} toward {a}", a=(0, 9)),
    Step("int", "int", "if x % 2 == 0:\n    x = x // 2\nelse:\n    x = 3 * x + 1", "collatz step"),
    Step("int", "int", "for i in range({a}):\n    x = x + i", "add 0..{a} exclusive", a=(2, 5)),
    # int -> str, list
    Step("int", "str", "x = 'abcde'[x % 5] * (x % 3 + 1)", "letter x%5, repeated"),
    Step("int", "list", "x = [x, x + {a}, x * {b}]", "list x, x+{a}, x*{b}", b=(2, 3)),
    Step("int", "list", "x = list(range(x % {a}))", "range of x mod {a}", a=(3, 6)),
    # str -> str
    Step("str", "str", "x = x[::-1]", "reverse"),
    Step("str", "str", "x = x + '{c}'", "append {c}"),
    Step("str", "str", "x = x[1:]", "drop first"),
    Step("str", "str", "x = x.replace('{c}', '{d}')", "{c} to {d}"),
    Step("str", "str", "x = ''.join(sorted(x))", "sort letters"),
    Step("str", "str", "x = x[::2]", "every second"),
    Step("str", "str", "for i in range({a}):\n    x = x[1:] + x[:1]", "rotate {a}", a=(1, 3)),
    Step("str", "str", "if len(x) > {a}:\n    x = x[:{a}]\nelse:\n    x = x + x", "cut at {a} or double", a=(2, 5)),
    # str -> int, list
    Step("str", "int", "x = len(x)", "length"),
    Step("str", "int", "x = x.count('{c}')", "count {c}"),
    Step("str", "int", "x = sum(ord(ch) % {a} for ch in x)", "sum of codes mod {a}", a=(2, 9)),
    Step("str", "list", "x = [ord(ch) % {a} for ch in x]", "codes mod {a}", a=(2, 9)),
    Step("str", "list", "x = [len(w) for w in x.split('{c}')]", "part lengths at {c}"),
    # list -> list
    Step("list", "list", "x = sorted(x)", "sort"),
    Step("list", "list", "x = x[::-1]", "reverse"),
    Step("list", "list", "x = [v * {a} for v in x]", "each times {a}", a=(2, 3)),
    Step("list", "list", "x = [v + {a} for v in x]", "each plus {a}"),
    Step("list", "list", "x = [v % {a} for v in x]", "each mod {a}", a=(2, 5)),
    Step("list", "list", "x = [v for v in x if v % {a} == 0]", "keep multiples of {a}", a=(2, 3)),
    Step("list", "list", "x = [v for v in x if v > {a}]", "keep above {a}", a=(0, 5)),
    Step("list", "list", "x = x + [{a}]", "append {a}"),
    Step("list", "list", "x = x[1:]", "drop first"),
    Step("list", "list", "for i in range(len(x)):\n    x[i] = x[i] + i", "add index"),
    # list -> int, str
    Step("list", "int", "x = sum(x)", "sum"),
    Step("list", "int", "x = len(x)", "length"),
    Step("list", "int", "x = max(x + [{a}])", "max with {a}", a=(0, 9)),
    Step("list", "int", "x = sum(v * v for v in x)", "sum of squares"),
    Step("list", "str", "x = ''.join('abcde'[v % 5] for v in x)", "letters of values"),
)


@dataclass(frozen=True)
class Program:
    """A generated ``def f(x)``: canonical source (``ast.unparse``), the type of x, and a hint per step."""

    source: str
    takes: str
    hint: str


def random_program(level: int, rng: random.Random, takes: str | None = None) -> Program:
    """``level`` steps chained from an input of type ``takes`` (random if None), then ``return x``."""
    takes = takes or rng.choice(TYPES)
    kind, body, hints = takes, [], []
    for _ in range(level):
        step = rng.choice([s for s in STEPS if s.takes == kind])
        c, d = rng.sample(LETTERS, 2)
        values = {"a": rng.randint(*step.a), "b": rng.randint(*step.b), "c": c, "d": d}
        body.append(step.src.format(**values))
        hints.append(step.hint.format(**values))
        kind = step.gives
    lines = [f"    {line}" for stmt in body for line in stmt.split("\n")]
    source = "\n".join(["def f(x):", *lines, "    return x"])
    return Program(canonical(source), takes, ", ".join(hints))


def random_input(takes: str, rng: random.Random) -> str:
    """An argument of type ``takes`` as Python source: ``7``, ``'cab'`` or ``[3, 0, 8]``."""
    if takes == "int":
        return repr(rng.randint(-5, 20))
    if takes == "str":
        return repr("".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 6))))
    return repr([rng.randint(0, 9) for _ in range(rng.randint(2, 5))])


def canonical(source: str) -> str:
    """The source as ``ast.unparse`` writes it: one spelling per program (spaces, quotes, no comments)."""
    return ast.unparse(ast.parse(source))


def run_program(source: str, args: list[str]) -> list[str]:
    """``repr(f(*args))`` for each argument list (Python source) of a *generated* program, in-process.

    Only for programs of ``random_program``: model-written code runs in the sandbox, never here.
    """
    scope: dict = {}
    exec(compile(source, "<generated>", "exec"), scope)  # noqa: S102 - the generator's own code
    return [repr(scope["f"](*ast.literal_eval(f"({a},)"))) for a in args]
