"""curriculum.pseudo_labels: the pool keeps the solver's majority answer, never the environment's, and
the share of right majorities is logged."""
import contextlib

import pytest

from curriculum.config import load_config
from curriculum.engine.rollout import Completion
from curriculum.errors import ConfigError
from curriculum.trainer import SelfPlayTrainer

# "12" sums to "3" and "45" to "9" (ladder level 1); the solver's majority is wrong on the first.
ANSWERS = {"12=": ["3", "7", "7", "7"], "45=": ["9", "9", "9", "1"]}


@contextlib.contextmanager
def ladder_trainer(tiny_overrides, *overrides):
    cfg = load_config("configs/demo_cpu.yaml", [*tiny_overrides, "env.name=ladder", "env.kwargs={num_levels: 3}",
                                                "curriculum.probe_samples=4", *overrides])
    trainer = SelfPlayTrainer(cfg)
    try:
        yield trainer
    finally:
        trainer.close()


def scripted(trainer, monkeypatch, texts: dict[str, list[str]]):
    """The solver answers each prompt with ``texts[prompt]`` in turn; the challenger proposes "12" and "45"."""
    given = {k: iter(v * 10) for k, v in texts.items()}

    def sampler(name, seed, desc, temperature=0.0):
        return lambda prompts: [Completion([], [], next(given[p]), True) for p in prompts]

    monkeypatch.setattr(trainer.rollouts, "sampler", sampler)
    done = [Completion([], [], t, True) for t in ("12", "45")]
    monkeypatch.setattr(trainer, "propose", lambda *a, **k: trainer.challenger.propose(["L:"] * 2, lambda _: done))


def test_pool_keeps_majority_labels_and_logs_their_accuracy(tiny_overrides, monkeypatch):
    with ladder_trainer(tiny_overrides, "curriculum.pseudo_labels=true", "curriculum.fill_max_batches=1") as trainer:
        scripted(trainer, monkeypatch, ANSWERS)
        logged = {}
        monkeypatch.setattr(trainer.monitor, "log", lambda stats, **kw: logged.update(stats))
        trainer.fill_pool(1)
        assert {t: e.task.answer for t, e in trainer.pool.entries.items()} == {"12": "7", "45": "9"}
        assert logged["curriculum/pseudo_label_accuracy"] == 0.5
        # the solver is graded against the pool's label from then on: "7" scores, the true "3" does not
        task = trainer.pool.entries["12"].task
        assert trainer.solver.score(task, Completion([], [], "7", True)) == 1.0


def test_without_pseudo_labels_the_reference_answer_stands(tiny_overrides, monkeypatch):
    with ladder_trainer(tiny_overrides, "curriculum.fill_max_batches=1") as trainer:
        scripted(trainer, monkeypatch, ANSWERS)
        trainer.fill_pool(1)
        # "12": 1 of 4 right (0.25, in the band); "45": 3 of 4
        assert {t: (e.task.answer, e.solve_rate) for t, e in trainer.pool.entries.items()} == {
            "12": ("3", 0.25), "45": ("9", 0.75)}


@pytest.mark.parametrize("overrides, message", [
    (["curriculum.pseudo_labels=true"], "needs an environment that extracts answers"),  # arithmetic: no votes
    (["curriculum.pseudo_labels=true", "env.name=ladder", "env.kwargs={num_levels: 3}", "curriculum.mode=uniform"],
     "curriculum.mode=uniform has none"),
])
def test_pseudo_labels_refused_where_they_cannot_work(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/demo_cpu.yaml", overrides)
