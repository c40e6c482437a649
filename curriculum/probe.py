"""Probing: the frozen solver answers the challenger's proposals, which gives each its solve rate p
(the challenger's reward and the pool's admission both read it) and, where the task has no reference
answer, its majority-vote label. Label checks measure how often such labels are right."""
from __future__ import annotations

import dataclasses
import math
import random

import numpy as np

from challenger.role import Proposal
from curriculum import metrics as M
from curriculum.envs import Environment
from curriculum.pool import in_band, near_band
from curriculum.rollouts import Rollouts, derive_seed
from curriculum.tasklog import TaskLog
from solver.role import Attempt, Solver
from solver.verifier import label_accuracy, solve_rate


def rate(attempts: list[Attempt]) -> float:
    return solve_rate([a.score for a in attempts])


class Prober:
    def __init__(self, cc, rollouts: Rollouts, solver: Solver, env: Environment, seed: int):
        self.cc, self.rollouts, self.solver, self.env, self.seed = cc, rollouts, solver, env, seed

    def probe(self, proposals: list[Proposal], key: tuple) -> None:
        """Each distinct valid task answered ``curriculum.probe_samples`` times; p = mean score.

        A task without a reference answer is graded against the majority of its answers (its
        pseudo-label, ``Proposal.label``), so p is that label's share. With
        ``curriculum.probe_samples_max``, a task whose band decision is uncertain after m samples
        gets more, and p (and the label) come from all of them.
        """
        cc = self.cc
        tasks = list({p.task.text: p.task for p in proposals if p.valid}.values())
        if cc.pseudo_labels:  # the solver votes; the environment's answer only measures the vote
            tasks = [dataclasses.replace(t, answer="") for t in tasks]
        m = cc.probe_samples
        attempts = self.rollouts.probe(tasks, m, key)
        if cc.probe_samples_max > m:
            unsure = [t for t in tasks if near_band(float(np.mean([a.score for a in attempts[t.text]])), m,
                                                        cc.band_low, cc.band_high)]
            more = self.rollouts.probe(unsure, cc.probe_samples_max - m, key + ("more",))
            for t in unsure:
                attempts[t.text] += more[t.text]
        # a reference answer stands; a majority is counted again over every sample
        labels = {t.text: t.answer or self.solver.grade(attempts[t.text]) for t in tasks}
        for p in proposals:
            if p.valid:
                p.solve_rate = rate(attempts[p.task.text])
                p.label = labels[p.task.text]

    def check_labels(self, n: int, r: int, phase: str, step: int, log: TaskLog) -> dict[str, float]:
        """``curriculum.label_check_rate`` x ``n`` (at least one) labelled generator tasks, probed like
        proposals with their answers hidden; each check's majority label goes to ``log``, and
        ``curriculum/label_accuracy`` is the share of the round's checks so far whose label is right;
        ``curriculum/label_accuracy_in_band`` the same over the checks whose vote share is in the band, as
        a proposal's would be to be accepted: the labels the solver would train on."""
        cc = self.cc
        if cc.label_check_rate == 0 or not self.solver.votes:
            return {}
        rng = random.Random(derive_seed(self.seed, r, phase, step, "label_checks"))
        truth = [self.env.sample_task(rng.randint(1, self.env.num_levels), rng)
                 for _ in range(max(1, math.ceil(cc.label_check_rate * n)))]
        m = cc.probe_samples
        attempts = self.rollouts.attempt([dataclasses.replace(t, answer="") for t in truth], m,
                                         (r, phase, step, "label_checks"), desc="label checks",
                                         temperature=cc.probe_temperature, purpose=M.PROBE_S)
        for i, t in enumerate(truth):
            group = attempts[i * m : (i + 1) * m]
            label = self.solver.grade(group)
            log.add_label_check(r, phase, t, label, rate(group), self.solver.same(label, t.answer))
        checks = log.label_checks()
        def accuracy(cs: list[dict]) -> float:
            return label_accuracy([c["label"] for c in cs], [c["task"]["answer"] for c in cs], self.solver.same)

        out = {M.LABEL_ACCURACY: accuracy(checks), M.LABEL_CHECKS: len(checks)}
        admitted = [c for c in checks if in_band(c["solve_rate"], cc.band_low, cc.band_high)]
        out[M.LABEL_CHECKS_IN_BAND] = len(admitted)
        if admitted:
            out[M.LABEL_ACCURACY_IN_BAND] = accuracy(admitted)
        return out
