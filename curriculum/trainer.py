"""The self-play loop: one method per phase of a round, in the order of the paper.

    propose -> probe -> reward -> update challenger      (challenger.steps times)
    -> fill pool -> update solver (solver.steps times) -> evaluate -> checkpoint

The roles' work lives in their packages (``challenger.role``, ``solver.role``); the
models, rollouts and GRPO updates in ``curriculum.engine``; this module sequences them,
shards their work over the ranks, and keeps the run resumable. Every random draw is
seeded from (run.seed, round, phase, step), so a round's outcome depends only on the
state at its start: a resumed run continues exactly as an uninterrupted one would.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import random
import tempfile
import time

import numpy as np
import torch
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from challenger.role import Challenger, Proposal, per_type_stats, rejection_reasons
from curriculum import dashboard, health, runstate
from curriculum.checkpoint import atomic_write
from curriculum.config import Config, to_yaml
from curriculum.engine.distributed import check_world, init_dist, run_sharded, wrap_deepspeed
from curriculum.engine.grpo import grpo_update
from curriculum.engine.policy import ROLES, build_roles, resolve_device
from curriculum.engine.prompts import render_prompt, resolve_style
from curriculum.engine.rollout import pack
from curriculum.engine.rl import group_ids_for
from curriculum.engine.tools import Trajectory, tool_stats
from curriculum.envs import Task, benchmark, held_out_texts, make_env, task_types, typed
from curriculum.errors import ConfigError
from curriculum.evaluate import accuracy_report, frontier_level, passes, solver_scores, tool_passes
from curriculum.monitor import Monitor, NullMonitor
from curriculum.pool import (SAMPLERS, PoolEntry, TaskPool, near_band, quantiles, replay_split,
                             weighted_without_replacement)
from curriculum.rollouts import Rollouts, derive_seed, make_engine
from curriculum.rundir import RunDir, RunLock, claim
from curriculum.signals import StopOnSignal
from curriculum.sources import LevelSampler
from curriculum.warmup import load_base
from solver.role import Attempt, Solver, has_signal, solve_rates
from solver.tools import with_tool_prompt
from solver.verifier import label_accuracy, solve_rate

log = logging.getLogger("selfplay")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class SelfPlayTrainer:
    def __init__(self, cfg: Config, *, resume: bool = False):
        self.cfg = cfg
        self.rundir = RunDir(cfg.run.dir)
        if cfg.run.threads > 0:
            torch.set_num_threads(cfg.run.threads)
        torch.use_deterministic_algorithms(cfg.run.deterministic, warn_only=True)
        seed_everything(cfg.run.seed)
        self.device = resolve_device(cfg.run.device)
        self.dist = init_dist(cfg, self.device)
        check_world(cfg, self.dist.world)
        if self.device.type == "cuda" and self.dist.world > 1:
            self.device = torch.device("cuda", self.dist.local_rank)
        self.lock = self._claim_run_dir(resume)
        self._check_before_building(resume)
        self.progress = cfg.log.progress and self.dist.is_main
        self._starved_round = -1  # the last round that warned of a pool too small for a solver batch
        self._replayed = 0  # retired tasks in the last self-play solver batch
        self.env = make_env(cfg.env.name, **cfg.env.kwargs)
        self.task_types = task_types(self.env)  # () for an environment with one kind of task
        self._env_counts: dict[str, float] = {}  # the environment's counters at the last round's end
        self.challenger = Challenger(self.env, frontier=cfg.reward.frontier, repetition_coef=cfg.reward.repetition_coef,
                                     repetition_threshold=cfg.reward.repetition_threshold, invalid_reward=cfg.reward.invalid,
                                     wrong_reward=cfg.reward.failing if cfg.reward.tiers else None)
        self.solver = Solver(self.env, cfg.solver.tool_prompt if cfg.solver.tools else "")
        self.benchmark = benchmark(self.env, cfg.eval.seed, cfg.eval.per_level)
        self.held_out = held_out_texts(self.env, self.benchmark)  # matched by the env's canonical form
        self.roles = self._build_roles()
        self.style = resolve_style(cfg.prompt.style, self.tokenizer)  # chat or plain
        self.rollouts = Rollouts(cfg, self.dist, self.roles, self.tokenizer, self.challenger, self.solver, self.progress,
                                 style=self.style, engine=make_engine(cfg, self.roles, self.device))
        cc = cfg.curriculum
        self.pool = TaskPool(cc.pool_capacity, cc.max_age, cc.sampler, by_level=cc.replay_by_level)
        self.levels = LevelSampler(self.env, cc.max_level, adaptive=cc.mode == "adaptive", floor=cc.adaptive_floor)
        self.ckpt = self.rundir.checkpoint_manager(cfg.checkpoint.keep_last)
        self.round = 0  # rounds completed
        self.stage = 0  # stages of round self.round + 1 completed
        self.last_checkpoint = None
        self.stop = StopOnSignal()
        self.stop_reason = ""  # set when a health.stop_on alarm ends the run
        self.steps = {r: 0 for r in ROLES}
        self.task_log: list[dict] = []
        wandb_id, keep_lines = None, 0
        if resume:
            wandb_id, keep_lines = self._restore()
        if not self.dist.is_main:  # one writer of metrics, tasks and wandb
            self.monitor = NullMonitor()
            return
        self.monitor = Monitor(self.rundir.path, config=dataclasses.asdict(cfg), wandb_mode=cfg.wandb.mode,
                               project=cfg.wandb.project, entity=cfg.wandb.entity, name=cfg.wandb.name,
                               wandb_id=wandb_id, keep_lines=keep_lines)

    def _check_before_building(self, resume: bool) -> None:
        """What would stop the run later, refused now, before a model is built or a round trained:
        a config edit the checkpoint cannot take, a checkpoints/ that cannot be written."""
        problem = None
        if self.dist.is_main:
            ckpts = self.rundir.checkpoints
            try:
                if resume and (path := self.rundir.checkpoint_manager().latest()) is not None:
                    runstate.check_config(path, self.cfg)
                ckpts.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryFile(dir=ckpts):  # what a checkpoint write needs
                    pass
            except ConfigError as exc:
                problem = str(exc)
            except OSError as exc:
                problem = f"cannot write checkpoints to {ckpts} ({exc.strerror or exc}); make it writable or choose another run.dir"
        problem = self.dist.broadcast_object(problem)
        if problem is not None:
            raise ConfigError(problem)

    def _claim_run_dir(self, resume: bool) -> RunLock | None:
        """Rank 0 claims the run directory (``rundir.claim``); every rank learns the outcome, so a
        refusal stops all of them at once."""
        lock, error = None, None
        if self.dist.is_main:
            try:
                lock = claim(self.rundir, resume, to_yaml(self.cfg))
            except ConfigError as exc:
                error = str(exc)
        error = self.dist.broadcast_object(error)
        if error is not None:
            raise ConfigError(error)
        return lock

    def _build_roles(self):
        """Base model -> roles (-> one DeepSpeed engine per role). Rank 0 fills the warm-up cache first."""
        base, self.tokenizer = None, None
        demo = functools.partial(self.solver.demonstration, output_chars=self.cfg.solver.tool_output_chars)
        if self.dist.is_main:
            base, self.tokenizer = load_base(self.cfg, self.env, self.held_out, self.progress, self.challenger.prompt, demo)
        self.dist.barrier()
        if not self.dist.is_main:
            base, self.tokenizer = load_base(self.cfg, self.env, self.held_out, self.progress, self.challenger.prompt, demo)
        roles = build_roles(self.cfg, base, self.device)
        if self.cfg.distributed.engine == "deepspeed":
            wrap_deepspeed(roles, self.cfg, self.dist.world)
        return roles

    # ---------------------------------------------------------------- the loop

    def train(self) -> None:
        """Run rounds until ``train.rounds``; SIGTERM/SIGINT checkpoint after the current step and return."""
        with StopOnSignal() as self.stop, logging_redirect_tqdm():
            try:
                if self.last_checkpoint is None:  # a fresh run: score the starting solver first
                    self.evaluate(0)
                    self.env_stats()  # counters from here on: round 1's
                    if self.dist.is_main:
                        log.info(self.monitor.summary(0, self.cfg.train.rounds))
                    self.save_checkpoint()
                    self.write_dashboard()
                elif self.round >= self.cfg.train.rounds and self.stage == 0:
                    log.warning("the run in %s finished all %d rounds; raise train.rounds to go on "
                                "(selfplay train --resume %s train.rounds=N)", self.rundir.path, self.round, self.rundir.path)
                first = self.round + 1
                # disable=None: no bar when stderr is no TTY (a log file); the round lines say it all
                for r in tqdm(range(first, self.cfg.train.rounds + 1), desc="rounds", initial=self.round,
                              total=self.cfg.train.rounds, disable=None if self.progress else True):
                    if not self.run_round(r):
                        hint = " (take the alarm out of health.stop_on to go on)" if self.stop_reason else ""
                        log.warning("stopped by %s; checkpoint %s written, resume with `selfplay train --resume %s`%s",
                                    self.stop_reason or "signal", self.last_checkpoint, self.rundir.path, hint)
                        return
            finally:
                self.monitor.close()

    def close(self) -> None:
        """Release the rollout engine, the run directory and the process group."""
        self.rollouts.engine.close()
        if self.lock is not None:
            self.lock.release()
        self.dist.close()

    def stages(self) -> list[tuple[str, int]]:
        """The round as a list of (phase, step); a checkpoint may fall between any two."""
        out: list[tuple[str, int]] = []
        if self.cfg.curriculum.mode == "selfplay":
            out += [("challenger", i) for i in range(self.cfg.challenger.steps)] + [("fill", 0)]
        return out + [("solver", i) for i in range(self.cfg.solver.steps)]

    def run_round(self, r: int) -> bool:
        """Round ``r`` from stage ``self.stage`` on. Returns False if a signal stopped it."""
        t0 = time.time()
        if self.stage == 0:
            self.task_log = []
            self.pool.age_out(r)
            self.rollouts.sandbox_s = 0.0
        stages = self.stages()
        every = self.cfg.checkpoint.every_steps
        for k in range(self.stage, len(stages)):
            self.run_stage(r, *stages[k])
            self.stage = k + 1
            if self.dist.world > 1:  # a signal may reach the ranks at different steps: stop together
                self.stop.requested = any(self.dist.all_gather_object(self.stop.requested))
            if self.stop.requested or (every > 0 and self.stage % every == 0 and self.stage < len(stages)):
                self.save_checkpoint(r - 1)
                if self.stop.requested:
                    return False
        self.write_task_log(r)
        self.evaluate(r)
        times = {"time/round_s": time.time() - t0}
        if any(t is not None for t in self.rollouts.role_tools.values()):
            times["time/sandbox_s"] = self.rollouts.sandbox_s
        self.monitor.log({**times, **self.rollouts.token_stats(), **self.env_stats()}, round=r, phase="round")
        self.check_health(r)
        if self.dist.is_main:
            log.info(self.monitor.summary(r, self.cfg.train.rounds))
        self.stage = 0
        self.save_checkpoint(r)
        self.write_dashboard()
        return not (self.stop.requested or self.stop_reason)

    def run_stage(self, r: int, phase: str, step: int) -> None:
        if phase == "challenger":
            n = self.cfg.challenger.batch_prompts * self.cfg.challenger.group_size
            proposals = self.propose(r, "challenger", step, n)
            checks = self.probe(proposals, r, "probe", step)
            self.update_challenger(r, step, proposals, checks)
        elif phase == "fill":
            self.fill_pool(r)
        else:
            self.update_solver(r, step)

    # ---------------------------------------------------------------- phases

    def propose(self, r: int, phase: str, step: int, n: int) -> list[Proposal]:
        """Generation: the challenger samples ``n`` proposals, G per prompt; the environment parses each.

        Each group's prompt carries ``curriculum.references`` reference tasks from the pool. With
        ``challenger.tools`` it announces them (``challenger.tool_prompt``) and a proposal is its last turn's text.
        """
        g = self.cfg.challenger.group_size
        rng = random.Random(derive_seed(self.cfg.run.seed, r, phase, step, "references"))
        kinds = self._group_kinds(len(range(0, n, g)), rng)
        prompts = [self.challenger.prompt(self._references(rng, kind), kind=kind) for kind in kinds]
        if self.cfg.challenger.tools:
            prompts = [with_tool_prompt(p, self.cfg.challenger.tool_prompt) for p in prompts]
        return self.rollouts.propose([prompts[i // g] for i in range(n)], (r, phase, step), f"propose r{r}",
                                     kinds=[kinds[i // g] for i in range(n)])

    def _group_kinds(self, groups: int, rng: random.Random) -> list[str]:
        """The task type each group's prompt asks for: the environment's types in turn from a random one
        (Absolute Zero proposes every type each step); "" for an environment without types."""
        if not self.task_types:
            return [""] * groups
        first = rng.randrange(len(self.task_types))
        return [self.task_types[(first + i) % len(self.task_types)] for i in range(groups)]

    def _references(self, rng: random.Random, kind: str = "") -> list[Task]:
        """Reference tasks of type ``kind`` for one prompt: from the pool (``curriculum.reference_sampler``);
        while it has none, the newest retired ones (an emptied pool is not a solver back at level 1); before
        anything was accepted, level-1 generator tasks."""
        cc = self.cfg.curriculum
        k = cc.references
        entries = [e for e in self.pool.entries.values() if e.task.kind == kind]
        if entries and cc.reference_sampler == "uniform":
            return [e.task for e in rng.sample(entries, min(k, len(entries)))]
        if entries:
            return [e.task for e in weighted_without_replacement(entries, SAMPLERS[cc.reference_sampler](entries),
                                                                   k, rng)]
        retired = [e.task for e in self.pool.retired.values() if e.task.kind == kind]
        if retired:
            return retired[-k:]
        return [self.env.sample_task(1, rng, **typed(kind)) for _ in range(k)]

    def probe(self, proposals: list[Proposal], r: int, phase: str, step: int) -> dict[str, float]:
        """Probing: the frozen solver answers each distinct valid task m times; p = mean score.

        A task without a reference answer is graded against the majority of its answers (its
        pseudo-label, ``Proposal.label``), so p is that label's share. With
        ``curriculum.probe_samples_max``, a task whose band decision is uncertain after m samples
        gets more, and p (and the label) come from all of them. Returns the label checks' metrics.
        """
        cc = self.cfg.curriculum
        tasks = list({p.task.text: p.task for p in proposals if p.valid}.values())
        if cc.pseudo_labels:  # the solver votes; the environment's answer only measures the vote
            tasks = [dataclasses.replace(t, answer="") for t in tasks]
        m = cc.probe_samples
        attempts = self.rollouts.probe(tasks, m, (r, phase, step))
        if cc.probe_samples_max > m:
            unsure = [t for t in tasks if near_band(float(np.mean([a.score for a in attempts[t.text]])), m,
                                                        cc.band_low, cc.band_high)]
            more = self.rollouts.probe(unsure, cc.probe_samples_max - m, (r, phase, step, "more"))
            for t in unsure:
                attempts[t.text] += more[t.text]
        # a reference answer stands; a majority is counted again over every sample
        labels = {t.text: t.answer or self.solver.grade(attempts[t.text]) for t in tasks}
        for p in proposals:
            if p.valid:
                p.solve_rate = self._rate(attempts[p.task.text])
                p.label = labels[p.task.text]
        return self.check_labels(len(proposals), r, phase, step)

    @staticmethod
    def _rate(attempts: list[Attempt]) -> float:
        return solve_rate([a.score for a in attempts])

    def check_labels(self, n: int, r: int, phase: str, step: int) -> dict[str, float]:
        """Label accuracy: ``curriculum.label_check_rate`` x ``n`` (at least one) labelled generator tasks
        are probed like proposals with their answers hidden; each check's majority label, share and true
        answer go to the round's task log, and ``curriculum/label_accuracy`` is the share of the round's
        checks so far whose label is right."""
        cc = self.cfg.curriculum
        if cc.label_check_rate == 0 or not self.solver.votes:
            return {}
        rng = random.Random(derive_seed(self.cfg.run.seed, r, phase, step, "label_checks"))
        truth = [self.env.sample_task(rng.randint(1, self.env.num_levels), rng)
                 for _ in range(max(1, math.ceil(cc.label_check_rate * n)))]
        m = cc.probe_samples
        attempts = self.rollouts.attempt([dataclasses.replace(t, answer="") for t in truth], m,
                                         (r, phase, step, "label_checks"), desc="label checks",
                                         temperature=cc.probe_temperature)
        for i, t in enumerate(truth):
            group = attempts[i * m : (i + 1) * m]
            label = self.solver.grade(group)
            self.task_log.append({"round": r, "phase": f"{phase}_label_check", "task": t.to_dict(), "label": label,
                                  "solve_rate": self._rate(group), "label_correct": self.solver.same(label, t.answer)})
        checks = [rec for rec in self.task_log if rec["phase"].endswith("_label_check")]
        accuracy = label_accuracy([c["label"] for c in checks], [c["task"]["answer"] for c in checks], self.solver.same)
        return {"curriculum/label_accuracy": accuracy, "curriculum/label_checks": len(checks)}

    def update_challenger(self, r: int, step: int, proposals: list[Proposal], checks: dict[str, float]) -> None:
        """Reward = gate x (frontier(p) - lambda x repetition); one GRPO step on the challenger."""
        reward_b, stats = self.challenger.rewards(proposals)
        rollout = pack([p.completion for p in proposals], reward_b.tolist(),
                       self._group_ids("challenger", [p.kind for p in proposals]), self.tokenizer.pad_token_id)
        out = self._update("challenger", rollout, r, step)
        out.update({f"challenger/{k}": v for k, v in stats.items()})
        if self.cfg.challenger.tools:
            out.update({f"challenger/{k}": v for k, v in tool_stats([p.completion for p in proposals]).items()})
        out.update(checks)
        out.update(self.rollouts.token_stats())
        self.monitor.log(out, round=r, phase="update_challenger")
        self._record_tasks(r, f"challenger_step_{step}", proposals, reward_b.tolist(), accepted=None)

    def fill_pool(self, r: int) -> None:
        """Curriculum: fresh proposals from the updated challenger; those in the band join the pool.

        A batch of ``curriculum.fill_proposals``, and more (up to ``curriculum.fill_max_batches`` in
        all) while the pool holds fewer tasks than one solver batch.
        """
        cc = self.cfg.curriculum
        proposals, accepted, added, checks = [], [], [], {}
        replay, mastered = cc.replay_fraction > 0, 0  # proposals above the band kept for replay
        for b in range(cc.fill_max_batches):
            if b and len(self.pool) >= self.cfg.solver.batch_prompts:
                break
            batch = self.propose(r, "fill", b, cc.fill_proposals)
            checks = self.probe(batch, r, "fill_probe", b)
            for p in batch:
                ok = p.valid and cc.band_low <= p.solve_rate <= cc.band_high and p.task.text not in self.held_out
                accepted.append(ok)
                if ok and self.pool.add(PoolEntry(self._labelled(p), p.solve_rate, r, p.completion.text)):
                    added.append(p)
                elif (replay and p.valid and p.solve_rate > cc.band_high and p.task.text not in self.held_out
                      and self.pool.keep_mastered(PoolEntry(self._labelled(p), p.solve_rate, r, p.completion.text))):
                    mastered += 1
            proposals += batch
        if not any(p.valid for p in proposals):
            reasons = rejection_reasons(proposals).most_common(3)
            # A frozen curriculum otherwise shows only as skipped solver steps. Without an update yet, the
            # cause is the format, not a collapse (the health alarm challenger_invalid reads the history).
            cause = ("no challenger update has happened yet: the model does not write the environment's proposal "
                     "format; check the challenger prompt and model.warmup.challenger_fraction"
                     if self.steps["challenger"] == 0 else
                     "if earlier rounds had valid proposals, an update collapsed the challenger: raise "
                     "challenger.optim.warmup_steps or lower challenger.optim.lr (health alarm challenger_invalid)")
            log.warning("round %d: none of the challenger's %d fill proposals was valid (%s), so nothing joins the "
                        "pool; %s", r, len(proposals), ", ".join(f"{k} {v}" for k, v in reasons), cause)
        stats = {
            "curriculum/fill_batches": len(proposals) // cc.fill_proposals,
            "curriculum/proposals": len(proposals),
            "curriculum/valid_fraction": sum(p.valid for p in proposals) / max(1, len(proposals)),
            "curriculum/accepted": len(added),
            "curriculum/mastered_kept": mastered,
            "curriculum/accepted_fraction": len(added) / max(1, len(proposals)),
            "curriculum/held_out_collisions": sum(p.valid and p.task.text in self.held_out for p in proposals),
            "curriculum/pool_size": len(self.pool),
            "curriculum/accepted_level_mean": float(np.mean([p.task.level for p in added])) if added else 0.0,
        }
        if cc.pseudo_labels and added:
            stats["curriculum/pseudo_label_accuracy"] = float(np.mean([self.solver.same(p.label, p.task.answer)
                                                                       for p in added]))
        stats.update(quantiles([1 - p.solve_rate for p in added], "curriculum/accepted_difficulty"))
        stats.update(quantiles([e.difficulty for e in self.pool.entries.values()], "curriculum/pool_difficulty"))
        stats.update(quantiles([float(e.task.level) for e in self.pool.entries.values()], "curriculum/pool_level"))
        stats.update({f"curriculum/{k}": v for k, v in per_type_stats(proposals).items()})
        for kind in self.task_types:
            stats[f"curriculum/accepted/type_{kind}"] = sum(p.kind == kind for p in added)
            stats[f"curriculum/pool_size/type_{kind}"] = sum(e.task.kind == kind for e in self.pool.entries.values())
        stats.update(checks)
        stats.update(self.rollouts.token_stats())
        self.monitor.log(stats, round=r, phase="fill_pool")
        self._record_tasks(r, "fill", proposals, None, accepted=accepted)

    def _labelled(self, p: Proposal) -> Task:
        """A proposal's task as the pool keeps it: without a reference answer (or with
        ``curriculum.pseudo_labels``), with its pseudo-label instead (the solver is graded against it from
        then on; R-Zero)."""
        if p.label is None or (p.task.answer and not self.cfg.curriculum.pseudo_labels):
            return p.task
        return dataclasses.replace(p.task, answer=p.label)

    def update_solver(self, r: int, step: int) -> None:
        """Execution + update: G answers per task, verifier scores, one GRPO step on the solver."""
        tasks, attempts, drawn = self.solver_batch(r, step)
        if not tasks:
            log.warning("round %d solver step %d skipped: no task with signal (empty pool, or every group "
                        "drawn scored the same)", r, step)
            self.monitor.log({"solver/skipped": 1, **self.rollouts.token_stats()}, round=r, phase="update_solver")
            return
        g = self.cfg.solver.group_size
        scores = [a.score for a in attempts]
        rates = solve_rates(scores, g)
        if self.cfg.curriculum.mode == "selfplay":
            for t, rate in zip(tasks, rates):
                self.pool.update_solve_rate(t.text, rate)
        else:
            self.levels.observe(tasks, rates)
        rollout = pack([a.completion for a in attempts], scores,
                       self._group_ids("solver", [a.task.kind for a in attempts]), self.tokenizer.pad_token_id)
        stats = self._update("solver", rollout, r, step)
        for kind in self.task_types:
            mine = [rate for t, rate in zip(tasks, rates) if t.kind == kind]
            if mine:
                stats[f"solver/solve_rate/type_{kind}"] = float(np.mean(mine))
        stats["solver/task_level_mean"] = float(np.mean([t.level for t in tasks]))
        stats["solver/solved_all_fraction"] = float(np.mean([x == 1.0 for x in rates]))
        stats["solver/solved_none_fraction"] = float(np.mean([x == 0.0 for x in rates]))
        stats["solver/no_signal_fraction"] = float(np.mean([not has_signal(a) for a in drawn]))
        stats["solver/groups_drawn"] = len(drawn)
        if self.cfg.curriculum.mode == "selfplay":
            stats["solver/replayed_tasks"] = self._replayed
        stats["solver/distinct_tasks"] = distinct = len({t.text for t in tasks})
        n = self.cfg.solver.batch_prompts
        if distinct < n and self.cfg.curriculum.mode == "selfplay" and self._starved_round != r:
            self._starved_round = r  # once a round
            # The same few tasks, step after step, overfit and forget: the batch is cut instead of repeating them.
            log.warning("round %d: the pool holds %d tasks, fewer than a solver batch (%d): the batch has %d "
                        "distinct ones; raise curriculum.fill_proposals or fill_max_batches, or lower "
                        "solver.batch_prompts", r, len(self.pool), n, distinct)
        stats["curriculum/pool_size"] = len(self.pool)
        if self.rollouts.tools is not None:
            stats.update({f"solver/{k}": v for k, v in tool_stats([a.completion for a in attempts], scores).items()})
        stats.update(self.rollouts.token_stats())
        self.monitor.log(stats, round=r, phase="update_solver")

    def solver_batch(self, r: int, step: int) -> tuple[list[Task], list[Attempt], list[list[Attempt]]]:
        """The step's tasks, their G scored attempts each, and every group drawn (filtered ones too).

        ``uniform_filtered`` keeps drawing ``solver.batch_prompts`` tasks (up to
        ``curriculum.filter_max_batches`` times) until that many groups have signal, and
        trains on those (fewer if the draws ran out). Other modes train on one draw.
        """
        n, g = self.cfg.solver.batch_prompts, self.cfg.solver.group_size
        rng = random.Random(derive_seed(self.cfg.run.seed, r, "solver_tasks", step))
        mode = self.cfg.curriculum.mode
        draws = self.cfg.curriculum.filter_max_batches if mode == "uniform_filtered" else 1
        kept: list[tuple[Task, list[Attempt]]] = []
        drawn: list[list[Attempt]] = []
        for d in range(draws):
            tasks = self.pool_batch(n, rng) if mode == "selfplay" else self.levels.draw(n, rng, self.held_out)
            if not tasks:
                break
            attempts = self.rollouts.attempt(tasks, g, (r, "solver", step) + ((d,) if d else ()), desc=f"solve r{r}")
            groups = [attempts[i * g : (i + 1) * g] for i in range(len(tasks))]
            drawn += groups
            kept += [(t, a) for t, a in zip(tasks, groups) if draws == 1 or has_signal(a)]
            if len(kept) >= n:
                break
        kept = kept[:n]
        return [t for t, _ in kept], [a for _, group in kept for a in group], drawn

    def pool_batch(self, n: int, rng: random.Random) -> list[Task]:
        """Self-play's tasks for one solver step: ``curriculum.replay_fraction`` of ``n`` replayed from
        retired tasks, the rest from the pool, counts by ``pool.replay_split``; no task twice."""
        fresh, k = replay_split(self.cfg.curriculum.replay_fraction, n, len(self.pool.entries), len(self.pool.retired))
        replayed = self.pool.replay(k, rng)
        self._replayed = len(replayed)
        return [e.task for e in self.pool.sample(fresh, rng)] + [e.task for e in replayed]

    def evaluate(self, r: int) -> dict[str, float]:
        """Held-out benchmark: greedy accuracy and/or mean@k, overall and per level; the frontier level.

        Several ranks split the tasks and gather the scores. Greedy scores do not depend on
        the split; sampled ones are seeded per rank, so their stream differs from one process's.
        """
        ec = self.cfg.eval
        if r % ec.every and r != self.cfg.train.rounds:
            return {}
        t0 = time.time()
        results: dict[str, float] = {}
        for prefix, k, temperature, tools in tool_passes(self.cfg, self.rollouts.tools):

            def work(tasks: list[Task], seed: int, k=k, temperature=temperature, tools=tools) -> list[list[float]]:
                return solver_scores(self.roles["solver"], self.tokenizer, self.env, tasks, k=k, temperature=temperature,
                                     max_new_tokens=ec.max_new_tokens, batch_size=self.cfg.solver.sampling.batch_size,
                                     seed=seed, style=self.style, engine=self.rollouts.engine, **tools)

            seed = derive_seed(ec.seed, "rank", self.dist.rank) if temperature > 0 and self.dist.world > 1 else ec.seed
            scores = run_sharded(self.dist, [[t] for t in self.benchmark], work, lambda u: seed, per_unit=False)
            results.update(accuracy_report(self.benchmark, scores, prefix))
        results["eval/frontier_level"] = frontier_level(results, passes(ec)[-1][0])
        results["time/eval_s"] = time.time() - t0
        self.monitor.log(results, round=r, phase="eval")
        return results

    def check_health(self, r: int) -> None:
        """Health alarms (curriculum/health.py) from the metrics logged so far: WARN lines when one starts or
        clears, health/* metrics, and ``self.stop_reason`` when one named in ``health.stop_on`` is on."""
        reason = ""
        if self.dist.is_main:
            report = health.check(dashboard.per_round(self.monitor.path), r, health.context(self.cfg),
                                  self.cfg.health.stop_on)
            health.log_report(report, r)
            for name in report.started:
                self.monitor.alert(f"health: {name}", f"round {r}: {report.active[name].text}")
            self.monitor.log(report.metrics() | ({"health/stop_reason": report.stop} if report.stop else {}),
                             round=r, phase="health")
            reason = report.stop
        self.stop_reason = self.dist.broadcast_object(reason)

    def env_stats(self) -> dict[str, float]:
        """How much the environment's counters (``env.stats()``: sandbox executions, ...) grew since the last
        call, summed over the ranks. Results an environment caches are not run again, so a resumed run may
        count more than an uninterrupted one."""
        now = self.env.stats() if hasattr(self.env, "stats") else {}
        if self.dist.world > 1:
            parts = self.dist.all_gather_object(now)
            now = {k: sum(p.get(k, 0) for p in parts) for k in now}
        delta = {k: v - self._env_counts.get(k, 0) for k, v in now.items()}
        self._env_counts = now
        return delta

    # ---------------------------------------------------------------- updates

    def _group_ids(self, name: str, kinds: list[str]) -> list[int]:
        """GRPO group ids of role ``name``'s batch (``group_size`` consecutive samples), or its task types
        with ``loss.task_relative`` (Absolute Zero's per-(task type, role) baselines)."""
        rc = getattr(self.cfg, name)
        return group_ids_for(kinds, rc.group_size, rc.loss.task_relative)

    def _update(self, name: str, rollout, r: int, step: int) -> dict[str, float]:
        rc = getattr(self.cfg, name)
        t0 = time.time()
        self.rollouts.engine.release()  # a vLLM engine frees its memory while the role trains
        stats = grpo_update(self.roles[name], rollout, rc.loss, grad_clip=rc.optim.grad_clip,
                            norm_len=rc.sampling.max_new_tokens,  # Dr. GRPO's constant, whatever the prompt length
                            backend=self.cfg.rl.backend, seed=derive_seed(self.cfg.run.seed, r, name, "minibatch", step),
                            dist=self.dist, tis_cap=self.cfg.rollout.tis_cap, temperature=rc.sampling.temperature)
        steps = int(stats.pop("optimizer_steps"))
        self.steps[name] += steps
        if steps:
            self.roles[name].version += 1  # the engine pushes these weights before the role samples again
        out = {f"{name}/{k}": v for k, v in stats.items()}
        out[f"{name}/steps"] = self.steps[name]
        out[f"time/{name}_update_s"] = time.time() - t0
        return out

    # ---------------------------------------------------------------- records

    def _record_tasks(self, r: int, phase: str, proposals: list[Proposal], rewards, accepted) -> None:
        """One record per proposal: the challenger's prompt and the solver's as the models read them,
        the proposal, what parsing made of it, its solve rate and label (reference or majority answer);
        with ``challenger.tools`` also its whole trajectory (calls and observations)."""
        rendered: dict[str, str] = {}
        for i, p in enumerate(proposals):
            self.task_log.append({
                "round": r, "phase": phase, "text": p.completion.text, "finished": p.completion.finished,
                "task": p.task.to_dict() if p.valid else None,
                "rejected": None if p.valid else p.parsed.reason,
                "solve_rate": p.solve_rate, "label": p.label,
                "reward": None if rewards is None else rewards[i],
                "accepted": None if accepted is None else accepted[i],
                "prompt": self.tokenizer.decode(p.completion.prompt_ids),
                "solver_prompt": (rendered.setdefault(p.task.text, render_prompt(self.tokenizer, self.solver.prompt(p.task),
                                                                                  self.style)) if p.valid else None),
                **({"trajectory": p.completion.trajectory} if isinstance(p.completion, Trajectory) else {}),
            })

    def write_task_log(self, r: int) -> None:
        if not self.dist.is_main:
            return
        self.rundir.tasks.mkdir(parents=True, exist_ok=True)
        atomic_write(self.rundir.task_file(r), "".join(json.dumps(rec) + "\n" for rec in self.task_log))
        k = self.cfg.log.samples
        rows = [[rec["round"], rec["phase"], rec["text"], rec["rejected"] or "", rec["solve_rate"], rec["accepted"]]
                for rec in self.task_log if rec["phase"] == "fill"][:k]
        self.monitor.table("samples/proposals", ["round", "phase", "proposal", "rejected", "solve_rate", "accepted"],
                           rows, round=r)

    def write_dashboard(self) -> None:
        """Refresh RUN_DIR/dashboard.html; a failure here is logged, never fatal."""
        if not (self.dist.is_main and self.cfg.log.dashboard):
            return
        try:
            dashboard.write(self.rundir.path)
        except Exception:  # noqa: BLE001 - the page is a view; the run must go on
            log.warning("could not write the dashboard", exc_info=True)

    # ---------------------------------------------------------------- checkpoints

    def save_checkpoint(self, r: int | None = None):
        """Everything the run's future depends on, after round ``r`` plus ``self.stage`` stages."""
        self.round = self.round if r is None else r
        state = {
            "round": self.round, "stage": self.stage, "steps": self.steps, "tokens": self.rollouts.tokens,
            "levels": self.levels.state_dict(), "wandb_id": self.monitor.wandb_id, "metrics_lines": self.monitor.lines,
            "finished": self.round >= self.cfg.train.rounds and self.stage == 0, "time": time.time(),
            "stop_reason": self.stop_reason,
        }
        self.monitor.flush()
        runstate.check_in_sync(self.dist, self.fingerprint(), f"round {self.round} stage {self.stage}")
        files = {"pool.json": json.dumps(self.pool.state_dict()), "round_tasks.json": json.dumps(self.task_log),
                 "config.yaml": to_yaml(self.cfg)}  # the config: what a resume must agree with
        self.last_checkpoint = runstate.save(self.ckpt, runstate.checkpoint_name(self.round, self.stage), self.dist,
                                             self.roles, self.tokenizer, state, files,
                                             with_base=self.cfg.model.lora.enabled and not self.cfg.model.path)
        return self.last_checkpoint

    def fingerprint(self) -> str:
        """What every rank must agree on: counters, pool, task log and (unless partitioned) the weights."""
        return runstate.fingerprint(self.roles, self.round, self.stage, self.steps, self.rollouts.tokens,
                                    self.levels.state_dict(), self.pool.state_dict(), self.task_log)

    def _restore(self) -> tuple[str | None, int]:
        names = ["pool.json", "round_tasks.json"]
        path = loaded = damaged = None
        if self.dist.is_main:  # the newest checkpoint every file of which loads, checked before anything changes
            for candidate in self.ckpt.intact():
                try:
                    loaded = runstate.read(candidate, self.roles, names)
                except runstate.DamagedCheckpoint as exc:
                    log.warning("skipping checkpoint %s: %s", candidate, exc)
                    damaged = damaged or exc
                    continue
                path = candidate
                break
        path = self.dist.broadcast_object(path)
        if path is None:
            raise damaged if damaged is not None else FileNotFoundError(f"no complete checkpoint under {self.ckpt.dir}")
        log.info("resuming from %s", path)
        runstate.check_config(path, self.cfg)
        if loaded is None:  # the other ranks read the checkpoint rank 0 chose
            loaded = runstate.read(path, self.roles, names)
        runstate.apply(path, loaded, self.roles)
        state, files = loaded["state"], loaded["files"]
        try:
            self.pool.load_state_dict(files["pool.json"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path / 'pool.json'} holds a pool this run cannot have written ({exc}); "
                              "move that checkpoint aside to resume from the one before") from exc
        self.task_log = files["round_tasks.json"]
        self.round = int(state["round"])
        self.stage = int(state["stage"])
        self.steps = {k: int(v) for k, v in state["steps"].items()}
        self.rollouts.tokens = {k: int(v) for k, v in state["tokens"].items()}
        self.levels.load_state_dict(state["levels"])
        self.last_checkpoint = path
        return state.get("wandb_id"), int(state["metrics_lines"])
