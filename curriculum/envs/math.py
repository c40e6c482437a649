"""Math questions in R-Zero's manner: the challenger asks, the solver's majority answers.

The challenger writes one question between ``<question>`` and ``</question>`` (R-Zero's tags),
with no answer: the environment cannot compute one, so a proposal is a task without a reference
answer (``Task.answer == ""``). The solver reasons and ends with ``\\boxed{...}``; its m probe
answers are compared by math equivalence (``solver.verifier.math_equal``, math-verify), the most
common one is the task's pseudo-label and its share the solve rate p (R-Zero). A task that enters
the pool keeps its label, and the solver is trained against it.

The environment also has tasks with known answers: word problems generated procedurally, level L
taking L steps of arithmetic on a quantity (fractions from level 2 on). They are the held-out
benchmark and, hidden among the probes (``curriculum.label_check_rate``), measure how often the
majority label is right.

A proposal's level is a rough proxy, the numbers its question mentions (1 + count / 2, capped):
the environment has no difficulty of its own for free text; p is the real one.
"""
from __future__ import annotations

import random
import re
from fractions import Fraction

from curriculum.envs.base import InvalidProposal, Task
from curriculum.envs.registry import int_kwarg, register_env
from solver.verifier import extract_boxed, math_equal

CHALLENGER_SYSTEM = (
    "You are an expert competition-math problem setter.\n"
    "First think privately about a new, non-trivial problem with a single, checkable final answer "
    "(a number or a short expression), from any field of mathematics: algebra, geometry, number theory, "
    "combinatorics, probability, calculus. Aim for a problem that few strong high-school students could solve, "
    "and avoid famous contest problems.\n"
    "Then output exactly one block and nothing else:\n\n"
    "<question>\nThe full problem statement.\n</question>\n\n"
    "Do not give the answer or a solution."
)
CHALLENGER_USER = "Write one new, challenging question now, in the format above."
# For small instruct models (SmolLM2-135M ignored the R-Zero prompt: 0 of 16 proposals had the tags):
# a short instruction and worked examples of the format as earlier chat turns (``examples=K``).
SHORT_CHALLENGER_SYSTEM = ("You write short math word problems with one number as the answer. Reply with one "
                           "problem between <question> and </question>, and do not give the answer.")
SHORT_CHALLENGER_USER = "Write one new math problem."
WORKED_EXAMPLES = [
    "Mia has 12 apples. She gives 5 apples to her friend. How many apples does Mia have now?",
    "A box holds 6 pencils. How many pencils are in 4 boxes?",
    "Tom reads 15 pages a day. How many pages does he read in 3 days?",
    "A rope is 20 meters long. It is cut into 4 equal pieces. How long is each piece?",
]
# ... and for the solver, one worked answer that ends in \\boxed{} (unprompted, SmolLM2 never boxes).
SOLVER_EXAMPLE = ("Sam has 7 marbles. Then Sam gets 5 more marbles. How many marbles does Sam have now?",
                  "Sam starts with 7 marbles and gets 5 more: 7 + 5 = 12.\n\\boxed{12}")
SOLVER_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."

# the generator's sentences (sample_task), read back by worked_answer
_START = re.compile(r"\w+ has (\d+) ")
_STEPS = [(re.compile(r"gets (\d+) more"), "+"), (re.compile(r"uses (\d+) "), "-"),
          (re.compile(r"becomes (\d+) times as large"), "x"), (re.compile(r"into (\d+) parts"), "/")]
_QUESTION = re.compile(r"<question>(.*?)</question>", re.DOTALL)
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana"]
STUFF = ["cups of flour", "liters of water", "kilograms of rice", "meters of rope"]


