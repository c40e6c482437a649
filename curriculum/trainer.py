"""The self-play loop: one method per phase of a round, in the order of the paper.

    propose -> probe -> reward -> update challenger      (challenger.steps times)
    -> fill pool -> update solver (solver.steps times) -> evaluate -> checkpoint

A generator mode (``curriculum.mode`` other than selfplay) has no challenger phases: its task source
(``curriculum.sources``) draws the solver's tasks. The phases' work lives beside this module (probe,
fill, updates, tasklog) and in the roles' packages; this module sequences it and keeps the run
resumable. Every random draw is seeded from (run.seed, round, phase, step), so a resumed run
continues exactly as an uninterrupted one would.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import random
import time

import numpy as np
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from challenger.role import Challenger, Proposal
from curriculum import dashboard, health, runstate
from curriculum import metrics as M
from curriculum.config import Config, to_yaml
from curriculum.engine.distributed import start_process, wrap_deepspeed
from curriculum.engine.policy import build_roles
from curriculum.engine.prompts import render_prompt, resolve_style
from curriculum.engine.tools import tool_stats
from curriculum.envs import benchmark, held_out_texts, make_env, task_types, typed
from curriculum.evaluate import evaluate_ranks
from curriculum.fill import admit, fill_stats, warn_if_all_invalid
from curriculum.monitor import Monitor, NullMonitor
from curriculum.pool import TaskPool, group_kinds
from curriculum.probe import Prober
from curriculum.rollouts import Rollouts, derive_seed, make_engine
from curriculum.rundir import RunDir
from curriculum.signals import StopOnSignal
from curriculum.sources import make_source
from curriculum.tasklog import SAMPLE_COLUMNS, TaskLog
from curriculum.updates import RoleUpdates
from curriculum.warmup import load_base
from solver.role import Solver, has_signal, solve_rates
from solver.tools import with_tool_prompt

log = logging.getLogger("selfplay")


class SelfPlayTrainer:
    def __init__(self, cfg: Config, *, resume: bool = False):
        self.cfg, cc = cfg, cfg.curriculum
        self.rundir = RunDir(cfg.run.dir)
        self.device, self.dist = start_process(cfg)
        self.lock = runstate.open_run(self.dist, self.rundir, cfg, resume, to_yaml(cfg))
        self.progress = cfg.log.progress and self.dist.is_main
        self.env = make_env(cfg.env.name, **cfg.env.kwargs)
        self.task_types = task_types(self.env)  # () for an environment with one kind of task
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
        self.updates = RoleUpdates(cfg, self.roles, self.dist, self.rollouts.engine, self.tokenizer.pad_token_id)
        self.prober = Prober(cc, self.rollouts, self.solver, self.env, cfg.run.seed)
        self.pool = TaskPool(cc.pool_capacity, cc.max_age, cc.sampler, by_level=cc.replay_by_level)
        self.source = make_source(cc.mode, cc, self.env, self.pool, self.held_out)
        self.ckpt = self.rundir.checkpoint_manager(cfg.checkpoint.keep_last)
        self.round, self.stage = 0, 0  # rounds completed; stages of round self.round + 1 completed
        self.last_checkpoint = None
        self.stop = StopOnSignal()
        self.stop_reason = ""  # set when a health.stop_on alarm ends the run
        self.task_log = TaskLog()
        wandb_id, keep_lines = self._restore() if resume else (None, 0)
        if not self.dist.is_main:  # one writer of metrics, tasks and wandb
            self.monitor = NullMonitor()
            return
        self.monitor = Monitor(self.rundir.path, config=dataclasses.asdict(cfg), wandb_mode=cfg.wandb.mode,
                               project=cfg.wandb.project, entity=cfg.wandb.entity, name=cfg.wandb.name,
                               wandb_id=wandb_id, keep_lines=keep_lines)

    def _build_roles(self):
        """Base model -> roles (-> one DeepSpeed engine per role). Rank 0 fills the warm-up cache first."""
        demo = functools.partial(self.solver.demonstration, output_chars=self.cfg.solver.tool_output_chars)
        load = functools.partial(load_base, self.cfg, self.env, self.held_out, self.progress, self.challenger.prompt, demo)
        base, self.tokenizer = load() if self.dist.is_main else (None, None)
        self.dist.barrier()
        if not self.dist.is_main:
            base, self.tokenizer = load()
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
                    self.rollouts.env_stats()  # counters from here on: round 1's
                    self.log_summary(0)
                    self.save_checkpoint()
                    self.write_dashboard()
                elif self.round >= self.cfg.train.rounds and self.stage == 0:
                    log.warning("the run in %s finished all %d rounds; raise train.rounds to go on "
                                "(selfplay train --resume %s train.rounds=N)", self.rundir.path, self.round, self.rundir.path)
                # disable=None: no bar when stderr is no TTY (a log file); the round lines say it all
                for r in tqdm(range(self.round + 1, self.cfg.train.rounds + 1), desc="rounds", initial=self.round,
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
        out = [("challenger", i) for i in range(self.cfg.challenger.steps)] + [("fill", 0)] if self.source.proposes else []
        return out + [("solver", i) for i in range(self.cfg.solver.steps)]

    def run_round(self, r: int) -> bool:
        """Round ``r`` from stage ``self.stage`` on. Returns False if a signal or an alarm stopped it."""
        t0 = time.time()
        if self.stage == 0:
            self.task_log = TaskLog()
            self.source.new_round(r)
            self.rollouts.new_round()
        stages, every = self.stages(), self.cfg.checkpoint.every_steps
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
        self.monitor.log({M.ROUND_S: time.time() - t0, **self.rollouts.round_stats()}, round=r, phase="round")
        self.check_health(r)
        self.log_summary(r)
        self.stage = 0
        self.save_checkpoint(r)
        self.write_dashboard()
        return not (self.stop.requested or self.stop_reason)

    def run_stage(self, r: int, phase: str, step: int) -> None:
        {"challenger": self.challenger_step, "fill": self.fill_pool, "solver": self.update_solver}[phase](r, step)

    # ---------------------------------------------------------------- phases

    def propose(self, r: int, phase: str, step: int, n: int) -> list[Proposal]:
        """Generation: the challenger samples ``n`` proposals, G per prompt; the environment parses each.

        Each group's prompt carries ``curriculum.references`` reference tasks from the pool. With
        ``challenger.tools`` it announces them (``challenger.tool_prompt``) and a proposal is its last turn's text.
        """
        cc, g = self.cfg.curriculum, self.cfg.challenger.group_size
        rng = random.Random(derive_seed(self.cfg.run.seed, r, phase, step, "references"))
        kinds = group_kinds(self.task_types, len(range(0, n, g)), rng)
        prompts = [self.challenger.prompt(self.pool.references(cc.references, kind, cc.reference_sampler, rng,
                                                               lambda: self.env.sample_task(1, rng, **typed(kind))),
                                          kind=kind) for kind in kinds]
        if self.cfg.challenger.tools:
            prompts = [with_tool_prompt(p, self.cfg.challenger.tool_prompt) for p in prompts]
        return self.rollouts.propose([prompts[i // g] for i in range(n)], (r, phase, step), f"propose r{r}",
                                     kinds=[kinds[i // g] for i in range(n)])

    def probe(self, proposals: list[Proposal], r: int, phase: str, step: int) -> dict[str, float]:
        """Probing (``curriculum.probe``): solve rates and labels of the proposals; the label checks' metrics."""
        self.prober.probe(proposals, (r, phase, step))
        return self.prober.check_labels(len(proposals), r, phase, step, self.task_log)

    def challenger_step(self, r: int, step: int) -> None:
        """Propose, probe; reward = gate x (frontier(p) - lambda x repetition); one GRPO step on the challenger."""
        proposals = self.propose(r, "challenger", step, self.cfg.challenger.batch_prompts * self.cfg.challenger.group_size)
        checks = self.probe(proposals, r, "probe", step)
        reward_b, stats = self.challenger.rewards(proposals)
        out = self.updates("challenger", [p.completion for p in proposals], reward_b.tolist(),
                           [p.kind for p in proposals], r, step) | {f"challenger/{k}": v for k, v in stats.items()}
        if self.cfg.challenger.tools:
            out.update({f"challenger/{k}": v for k, v in tool_stats([p.completion for p in proposals]).items()})
        self.monitor.log(out | checks | self.rollouts.token_stats(), round=r, phase="update_challenger")
        self._record_tasks(r, f"challenger_step_{step}", proposals, reward_b.tolist(), accepted=None)

    def fill_pool(self, r: int, step: int = 0) -> None:
        """Curriculum: fresh proposals from the updated challenger; those in the band join the pool
        (``curriculum.fill``). A batch of ``curriculum.fill_proposals``, and more (up to
        ``curriculum.fill_max_batches`` in all) while the pool holds fewer tasks than one solver batch."""
        cc = self.cfg.curriculum
        proposals, accepted, added, mastered, checks = [], [], [], 0, {}
        for b in range(cc.fill_max_batches):
            if b and len(self.pool) >= self.cfg.solver.batch_prompts:
                break
            batch = self.propose(r, "fill", b, cc.fill_proposals)
            checks = self.probe(batch, r, "fill_probe", b)
            ok, new, kept = admit(self.pool, batch, r, cc, self.held_out)
            proposals, accepted, added, mastered = proposals + batch, accepted + ok, added + new, mastered + kept
        warn_if_all_invalid(proposals, r, challenger_updated=self.updates.steps["challenger"] > 0)
        stats = fill_stats(proposals, added, mastered, self.pool, cc, self.held_out, self.task_types, self.solver.same)
        self.monitor.log(stats | checks | self.rollouts.token_stats(), round=r, phase="fill_pool")
        self._record_tasks(r, "fill", proposals, None, accepted=accepted)

    def update_solver(self, r: int, step: int) -> None:
        """Execution + update: G answers per task, verifier scores, one GRPO step on the solver."""
        tasks, attempts, drawn = self.solver_batch(r, step)
        if not tasks:
            log.warning("round %d solver step %d skipped: no task with signal (empty pool, or every group "
                        "drawn scored the same)", r, step)
            self.monitor.log({M.SKIPPED: 1, **self.rollouts.token_stats()}, round=r, phase="update_solver")
            return
        scores = [a.score for a in attempts]
        rates = solve_rates(scores, self.cfg.solver.group_size)
        self.source.observe(tasks, rates)
        stats = self.updates("solver", [a.completion for a in attempts], scores, [a.task.kind for a in attempts], r, step)
        for kind in self.task_types:
            if mine := [rate for t, rate in zip(tasks, rates) if t.kind == kind]:
                stats[M.per_type(M.SOLVE_RATE, kind)] = float(np.mean(mine))
        distinct = len({t.text for t in tasks})
        stats |= {M.SOLVER_LEVEL: float(np.mean([t.level for t in tasks])),
                  M.SOLVED_ALL: float(np.mean([x == 1.0 for x in rates])),
                  M.SOLVED_NONE: float(np.mean([x == 0.0 for x in rates])),
                  M.NO_SIGNAL: float(np.mean([not has_signal(a) for a in drawn])), M.GROUPS_DRAWN: len(drawn),
                  **self.source.stats(distinct, self.cfg.solver.batch_prompts), M.DISTINCT_TASKS: distinct,
                  M.POOL_SIZE: len(self.pool)}
        if self.rollouts.tools is not None:
            stats.update({f"solver/{k}": v for k, v in tool_stats([a.completion for a in attempts], scores).items()})
        self.monitor.log(stats | self.rollouts.token_stats(), round=r, phase="update_solver")

    def solver_batch(self, r: int, step: int):
        """The step's tasks, their G scored attempts each, and every group drawn (dropped ones too): the
        source's batch, drawn again (up to ``source.draws`` times) while fewer than ``solver.batch_prompts``
        groups were kept."""
        n, g = self.cfg.solver.batch_prompts, self.cfg.solver.group_size
        rng = random.Random(derive_seed(self.cfg.run.seed, r, "solver_tasks", step))
        kept, drawn = [], []
        for d in range(self.source.draws):
            tasks = self.source.batch(n, rng)
            if not tasks:
                break
            attempts = self.rollouts.attempt(tasks, g, (r, "solver", step) + ((d,) if d else ()), desc=f"solve r{r}")
            groups = [attempts[i * g : (i + 1) * g] for i in range(len(tasks))]
            drawn += groups
            kept += [(t, a) for t, a in zip(tasks, groups) if self.source.keep(a)]
            if len(kept) >= n:
                break
        kept = kept[:n]
        return [t for t, _ in kept], [a for _, group in kept for a in group], drawn

    def evaluate(self, r: int) -> dict[str, float]:
        """Held-out benchmark every ``eval.every`` rounds and at the last: greedy accuracy and/or mean@k,
        overall and per level; the frontier level."""
        if r % self.cfg.eval.every and r != self.cfg.train.rounds:
            return {}
        t0 = time.time()
        results = evaluate_ranks(self.cfg, self.dist, self.roles["solver"], self.tokenizer, self.env, self.benchmark,
                                 self.rollouts.tools, self.style, self.rollouts.engine)
        self.monitor.log(results | {M.EVAL_S: time.time() - t0}, round=r, phase="eval")
        return results

    def check_health(self, r: int) -> None:
        """Health alarms (``curriculum.health``) from the metrics so far; a ``health.stop_on`` alarm ends the run."""
        reason = health.check_and_report(dashboard.per_round(self.monitor.path), r, self.cfg, self.monitor) \
            if self.dist.is_main else ""
        self.stop_reason = self.dist.broadcast_object(reason)

    # ---------------------------------------------------------------- records

    def _record_tasks(self, r: int, phase: str, proposals: list[Proposal], rewards, accepted) -> None:
        solver_prompt = lambda task: render_prompt(self.tokenizer, self.solver.prompt(task), self.style)  # noqa: E731
        self.task_log.add_proposals(r, phase, proposals, rewards, accepted, decode=self.tokenizer.decode,
                                    solver_prompt=solver_prompt)

    def write_task_log(self, r: int) -> None:
        if self.dist.is_main:
            self.task_log.write(self.rundir.task_file(r))
            self.monitor.table("samples/proposals", SAMPLE_COLUMNS, self.task_log.sample_rows(self.cfg.log.samples), round=r)

    def log_summary(self, r: int) -> None:
        if self.dist.is_main:
            log.info(self.monitor.summary(r, self.cfg.train.rounds))

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
            "round": self.round, "stage": self.stage, "steps": self.updates.steps, "tokens": self.rollouts.tokens,
            "levels": self.source.state_dict(), "wandb_id": self.monitor.wandb_id, "metrics_lines": self.monitor.lines,
            "finished": self.round >= self.cfg.train.rounds and self.stage == 0, "time": time.time(),
            "stop_reason": self.stop_reason,
        }
        self.monitor.flush()
        runstate.check_in_sync(self.dist, self.fingerprint(), f"round {self.round} stage {self.stage}")
        files = {"pool.json": json.dumps(self.pool.state_dict()), "round_tasks.json": json.dumps(self.task_log.records),
                 "config.yaml": to_yaml(self.cfg)}  # the config: what a resume must agree with
        self.last_checkpoint = runstate.save(self.ckpt, runstate.checkpoint_name(self.round, self.stage), self.dist,
                                             self.roles, self.tokenizer, state, files,
                                             with_base=self.cfg.model.lora.enabled and not self.cfg.model.path)
        return self.last_checkpoint

    def fingerprint(self) -> str:
        """What every rank must agree on: counters, pool, task log and (unless partitioned) the weights."""
        return runstate.fingerprint(self.roles, self.round, self.stage, self.updates.steps, self.rollouts.tokens,
                                    self.source.state_dict(), self.pool.state_dict(), self.task_log.records)

    def _restore(self) -> tuple[str | None, int]:
        path, loaded = runstate.restore(self.ckpt, self.dist, self.roles, self.cfg, ["pool.json", "round_tasks.json"])
        state, files = loaded["state"], loaded["files"]
        self.pool.load(files["pool.json"], path / "pool.json")
        self.task_log = TaskLog(files["round_tasks.json"])
        self.round, self.stage = int(state["round"]), int(state["stage"])
        self.updates.steps = {k: int(v) for k, v in state["steps"].items()}
        self.rollouts.tokens = {k: int(v) for k, v in state["tokens"].items()}
        self.source.load_state_dict(state["levels"])
        self.last_checkpoint = path
        return state.get("wandb_id"), int(state["metrics_lines"])
