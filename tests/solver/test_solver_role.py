"""The solver's grading: against a reference answer, or against the majority of its own answers."""
from dataclasses import dataclass

from solver.role import Solver
from solver.verifier import extract_boxed, math_equal


@dataclass(frozen=True)
class T:
    text: str
    answer: str


@dataclass
class C:
    text: str
    finished: bool = True


class BoxedEnv:
    def solver_prompt(self, task):
        return [{"role": "user", "content": task.text}]

    def score(self, task, completion):
        answer = extract_boxed(completion)
        return float(answer is not None and math_equal(answer, task.answer))

    def extract_answer(self, completion):
        return extract_boxed(completion)

    def same_answer(self, a, b):
        return math_equal(a, b)


def sampler(texts):
    """A fake model: hands out the given completions in order, whatever the prompts."""
    queue = list(texts)
    return lambda prompts: [queue.pop(0) for _ in prompts]


def test_tasks_without_an_answer_are_graded_against_the_majority():
    solver = Solver(BoxedEnv())
    q, r = T("half of one?", ""), T("two plus two?", "")
    outs = [C("\\boxed{1/2}"), C("so \\boxed{0.5}"), C("\\boxed{3}"), C("\\boxed{1/2", finished=False),
            C("4"), C("\\boxed{4}"), C("\\boxed{5}"), C("\\boxed{4.0}")]
    attempts = solver.attempt([q] * 4 + [r] * 4, sampler(outs))
    assert [a.score for a in attempts] == [1, 1, 0, 0, 0, 1, 0, 1]
    assert [a.answer for a in attempts[:4]] == ["1/2", "0.5", "3", None]  # a cut-short answer is none
    assert solver.grade(attempts[:4]) == "1/2" and solver.grade(attempts[4:]) == "4"


def test_a_reference_answer_grades_each_attempt_alone():
    solver = Solver(BoxedEnv())
    task = T("half of one?", "0.5")
    attempts = solver.attempt([task] * 3, sampler([C("\\boxed{\\frac{1}{2}}"), C("\\boxed{3}"), C("\\boxed{3}")]))
    assert [a.score for a in attempts] == [1, 0, 0]  # the majority (3) does not matter
    assert solver.grade(attempts) == "0.5"


def test_garbage_never_crashes_grading():
    class Broken(BoxedEnv):
        def extract_answer(self, completion):
            raise RuntimeError("boom")

    attempts = Solver(Broken()).attempt([T("q", "")] * 3, sampler([C("x"), C("\\boxed{"), C("")]))
    assert [a.score for a in attempts] == [0, 0, 0]
