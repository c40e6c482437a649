"""Label checks: labelled tasks probed with their answers hidden, the majority vote against the truth."""
from types import SimpleNamespace

from curriculum import metrics as M
from curriculum.envs.base import Task
from curriculum.probe import Prober
from curriculum.tasklog import TaskLog
from solver.role import Attempt, Solver

# per check, the solver's four answers; every true answer is "7"
VOTES = [
    ["7", "7", "7", "7"],  # share 1.00, above the band: right
    ["7", "7", "3", "5"],  # share 0.50, in the band: right
    ["3", "3", "7", "5"],  # share 0.50, in the band: wrong
    ["9", "9", "9", "1"],  # share 0.75, in the band: wrong
]


class SevensEnv:
    num_levels = 1

    def __init__(self):
        self.drawn = 0

    def sample_task(self, level, rng):
        self.drawn += 1
        return Task(text=f"task {self.drawn}", answer="7", level=level)

    def extract_answer(self, text):
        return text

    def same_answer(self, a, b):
        return a == b


class ScriptedRollouts:
    def attempt(self, tasks, m, key, desc, temperature, purpose):
        assert all(t.answer == "" for t in tasks)  # the answers are hidden from the vote
        assert purpose == M.PROBE_S  # their seconds count as probing
        return [Attempt(t, SimpleNamespace(text=answer, finished=True), 0.0)
                for t, answers in zip(tasks, VOTES) for answer in answers]


def test_label_accuracy_overall_and_over_the_checks_the_band_admits():
    cc = SimpleNamespace(label_check_rate=1.0, probe_samples=4, probe_temperature=1.0, band_low=0.25, band_high=0.75)
    env = SevensEnv()
    log = TaskLog()
    out = Prober(cc, ScriptedRollouts(), Solver(env), env, seed=0).check_labels(len(VOTES), 1, "fill", 0, log)
    assert out[M.LABEL_CHECKS] == 4 and out[M.LABEL_ACCURACY] == 0.5
    assert out[M.LABEL_CHECKS_IN_BAND] == 3 and out[M.LABEL_ACCURACY_IN_BAND] == 1 / 3
    assert [c["solve_rate"] for c in log.label_checks()] == [1.0, 0.5, 0.5, 0.75]


def test_no_check_in_the_band_logs_no_in_band_accuracy():
    cc = SimpleNamespace(label_check_rate=1.0, probe_samples=4, probe_temperature=1.0, band_low=0.8, band_high=0.9)
    env = SevensEnv()
    out = Prober(cc, ScriptedRollouts(), Solver(env), env, seed=0).check_labels(len(VOTES), 1, "fill", 0, TaskLog())
    assert out[M.LABEL_CHECKS_IN_BAND] == 0 and M.LABEL_ACCURACY_IN_BAND not in out