@register_env("math")
class Math:
    """Free-form math questions graded by majority vote; generated word problems with known answers."""

    needs_pretrained_model = True  # natural-language prompts: config validation asks for model.path

    def __init__(self, num_levels: int = 4, max_question_chars: int = 2000, examples: int = 0):
        self.num_levels = int_kwarg("math", "num_levels", num_levels, 1, 16)
        self.max_question_chars = int_kwarg("math", "max_question_chars", max_question_chars, 16, 16384)
        # 0: R-Zero's prompt; K: the short prompt with K worked examples of the format
        self.examples = int_kwarg("math", "examples", examples, 0, len(WORKED_EXAMPLES))

    # ------------------------------------------------------------ challenger

    def challenger_prompt(self) -> list[dict]:
        if self.examples:
            shots = [[{"role": "user", "content": SHORT_CHALLENGER_USER},
                      {"role": "assistant", "content": self.format_proposal(Task(text=q, answer="", level=1))}]
                     for q in WORKED_EXAMPLES[:self.examples]]
            return [{"role": "system", "content": SHORT_CHALLENGER_SYSTEM}, *sum(shots, []),
                    {"role": "user", "content": SHORT_CHALLENGER_USER}]
        return [{"role": "system", "content": CHALLENGER_SYSTEM}, {"role": "user", "content": CHALLENGER_USER}]

    def parse_proposal(self, text: str) -> Task:
        """The last ``<question>`` block, whitespace tidied; anything outside the tags is ignored."""
        blocks = _QUESTION.findall(text)
        if not blocks:
            raise InvalidProposal("no_question")
        question = "\n".join(" ".join(line.split()) for line in blocks[-1].strip().splitlines()).strip()
        if not question:
            raise InvalidProposal("empty")
        if len(question) > self.max_question_chars:
            raise InvalidProposal(f"too_long:{len(question)}>{self.max_question_chars}")
        if "\\boxed" in question:
            raise InvalidProposal("answer_in_question")
        return Task(text=question, answer="", level=self.level_of(question))

    def level_of(self, question: str) -> int:
        return max(1, min(self.num_levels, 1 + len(_NUMBER.findall(question)) // 2))

    def format_proposal(self, task: Task) -> str:
        return f"<question>\n{task.text}\n</question>"

    # ------------------------------------------------------------ solver

    def solver_prompt(self, task: Task) -> list[dict]:
        shot = [{"role": "user", "content": SOLVER_EXAMPLE[0]},
                {"role": "assistant", "content": SOLVER_EXAMPLE[1]}] if self.examples else []
        return [{"role": "system", "content": SOLVER_SYSTEM}, *shot, {"role": "user", "content": task.text}]

    def format_answer(self, task: Task) -> str:
        return f"\\boxed{{{task.answer}}}"

    def worked_answer(self, task: Task) -> str:
        """A generated problem solved one step a line (``7 + 5 = 12.``), then the boxed answer: what a
        supervised warm-up teaches (``selfplay model warmup``). Text this generator did not write: the answer alone."""
        start = _START.match(task.text)
        if start is None:
            return self.format_answer(task)
        value, lines = Fraction(int(start.group(1))), []
        for sentence in task.text.split(". ")[1:]:
            for pattern, op in _STEPS:
                if found := pattern.search(sentence):
                    n = int(found.group(1))
                    new = {"+": value + n, "-": value - n, "x": value * n, "/": value / n}[op]
                    lines.append(f"{_fraction(value)} {op} {n} = {_fraction(new)}.")
                    value = new
        if _fraction(value) != task.answer:
            return self.format_answer(task)
        return "\n".join([*lines, self.format_answer(task)])

    def extract_answer(self, completion: str) -> str | None:
        """The last ``\\boxed{...}``'s content; None without one (an unboxed answer is no answer)."""
        return extract_boxed(completion)

    def same_answer(self, a: str, b: str) -> bool:
        return math_equal(a, b)

    def score(self, task: Task, completion: str) -> float:
        """1 if the boxed answer equals ``task.answer`` (a reference or a pseudo-label); 0 without one."""
        answer = self.extract_answer(completion)
        return float(bool(task.answer) and answer is not None and math_equal(answer, task.answer))

    # ------------------------------------------------------------ generator (known answers)

    def sample_task(self, level: int, rng: random.Random) -> Task:
        """A word problem of ``level`` steps on one quantity; the answer is computed exactly."""
        name, stuff = rng.choice(NAMES), rng.choice(STUFF)
        value = Fraction(rng.randint(2, 30))
        sentences = [f"{name} has {value} {stuff}."]
        for step in range(level):
            op = rng.choice("+-*/" if step else "+-*")  # a split only after a first step: no fraction at level 1
            if op == "+":
                n = rng.randint(1, 20)
                sentences.append(f"Then {name} gets {n} more {stuff}.")
                value += n
            elif op == "-" and value > 1:
                n = rng.randint(1, int(value) if value >= 2 else 1)
                sentences.append(f"Then {name} uses {n} {stuff}.")
                value -= n
            elif op in "*-":
                n = rng.randint(2, 4)
                sentences.append(f"Then {name}'s amount becomes {n} times as large.")
                value *= n
            else:
                n = rng.randint(2, 5)
                sentences.append(f"Then {name} splits it equally into {n} parts and keeps one part.")
                value /= n
        sentences.append(f"How many {stuff} does {name} have now?")
        return Task(text=" ".join(sentences), answer=_fraction(value), level=level)


def _fraction(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"
