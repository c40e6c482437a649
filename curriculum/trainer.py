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
import hashlib
import json
import logging
import random
import time

import numpy as np
import torch
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from challenger.role import Challenger, Proposal
from curriculum import dashboard
from curriculum.checkpoint import atomic_write, read_state
from curriculum.config import Config, diff_keys, is_resumable, load_config, to_yaml
from curriculum.engine.distributed import check_world, full_parameters, init_dist, run_sharded, wrap_deepspeed
from curriculum.engine.grpo import grpo_update
from curriculum.engine.policy import ROLES, build_roles, load_base, load_role_weights, resolve_device, save_role
from curriculum.engine.rollout import generate, pack
from curriculum.envs import Task, benchmark, make_env
from curriculum.errors import ConfigError
from curriculum.evaluate import accuracy_report, frontier_level, passes, solver_scores
from curriculum.monitor import Monitor, NullMonitor
from curriculum.pool import PoolEntry, TaskPool
from curriculum.rundir import RunDir, RunLock
from curriculum.signals import StopOnSignal
from curriculum.sources import LevelSampler
from solver.role import Attempt, Solver, solve_rates
from solver.verifier import solve_rate

log = logging.getLogger("selfplay")


def derive_seed(*parts) -> int:
    """A 63-bit seed from any tuple of parts (stable across processes and Python versions)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def quantiles(values: list[float], prefix: str) -> dict[str, float]:
    if not values:
        return {}
    t = torch.tensor(values, dtype=torch.float64)
    qs = torch.quantile(t, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
    return {f"{prefix}_mean": float(t.mean()), f"{prefix}_p10": qs[0], f"{prefix}_p50": qs[1], f"{prefix}_p90": qs[2]}


def has_signal(group: list[Attempt]) -> bool:
    """A GRPO group teaches only if its answers did not all score the same."""
    return len({a.score for a in group}) > 1


def near_band(p: float, m: int, low: float, high: float, z: float = 1.5) -> bool:
    """Whether a solve rate measured on ``m`` samples lies within ``z`` standard errors of a band edge.

    The standard error uses p clipped to [1/2m, 1 - 1/2m], so 0/m and m/m are not certain.
    """
    q = min(max(p, 0.5 / m), 1 - 0.5 / m)
    se = (q * (1 - q) / m) ** 0.5
    return abs(p - low) <= z * se or abs(p - high) <= z * se


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
        self.progress = cfg.log.progress and self.dist.is_main
        self.env = make_env(cfg.env.name, **cfg.env.kwargs)
        self.challenger = Challenger(self.env, frontier=cfg.reward.frontier, repetition_coef=cfg.reward.repetition_coef,
                                     repetition_threshold=cfg.reward.repetition_threshold, invalid_reward=cfg.reward.invalid)
        self.solver = Solver(self.env)
        self.benchmark = benchmark(self.env, cfg.eval.seed, cfg.eval.per_level)
        self.held_out = {t.text for t in self.benchmark}
        self.roles = self._build_roles()
        cc = cfg.curriculum
        self.pool = TaskPool(cc.pool_capacity, cc.max_age, cc.sampler)
        self.levels = LevelSampler(self.env, cc.max_level, adaptive=cc.mode == "adaptive", floor=cc.adaptive_floor)
        self.ckpt = self.rundir.checkpoint_manager(cfg.checkpoint.keep_last)
        self.round = 0  # rounds completed
        self.stage = 0  # stages of round self.round + 1 completed
        self.last_checkpoint = None
        self.stop = StopOnSignal()
        self.steps = {r: 0 for r in ROLES}
        self.tokens = {r: 0 for r in ROLES}  # generated tokens per role (proposals; probes and answers)
        self.task_log: list[dict] = []
        wandb_id, keep_lines = None, 0
        if resume:
            wandb_id, keep_lines = self._restore()
        elif self.dist.is_main:
            self.rundir.tasks.mkdir(parents=True, exist_ok=True)
            atomic_write(self.rundir.config, to_yaml(cfg))
        if not self.dist.is_main:  # one writer of metrics, tasks and wandb
            self.monitor = NullMonitor()
            return
        self.monitor = Monitor(self.rundir.path, config=dataclasses.asdict(cfg), wandb_mode=cfg.wandb.mode,
                               project=cfg.wandb.project, entity=cfg.wandb.entity, name=cfg.wandb.name,
                               wandb_id=wandb_id, keep_lines=keep_lines)

    def _claim_run_dir(self, resume: bool) -> RunLock | None:
        """Rank 0 takes the run directory's lock; a fresh run refuses a directory that holds checkpoints.

        Every rank learns the outcome, so a refusal stops all of them at once.
        """
        lock, error = None, None
        if self.dist.is_main:
            try:
                lock = RunLock(self.rundir).acquire()
                if not resume and self.rundir.has_checkpoints():
                    lock.release()
                    raise ConfigError(f"run directory {self.rundir.path} already holds a run; resume it with "
                                      f"`selfplay train --resume {self.rundir.path}` or choose another run.dir")
                if not resume:  # a run that died before its first checkpoint starts over
                    self.rundir.metrics.unlink(missing_ok=True)
                elif self.rundir.config.read_text() != to_yaml(self.cfg):
                    # The run now follows the changed resumable keys (say train.rounds): so do
                    # the next resume, `selfplay status` and the dashboard.
                    atomic_write(self.rundir.config, to_yaml(self.cfg))
                    log.info("config.yaml updated with the resumable keys changed on resume")
            except ConfigError as exc:
                error = str(exc)
        error = self.dist.broadcast_object(error)
        if error is not None:
            raise ConfigError(error)
        return lock

    def _build_roles(self):
        """Base model -> roles (-> one DeepSpeed engine per role). Rank 0 fills the warm-up cache first."""
        base, self.tokenizer = None, None
        if self.dist.is_main:
            base, self.tokenizer = load_base(self.cfg, self.env, self.held_out, self.progress, self.challenger.prompt)
        self.dist.barrier()
        if not self.dist.is_main:
            base, self.tokenizer = load_base(self.cfg, self.env, self.held_out, self.progress, self.challenger.prompt)
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
                        log.warning("stopped by signal; checkpoint %s written, resume with "
                                    "`selfplay train --resume %s`", self.last_checkpoint, self.rundir.path)
                        return
            finally:
                self.monitor.close()

    def close(self) -> None:
        """Release the run directory and the process group."""
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
        self.monitor.log({"time/round_s": time.time() - t0, **self._token_stats()}, round=r, phase="round")
        if self.dist.is_main:
            log.info(self.monitor.summary(r, self.cfg.train.rounds))
        self.stage = 0
        self.save_checkpoint(r)
        self.write_dashboard()
        return not self.stop.requested

    def run_stage(self, r: int, phase: str, step: int) -> None:
        if phase == "challenger":
            n = self.cfg.challenger.batch_prompts * self.cfg.challenger.group_size
            proposals = self.propose(r, "challenger", step, n)
            self.probe(proposals, r, "probe", step)
            self.update_challenger(r, step, proposals)
        elif phase == "fill":
            self.fill_pool(r)
        else:
            self.update_solver(r, step)

    # ---------------------------------------------------------------- phases

    def propose(self, r: int, phase: str, step: int, n: int) -> list[Proposal]:
        """Generation: the challenger samples ``n`` proposals, G per prompt; the environment parses each.

        Each group's prompt carries ``curriculum.references`` reference tasks from the pool.
        """
        g = self.cfg.challenger.group_size
        rng = random.Random(derive_seed(self.cfg.run.seed, r, phase, step, "references"))
        prompts = [self.challenger.prompt(self._references(rng)) for _ in range(0, n, g)]
        items = [prompts[i // g] for i in range(n)]

        def work(items: list[str], seed: int) -> list[Proposal]:
            return self.challenger.propose(items, self._sampler("challenger", seed, f"propose r{r}"))

        proposals = self._sharded(items, g, work, (r, phase, step))
        self._count("challenger", [p.completion for p in proposals])
        return proposals

    def _references(self, rng: random.Random) -> list[Task]:
        """Reference tasks for one prompt: from the pool, or level-1 generator tasks while it is empty."""
        k = self.cfg.curriculum.references
        entries = list(self.pool.entries.values())
        if entries:
            return [e.task for e in rng.sample(entries, min(k, len(entries)))]
        return [self.env.sample_task(1, rng) for _ in range(k)]

    def probe(self, proposals: list[Proposal], r: int, phase: str, step: int) -> None:
        """Probing: the frozen solver answers each distinct valid task m times; p = mean score.

        With ``curriculum.probe_samples_max``, a task whose band decision is uncertain after m
        samples gets more, and p is their mean over all of them.
        """
        cc = self.cfg.curriculum
        tasks = list({p.task.text: p.task for p in proposals if p.valid}.values())
        m = cc.probe_samples
        scores = self.solve_scores(tasks, m, (r, phase, step))
        if cc.probe_samples_max > m:
            unsure = [t for t in tasks if near_band(float(np.mean(scores[t.text])), m, cc.band_low, cc.band_high)]
            more = self.solve_scores(unsure, cc.probe_samples_max - m, (r, phase, step, "more"))
            for t in unsure:
                scores[t.text] += more[t.text]
        for p in proposals:
            if p.valid:
                p.solve_rate = solve_rate(scores[p.task.text])

    def update_challenger(self, r: int, step: int, proposals: list[Proposal]) -> None:
        """Reward = gate x (frontier(p) - lambda x repetition); one GRPO step on the challenger."""
        reward_b, stats = self.challenger.rewards(proposals)
        g = self.cfg.challenger.group_size
        rollout = pack([p.completion for p in proposals], reward_b.tolist(), [i // g for i in range(len(proposals))],
                       self.tokenizer.pad_token_id)
        out = self._update("challenger", rollout, r, step)
        out.update({f"challenger/{k}": v for k, v in stats.items()})
        out.update(self._token_stats())
        self.monitor.log(out, round=r, phase="update_challenger")
        self._record_tasks(r, f"challenger_step_{step}", proposals, reward_b.tolist(), accepted=None)

    def fill_pool(self, r: int) -> None:
        """Curriculum: fresh proposals from the updated challenger; those in the band join the pool."""
        cc = self.cfg.curriculum
        proposals = self.propose(r, "fill", 0, cc.fill_proposals)
        self.probe(proposals, r, "fill_probe", 0)
        accepted, added = [], []
        for p in proposals:
            ok = p.valid and cc.band_low <= p.solve_rate <= cc.band_high and p.task.text not in self.held_out
            accepted.append(ok)
            if ok and self.pool.add(PoolEntry(p.task, p.solve_rate, r, p.completion.text)):
                added.append(p)
        stats = {
            "curriculum/proposals": len(proposals),
            "curriculum/valid_fraction": sum(p.valid for p in proposals) / max(1, len(proposals)),
            "curriculum/accepted": len(added),
            "curriculum/accepted_fraction": len(added) / max(1, len(proposals)),
            "curriculum/held_out_collisions": sum(p.valid and p.task.text in self.held_out for p in proposals),
            "curriculum/pool_size": len(self.pool),
            "curriculum/accepted_level_mean": float(np.mean([p.task.level for p in added])) if added else 0.0,
        }
        stats.update(quantiles([1 - p.solve_rate for p in added], "curriculum/accepted_difficulty"))
        stats.update(quantiles([e.difficulty for e in self.pool.entries.values()], "curriculum/pool_difficulty"))
        stats.update(quantiles([float(e.task.level) for e in self.pool.entries.values()], "curriculum/pool_level"))
        stats.update(self._token_stats())
        self.monitor.log(stats, round=r, phase="fill_pool")
        self._record_tasks(r, "fill", proposals, None, accepted=accepted)

    def update_solver(self, r: int, step: int) -> None:
        """Execution + update: G answers per task, verifier scores, one GRPO step on the solver."""
        tasks, attempts, drawn = self.solver_batch(r, step)
        if not tasks:
            log.warning("round %d solver step %d skipped: no task with signal (empty pool, or every group "
                        "drawn scored the same)", r, step)
            self.monitor.log({"solver/skipped": 1, **self._token_stats()}, round=r, phase="update_solver")
            return
        g = self.cfg.solver.group_size
        scores = [a.score for a in attempts]
        rates = solve_rates(scores, g)
        if self.cfg.curriculum.mode == "selfplay":
            for t, rate in zip(tasks, rates):
                self.pool.update_solve_rate(t.text, rate)
        else:
            self.levels.observe(tasks, rates)
        rollout = pack([a.completion for a in attempts], scores, [i // g for i in range(len(attempts))],
                       self.tokenizer.pad_token_id)
        stats = self._update("solver", rollout, r, step)
        stats["solver/task_level_mean"] = float(np.mean([t.level for t in tasks]))
        stats["solver/solved_all_fraction"] = float(np.mean([x == 1.0 for x in rates]))
        stats["solver/solved_none_fraction"] = float(np.mean([x == 0.0 for x in rates]))
        stats["solver/no_signal_fraction"] = float(np.mean([not has_signal(a) for a in drawn]))
        stats["solver/groups_drawn"] = len(drawn)
        stats["curriculum/pool_size"] = len(self.pool)
        stats.update(self._token_stats())
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
            tasks = [e.task for e in self.pool.sample(n, rng)] if mode == "selfplay" else self.levels.draw(n, rng, self.held_out)
            if not tasks:
                break
            attempts = self.attempt(tasks, g, (r, "solver", step) + ((d,) if d else ()), desc=f"solve r{r}")
            groups = [attempts[i * g : (i + 1) * g] for i in range(len(tasks))]
            drawn += groups
            kept += [(t, a) for t, a in zip(tasks, groups) if draws == 1 or has_signal(a)]
            if len(kept) >= n:
                break
        kept = kept[:n]
        return [t for t, _ in kept], [a for _, group in kept for a in group], drawn

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
        for prefix, k, temperature in passes(ec):

            def work(tasks: list[Task], seed: int, k=k, temperature=temperature) -> list[list[float]]:
                return solver_scores(self.roles["solver"], self.tokenizer, self.env, tasks, k=k, temperature=temperature,
                                     max_new_tokens=ec.max_new_tokens, batch_size=self.cfg.solver.sampling.batch_size,
                                     seed=seed)

            seed = derive_seed(ec.seed, "rank", self.dist.rank) if temperature > 0 and self.dist.world > 1 else ec.seed
            scores = run_sharded(self.dist, [[t] for t in self.benchmark], work, lambda u: seed, per_unit=False)
            results.update(accuracy_report(self.benchmark, scores, prefix))
        results["eval/frontier_level"] = frontier_level(results, passes(ec)[-1][0])
        results["time/eval_s"] = time.time() - t0
        self.monitor.log(results, round=r, phase="eval")
        return results

    # ---------------------------------------------------------------- the engine, handed to the roles

    def solve_scores(self, tasks: list[Task], m: int, parts: tuple) -> dict[str, list[float]]:
        """``m`` probe scores of each task, by task text (at the probing temperature)."""
        if not tasks:
            return {}
        attempts = self.attempt(tasks, m, parts, desc="probe", temperature=self.cfg.curriculum.probe_temperature)
        return {t.text: [a.score for a in attempts[i * m : (i + 1) * m]] for i, t in enumerate(tasks)}

    def attempt(self, tasks: list[Task], m: int, parts: tuple, desc: str, temperature: float = 0.0) -> list[Attempt]:
        """``m`` scored solver attempts per task (task-major), each rank answering and scoring its share."""

        def work(items: list[Task], seed: int) -> list[Attempt]:
            return self.solver.attempt(items, self._sampler("solver", seed, desc, temperature))

        attempts = self._sharded([t for t in tasks for _ in range(m)], m, work, parts)
        self._count("solver", [a.completion for a in attempts])
        return attempts

    def _count(self, name: str, completions) -> None:
        self.tokens[name] += sum(len(c.completion_ids) for c in completions)

    def _token_stats(self) -> dict[str, int]:
        return {f"{name}/generated_tokens": n for name, n in self.tokens.items()}

    def _sampler(self, name: str, seed: int, desc: str, temperature: float = 0.0):
        """``sample(prompts) -> completions`` of role ``name`` at its sampling settings (``temperature`` > 0
        overrides the configured one), seeded."""
        sc = getattr(self.cfg, name).sampling
        role = self.roles[name].activate()
        return functools.partial(generate, role.model, self.tokenizer, max_new_tokens=sc.max_new_tokens,
                                 temperature=temperature or sc.temperature, top_p=sc.top_p, batch_size=sc.batch_size,
                                 seed=seed, desc=desc, progress=self.progress)

    def _sharded(self, items: list, unit: int, work, parts: tuple) -> list:
        """``work(items, seed)`` over this rank's share of ``items`` (in units of ``unit``), gathered.

        One process in batch mode: a single call seeded derive_seed(run.seed, *parts), the
        single-process run itself. Ranks in batch mode add their rank to the seed; group
        mode seeds each unit from its index, whatever the number of ranks.
        """
        units = [items[i : i + unit] for i in range(0, len(items), unit)]
        base = (self.cfg.run.seed, *parts)

        def seed_of(u: int | None) -> int:
            if u is not None:
                return derive_seed(*base, "unit", u)
            return derive_seed(*base) if self.dist.world == 1 else derive_seed(*base, "rank", self.dist.rank)

        return run_sharded(self.dist, units, work, seed_of, per_unit=self.cfg.distributed.rollout_seed == "group")

    def _update(self, name: str, rollout, r: int, step: int) -> dict[str, float]:
        rc = getattr(self.cfg, name)
        t0 = time.time()
        stats = grpo_update(self.roles[name], rollout, rc.loss, grad_clip=rc.optim.grad_clip,
                            backend=self.cfg.rl.backend, seed=derive_seed(self.cfg.run.seed, r, name, "minibatch", step),
                            dist=self.dist)
        self.steps[name] += int(stats.pop("optimizer_steps"))
        out = {f"{name}/{k}": v for k, v in stats.items()}
        out[f"{name}/steps"] = self.steps[name]
        out[f"time/{name}_update_s"] = time.time() - t0
        return out

    # ---------------------------------------------------------------- records

    def _record_tasks(self, r: int, phase: str, proposals: list[Proposal], rewards, accepted) -> None:
        for i, p in enumerate(proposals):
            self.task_log.append({
                "round": r, "phase": phase, "text": p.completion.text, "finished": p.completion.finished,
                "task": p.task.to_dict() if p.valid else None,
                "rejected": None if p.valid else p.parsed.reason,
                "solve_rate": p.solve_rate,
                "reward": None if rewards is None else rewards[i],
                "accepted": None if accepted is None else accepted[i],
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
        r = self.round
        state = {
            "round": r, "stage": self.stage, "steps": self.steps, "tokens": self.tokens,
            "levels": self.levels.state_dict(), "wandb_id": self.monitor.wandb_id,
            "metrics_lines": self.monitor.lines, "config_sha": hashlib.sha256(to_yaml(self.cfg).encode()).hexdigest(),
            "finished": r >= self.cfg.train.rounds and self.stage == 0, "time": time.time(),
        }
        self.monitor.flush()
        self._check_in_sync()
        # "round_0002" < "round_0002+003" (3 stages into round 3) < "round_0003": names sort in run order.
        name = f"round_{r:04d}" + (f"+{self.stage:03d}" if self.stage else "")
        main = self.dist.is_main
        tmp = self.ckpt.begin(name) if main else None
        # Every rank takes part (DeepSpeed gathers partitions); rank 0 writes.
        for role_name, role in self.roles.items():
            trainer_state = role.trainer_state()
            with full_parameters(role):
                if main:
                    save_role(role, tmp / role_name, self.tokenizer)
                    torch.save(trainer_state, tmp / f"{role_name}_optim.pt")
        if main:
            torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}, tmp / "rng.pt")
            (tmp / "pool.json").write_text(json.dumps(self.pool.state_dict()))
            (tmp / "config.yaml").write_text(to_yaml(self.cfg))  # what a resume must agree with
            (tmp / "round_tasks.json").write_text(json.dumps(self.task_log))
            self.last_checkpoint = self.ckpt.finish(name, tmp, state)
        # Also a barrier: no rank runs ahead of (or exits before) a complete checkpoint.
        self.last_checkpoint = self.dist.broadcast_object(self.last_checkpoint)
        return self.last_checkpoint

    def fingerprint(self) -> str:
        """What every rank must agree on: counters, pool, task log and (unless partitioned) the weights."""
        h = hashlib.sha256(json.dumps([self.round, self.stage, self.steps, self.tokens, self.levels.state_dict(),
                                       self.pool.state_dict(), self.task_log],
                                      sort_keys=True, default=str).encode())
        for role in self.roles.values():
            if role.engine is None or role.engine.zero_optimization_stage() < 3:
                h.update(repr([float(p.detach().double().sum()) for p in role.params]).encode())
        return h.hexdigest()

    def _check_in_sync(self) -> None:
        """Fail loudly, before a checkpoint is written, if the ranks have drifted apart."""
        if self.dist.world == 1:
            return
        prints = self.dist.all_gather_object(self.fingerprint())
        if len(set(prints)) > 1:
            raise RuntimeError(f"ranks out of sync at round {self.round} stage {self.stage}: "
                               + ", ".join(f"rank {i}: {p[:12]}" for i, p in enumerate(prints)))

    def _check_resumed_config(self, path) -> None:
        """Refuse a resume whose config differs from the checkpoint's in keys that would break the run
        (also when RUN_DIR/config.yaml itself was edited)."""
        saved = path / "config.yaml"
        if not saved.is_file():  # checkpoints of older versions
            return
        refused = [k for k in diff_keys(load_config(saved), self.cfg) if not is_resumable(k)]
        if refused:
            raise ConfigError(f"{path} was trained with other values of {', '.join(refused)}; these keys cannot "
                              "change on resume (was config.yaml edited?). Restore them, or start a new run.")

    def _restore(self) -> tuple[str | None, int]:
        path = self.dist.broadcast_object(self.ckpt.latest() if self.dist.is_main else None)
        if path is None:
            raise FileNotFoundError(f"no complete checkpoint under {self.ckpt.dir}")
        log.info("resuming from %s", path)
        self._check_resumed_config(path)
        state = read_state(path)
        for name, role in self.roles.items():
            with full_parameters(role, modifier_rank=0):
                load_role_weights(role, path / name)
            role.load_trainer_state(torch.load(path / f"{name}_optim.pt", weights_only=False))
        rng = torch.load(path / "rng.pt", weights_only=False)
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        try:
            self.pool.load_state_dict(json.loads((path / "pool.json").read_text()))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path / 'pool.json'} holds a pool this run cannot have written ({exc}); "
                              "move that checkpoint aside to resume from the one before") from exc
        self.task_log = json.loads((path / "round_tasks.json").read_text())
        self.round = int(state["round"])
        self.stage = int(state["stage"])
        self.steps = {k: int(v) for k, v in state["steps"].items()}
        self.tokens = {k: int(v) for k, v in state["tokens"].items()}
        self.levels.load_state_dict(state["levels"])
        self.last_checkpoint = path
        return state.get("wandb_id"), int(state["metrics_lines"])
