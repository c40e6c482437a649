"""The fill phase's rules: which probed proposals join the pool (or are kept for replay), what the
phase logs, and what a fill with no valid proposal tells the user."""
from __future__ import annotations

import dataclasses
import logging

import numpy as np

from challenger.role import Proposal, per_type_stats, rejection_reasons
from curriculum import metrics as M
from curriculum.envs import Task
from curriculum.pool import PoolEntry, TaskPool, in_band, quantiles

log = logging.getLogger("selfplay")


def labelled(p: Proposal, pseudo_labels: bool) -> Task:
    """A proposal's task as the pool keeps it: without a reference answer (or with ``pseudo_labels``),
    with its pseudo-label instead (the solver is graded against it from then on; R-Zero)."""
    if p.label is None or (p.task.answer and not pseudo_labels):
        return p.task
    return dataclasses.replace(p.task, answer=p.label)


def admit(pool: TaskPool, batch: list[Proposal], r: int, cc, held_out: set[str]) -> tuple[list[bool], list[Proposal], int]:
    """Proposals probed inside [band_low, band_high] (and not held out) join the pool; with replay, those
    above the band are kept as retired tasks, so mastered levels are replayed too. Returns the in-band
    flags, the proposals new to the pool, and how many were kept for replay."""
    accepted, added, mastered = [], [], 0
    for p in batch:
        fresh = p.valid and p.task.text not in held_out
        ok = fresh and in_band(p.solve_rate, cc.band_low, cc.band_high)
        accepted.append(ok)
        entry = PoolEntry(labelled(p, cc.pseudo_labels), p.solve_rate, r, p.completion.text) if fresh else None
        if ok and pool.add(entry):
            added.append(p)
        elif (cc.replay_fraction > 0 and fresh and p.solve_rate > cc.band_high and pool.keep_mastered(entry)):
            mastered += 1
    return accepted, added, mastered


def fill_stats(proposals: list[Proposal], added: list[Proposal], mastered: int, pool: TaskPool, cc,
               held_out: set[str], task_types: tuple[str, ...], same) -> dict[str, float]:
    n = max(1, len(proposals))
    entries = list(pool.entries.values())
    stats = {
        M.FILL_BATCHES: len(proposals) // cc.fill_proposals,
        M.PROPOSALS: len(proposals),
        M.VALID_FRACTION: sum(p.valid for p in proposals) / n,
        M.ACCEPTED: len(added),
        M.MASTERED_KEPT: mastered,
        M.ACCEPTED_FRACTION: len(added) / n,
        M.HELD_OUT_COLLISIONS: sum(p.valid and p.task.text in held_out for p in proposals),
        M.POOL_SIZE: len(pool),
        M.ACCEPTED_LEVEL: float(np.mean([p.task.level for p in added])) if added else 0.0,
    }
    if cc.pseudo_labels and added:
        stats[M.PSEUDO_LABEL_ACCURACY] = float(np.mean([same(p.label, p.task.answer) for p in added]))
    stats.update(quantiles([1 - p.solve_rate for p in added], M.ACCEPTED_DIFFICULTY))
    stats.update(quantiles([e.difficulty for e in entries], M.POOL_DIFFICULTY))
    stats.update(quantiles([float(e.task.level) for e in entries], M.POOL_LEVEL))
    stats.update({f"curriculum/{k}": v for k, v in per_type_stats(proposals).items()})
    for kind in task_types:
        stats[M.per_type(M.ACCEPTED, kind)] = sum(p.kind == kind for p in added)
        stats[M.per_type(M.POOL_SIZE, kind)] = sum(e.task.kind == kind for e in entries)
    return stats


def warn_if_all_invalid(proposals: list[Proposal], r: int, challenger_updated: bool) -> None:
    """A frozen curriculum otherwise shows only as skipped solver steps. Without an update yet, the cause is
    the format, not a collapse (the health alarm challenger_invalid reads the history)."""
    if any(p.valid for p in proposals):
        return
    reasons = rejection_reasons(proposals).most_common(3)
    cause = ("if earlier rounds had valid proposals, an update collapsed the challenger: raise "
             "challenger.optim.warmup_steps or lower challenger.optim.lr (health alarm challenger_invalid)"
             if challenger_updated else
             "no challenger update has happened yet: the model does not write the environment's proposal "
             "format; check the challenger prompt and model.warmup.challenger_fraction")
    log.warning("round %d: none of the challenger's %d fill proposals was valid (%s), so nothing joins the "
                "pool; %s", r, len(proposals), ", ".join(f"{k} {v}" for k, v in reasons), cause)
