"""The self-play loop. One method per phase of a round, in the order of the paper:

propose -> probe -> reward -> update challenger -> fill pool -> update solver
-> evaluate -> checkpoint.

Every random draw is seeded from (run.seed, round, phase, step), so a round's
outcome depends only on the state at its start: a run resumed from a round
checkpoint continues exactly as an uninterrupted one would.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
import signal
import threading
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from challenger.proposals import Parsed, parse_proposals
from challenger.rewards import challenger_rewards, repetition_penalty
from curriculum import dashboard
from curriculum.checkpoint import CheckpointManager, atomic_write, read_state
from curriculum.config import Config, to_yaml
from curriculum.distributed import check_world, full_parameters, init_dist, run_sharded, wrap_deepspeed
from curriculum.envs import Task, benchmark, make_env
from curriculum.grpo import grpo_update
from curriculum.monitor import Monitor, NullMonitor
from curriculum.policy import ROLES, build_roles, load_base, load_role_weights, resolve_device, save_role
from curriculum.pool import PoolEntry, TaskPool
from curriculum.rollout import Completion, generate, pack
from solver.verifier import score_all, solve_rate

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


class StopOnSignal:
    """First SIGTERM/SIGINT: ask the loop to checkpoint after the current step. Second: exit now."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.requested = False
        self._previous = {}

    def _handle(self, signum, frame):
        if self.requested:
            log.error("second signal: exiting without a checkpoint")
            os._exit(128 + signum)
        self.requested = True
        log.warning("signal %s: finishing the current step, then writing a checkpoint", signal.Signals(signum).name)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, h in self._previous.items():
            signal.signal(s, h)
        return False


@dataclasses.dataclass
class Probe:
    """Solve rate of one proposal under the frozen solver (None if the proposal was rejected)."""

    parsed: Parsed
    solve_rate: float | None


class SelfPlayTrainer:
    def __init__(self, cfg: Config, *, resume: bool = False):
        self.cfg = cfg
        self.run_dir = Path(cfg.run.dir)
        (self.run_dir / "tasks").mkdir(parents=True, exist_ok=True)
        if cfg.run.threads > 0:
            torch.set_num_threads(cfg.run.threads)
        torch.use_deterministic_algorithms(cfg.run.deterministic, warn_only=True)
        seed_everything(cfg.run.seed)
        self.device = resolve_device(cfg.run.device)
        self.dist = init_dist(cfg, self.device)
        check_world(cfg, self.dist.world)
        if self.device.type == "cuda" and self.dist.world > 1:
            self.device = torch.device("cuda", self.dist.local_rank)
        self.progress = cfg.log.progress and self.dist.is_main
        self.env = make_env(cfg.env.name, **cfg.env.kwargs)
        self.benchmark = benchmark(self.env, cfg.eval.seed, cfg.eval.per_level)
        self.held_out = {t.text for t in self.benchmark}
        self.roles = self._build_roles()
        self.pool = TaskPool(cfg.curriculum.pool_capacity, cfg.curriculum.max_age, cfg.curriculum.sampler)
        self.ckpt = CheckpointManager(self.run_dir / "checkpoints", cfg.checkpoint.keep_last)
        self.round = 0  # rounds completed
        self.stage = 0  # stages of round self.round + 1 completed
        self.last_checkpoint: Path | None = None
        self.stop = StopOnSignal()
        self.steps = {r: 0 for r in ROLES}
        self.task_log: list[dict] = []
        wandb_id, keep_lines = None, None
        if resume:
            wandb_id, keep_lines = self._restore()
        elif self.dist.is_main:
            (self.run_dir / "config.yaml").write_text(to_yaml(cfg))
        if not self.dist.is_main:  # one writer of metrics, tasks and wandb
            self.monitor = NullMonitor()
            return
        self.monitor = Monitor(self.run_dir, config=dataclasses.asdict(cfg), wandb_mode=cfg.wandb.mode,
                               project=cfg.wandb.project, entity=cfg.wandb.entity, name=cfg.wandb.name,
                               wandb_id=wandb_id, keep_lines=keep_lines)

    def _build_roles(self):
        """Base model -> roles (-> one DeepSpeed engine per role). Rank 0 fills the warm-up cache first."""
        base, self.tokenizer = None, None
        if self.dist.is_main:
            base, self.tokenizer = load_base(self.cfg, self.env, self.held_out, self.progress)
        self.dist.barrier()
        if not self.dist.is_main:
            base, self.tokenizer = load_base(self.cfg, self.env, self.held_out, self.progress)
        roles = build_roles(self.cfg, base, self.device)
        if self.cfg.distributed.engine == "deepspeed":
            wrap_deepspeed(roles, self.cfg, self.dist.world)
        return roles

    # ---------------------------------------------------------------- the loop

    def train(self) -> None:
        """Run rounds until ``train.rounds``; SIGTERM/SIGINT checkpoint after the current step and return."""
        with StopOnSignal() as self.stop:
            try:
                if self.round == 0 and self.stage == 0:
                    self.evaluate(0)
                    self.save_checkpoint()
                    self.write_dashboard()
                first = self.round + 1
                for r in tqdm(range(first, self.cfg.train.rounds + 1), desc="rounds", initial=self.round,
                              total=self.cfg.train.rounds, disable=not self.progress):
                    if not self.run_round(r):
                        log.warning("stopped by signal; checkpoint %s written, resume with "
                                    "`selfplay train --resume %s`", self.last_checkpoint, self.run_dir)
                        return
            finally:
                self.monitor.close()

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
        self.monitor.log({"time/round_s": time.time() - t0}, round=r, phase="round")
        self.stage = 0
        self.save_checkpoint(r)
        self.write_dashboard()
        return not self.stop.requested

    def run_stage(self, r: int, phase: str, step: int) -> None:
        if phase == "challenger":
            probes = self.probe(self.propose(r, "challenger", step, self._challenger_batch()), r, "probe", step)
            self.update_challenger(r, step, probes)
        elif phase == "fill":
            self.fill_pool(r)
        else:
            self.update_solver(r, step)

    # ---------------------------------------------------------------- phases

    def _challenger_batch(self) -> int:
        return self.cfg.challenger.batch_prompts * self.cfg.challenger.group_size

    def propose(self, r: int, phase: str, step: int, n: int) -> list[tuple[Completion, Parsed]]:
        """Generation: the challenger samples ``n`` proposals; the environment parses each."""
        sc = self.cfg.challenger.sampling
        role = self.roles["challenger"].activate()

        def work(prompts: list[str], seed: int) -> list[tuple[Completion, Parsed]]:
            comps = generate(role.model, self.tokenizer, prompts, max_new_tokens=sc.max_new_tokens,
                             temperature=sc.temperature, top_p=sc.top_p, batch_size=sc.batch_size,
                             seed=seed, desc=f"propose r{r}", progress=self.progress)
            parsed = parse_proposals([c.text for c in comps], self.env.parse_proposal,
                                     finished=[c.finished for c in comps])
            return list(zip(comps, parsed))

        prompts = [self.env.challenger_prompt()] * n
        return self._sharded(prompts, self.cfg.challenger.group_size, work, (r, phase, step))

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

    def probe(self, proposals, r: int, phase: str, step: int) -> list[tuple[Completion, Probe]]:
        """Probing: the frozen solver answers each distinct valid task m times; p = mean score."""
        m = self.cfg.curriculum.probe_samples
        tasks = {}
        for _, p in proposals:
            if p.valid:
                tasks.setdefault(p.task.text, p.task)
        rates = self._solve_rates(list(tasks.values()), m, (r, phase, step))
        return [(c, Probe(p, rates[p.task.text] if p.valid else None)) for c, p in proposals]

    def _solve_rates(self, tasks: list[Task], m: int, parts: tuple) -> dict[str, float]:
        if not tasks:
            return {}
        scores = [s for _, s in self._answer(tasks, m, parts, desc="probe")]
        return {t.text: solve_rate(scores[i * m : (i + 1) * m]) for i, t in enumerate(tasks)}

    def _answer(self, tasks: list[Task], m: int, parts: tuple, desc: str) -> list[tuple[Completion, float]]:
        """m scored answers per task (task-major), generated and verified on this rank's share of tasks."""
        sc = self.cfg.solver.sampling
        role = self.roles["solver"].activate()

        def work(items: list[Task], seed: int) -> list[tuple[Completion, float]]:
            comps = generate(role.model, self.tokenizer, [self.env.solver_prompt(t) for t in items],
                             max_new_tokens=sc.max_new_tokens, temperature=sc.temperature, top_p=sc.top_p,
                             batch_size=sc.batch_size, seed=seed, desc=desc, progress=self.progress)
            return list(zip(comps, [self._score(t, c) for t, c in zip(items, comps)]))

        return self._sharded([t for t in tasks for _ in range(m)], m, work, parts)

    def _score(self, task: Task, comp: Completion) -> float:
        return score_all(lambda x: self.env.score(task, x), [comp.text])[0] if comp.finished else 0.0

    def update_challenger(self, r: int, step: int, probes: list[tuple[Completion, Probe]]) -> None:
        """Reward = gate x (frontier(p) - lambda x repetition); one GRPO step on the challenger."""
        rc = self.cfg.reward
        valid_b = torch.tensor([pr.parsed.valid for _, pr in probes])
        p_b = torch.tensor([pr.solve_rate if pr.solve_rate is not None else 0.0 for _, pr in probes])
        rep_b = repetition_penalty([pr.parsed.task.text if pr.parsed.valid else c.text for c, pr in probes],
                                   rc.repetition_threshold)
        reward_b, rstats = challenger_rewards(valid_b, p_b, rep_b, frontier=rc.frontier,
                                              repetition_coef=rc.repetition_coef, invalid_reward=rc.invalid)
        g = self.cfg.challenger.group_size
        rollout = pack([c for c, _ in probes], reward_b.tolist(), [i // g for i in range(len(probes))],
                       self.tokenizer.pad_token_id)
        stats = self._update("challenger", rollout, r, step)
        levels = [pr.parsed.task.level for _, pr in probes if pr.parsed.valid]
        rates = [pr.solve_rate for _, pr in probes if pr.parsed.valid]
        reasons: dict[str, int] = {}
        for _, pr in probes:
            if not pr.parsed.valid:
                key = pr.parsed.reason.split(":")[0]
                reasons[key] = reasons.get(key, 0) + 1
        stats.update({f"challenger/{k}": v for k, v in rstats.items()})
        stats["challenger/unique_fraction"] = len({c.text for c, _ in probes}) / max(1, len(probes))
        stats["challenger/level_mean"] = float(np.mean(levels)) if levels else 0.0
        stats["challenger/solve_rate_mean"] = float(np.mean(rates)) if rates else 0.0
        stats.update({f"challenger/rejected/{k}": v / len(probes) for k, v in sorted(reasons.items())})
        self.monitor.log(stats, round=r, phase="update_challenger")
        self._record_tasks(r, f"challenger_step_{step}", probes, reward_b.tolist(), accepted=None)

    def fill_pool(self, r: int) -> None:
        """Curriculum: fresh proposals from the updated challenger; those in the band join the pool."""
        cc = self.cfg.curriculum
        probes = self.probe(self.propose(r, "fill", 0, cc.fill_proposals), r, "fill_probe", 0)
        accepted_levels, accepted_rates, accepted = [], [], []
        for c, pr in probes:
            ok = (pr.parsed.valid and cc.band_low <= pr.solve_rate <= cc.band_high
                  and pr.parsed.task.text not in self.held_out)
            accepted.append(ok)
            if ok and self.pool.add(PoolEntry(pr.parsed.task, pr.solve_rate, r, c.text)):
                accepted_levels.append(pr.parsed.task.level)
                accepted_rates.append(pr.solve_rate)
        valid = [pr for _, pr in probes if pr.parsed.valid]
        stats = {
            "curriculum/proposals": len(probes),
            "curriculum/valid_fraction": len(valid) / max(1, len(probes)),
            "curriculum/accepted": len(accepted_levels),
            "curriculum/accepted_fraction": len(accepted_levels) / max(1, len(probes)),
            "curriculum/held_out_collisions": sum(pr.parsed.valid and pr.parsed.task.text in self.held_out for _, pr in probes),
            "curriculum/pool_size": len(self.pool),
            "curriculum/accepted_level_mean": float(np.mean(accepted_levels)) if accepted_levels else 0.0,
        }
        stats.update(quantiles([1 - p for p in accepted_rates], "curriculum/accepted_difficulty"))
        stats.update(quantiles([e.difficulty for e in self.pool.entries.values()], "curriculum/pool_difficulty"))
        stats.update(quantiles([float(e.task.level) for e in self.pool.entries.values()], "curriculum/pool_level"))
        self.monitor.log(stats, round=r, phase="fill_pool")
        self._record_tasks(r, "fill", probes, None, accepted=accepted)

    def _solver_tasks(self, r: int, step: int) -> list[Task]:
        n = self.cfg.solver.batch_prompts
        rng = random.Random(derive_seed(self.cfg.run.seed, r, "solver_tasks", step))
        if self.cfg.curriculum.mode == "uniform":
            tasks = []
            while len(tasks) < n:
                t = self.env.sample_task(rng.randint(1, self.env.num_levels), rng)
                if t.text not in self.held_out:
                    tasks.append(t)
            return tasks
        return [e.task for e in self.pool.sample(n, rng)]

    def update_solver(self, r: int, step: int) -> None:
        """Execution + update: G answers per pool task, verifier scores, one GRPO step."""
        tasks = self._solver_tasks(r, step)
        if not tasks:
            self.monitor.log({"solver/skipped": 1}, round=r, phase="update_solver")
            return
        g = self.cfg.solver.group_size
        answers = self._answer(tasks, g, (r, "solver", step), desc=f"solve r{r}")
        comps, scores = [c for c, _ in answers], [s for _, s in answers]
        rewards, rates = [], []
        for i, t in enumerate(tasks):
            s = scores[i * g : (i + 1) * g]
            rewards += s
            rates.append(solve_rate(s))
            if self.cfg.curriculum.mode == "selfplay":
                self.pool.update_solve_rate(t.text, rates[-1])
        rollout = pack(comps, rewards, [i // g for i in range(len(comps))], self.tokenizer.pad_token_id)
        stats = self._update("solver", rollout, r, step)
        stats["solver/task_level_mean"] = float(np.mean([t.level for t in tasks]))
        stats["solver/solved_all_fraction"] = float(np.mean([x == 1.0 for x in rates]))
        stats["solver/solved_none_fraction"] = float(np.mean([x == 0.0 for x in rates]))
        stats["curriculum/pool_size"] = len(self.pool)
        self.monitor.log(stats, round=r, phase="update_solver")

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

    def evaluate(self, r: int) -> dict[str, float]:
        """Held-out benchmark (greedy, or mean@k when sampled), accuracy overall and per level.

        Several ranks split the tasks and gather the scores. Greedy scores do not depend on
        the split; sampled ones are seeded per rank, so their stream differs from one process's.
        """
        t0 = time.time()
        ec, batch = self.cfg.eval, self.cfg.solver.sampling.batch_size

        def work(tasks: list[Task], seed: int) -> list[list[float]]:
            return solver_scores(self.roles["solver"], self.tokenizer, self.env, tasks, ec, batch, seed)

        per_rank = ec.temperature > 0 and self.dist.world > 1
        seed = derive_seed(ec.seed, "rank", self.dist.rank) if per_rank else ec.seed
        scores = run_sharded(self.dist, [[t] for t in self.benchmark], work, lambda u: seed, per_unit=False)
        results = accuracy_report(self.benchmark, scores)
        results["time/eval_s"] = time.time() - t0
        self.monitor.log(results, round=r, phase="eval")
        return results

    # ---------------------------------------------------------------- records

    def _record_tasks(self, r: int, phase: str, probes, rewards, accepted) -> None:
        for i, (c, pr) in enumerate(probes):
            self.task_log.append({
                "round": r, "phase": phase, "text": c.text, "finished": c.finished,
                "task": pr.parsed.task.to_dict() if pr.parsed.valid else None,
                "rejected": None if pr.parsed.valid else pr.parsed.reason,
                "solve_rate": pr.solve_rate,
                "reward": None if rewards is None else rewards[i],
                "accepted": None if accepted is None else accepted[i],
            })

    def write_task_log(self, r: int) -> None:
        if not self.dist.is_main:
            return
        path = self.run_dir / "tasks" / f"round_{r:04d}.jsonl"
        atomic_write(path, "".join(json.dumps(rec) + "\n" for rec in self.task_log))
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
            dashboard.write(self.run_dir)
        except Exception:  # noqa: BLE001 - the page is a view; the run must go on
            log.warning("could not write the dashboard", exc_info=True)

    # ---------------------------------------------------------------- checkpoints

    def save_checkpoint(self, r: int | None = None) -> Path:
        """Everything the run's future depends on, after round ``r`` plus ``self.stage`` stages."""
        self.round = self.round if r is None else r
        r = self.round
        state = {
            "round": r, "stage": self.stage, "steps": self.steps, "wandb_id": self.monitor.wandb_id, "metrics_lines": self.monitor.lines,
            "config_sha": hashlib.sha256(to_yaml(self.cfg).encode()).hexdigest(), "finished": r >= self.cfg.train.rounds and self.stage == 0,
            "time": time.time(),
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
            (tmp / "round_tasks.json").write_text(json.dumps(self.task_log))
            self.last_checkpoint = self.ckpt.finish(name, tmp, state)
        # Also a barrier: no rank runs ahead of (or exits before) a complete checkpoint.
        self.last_checkpoint = self.dist.broadcast_object(self.last_checkpoint)
        return self.last_checkpoint

    def fingerprint(self) -> str:
        """What every rank must agree on: counters, pool, task log and (unless partitioned) the weights."""
        h = hashlib.sha256(json.dumps([self.round, self.stage, self.steps, self.pool.state_dict(), self.task_log],
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

    def _restore(self) -> tuple[str | None, int]:
        path = self.dist.broadcast_object(self.ckpt.latest() if self.dist.is_main else None)
        if path is None:
            raise FileNotFoundError(f"no complete checkpoint under {self.ckpt.dir}")
        log.info("resuming from %s", path)
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
        self.pool.load_state_dict(json.loads((path / "pool.json").read_text()))
        self.task_log = json.loads((path / "round_tasks.json").read_text())
        self.round = int(state["round"])
        self.stage = int(state["stage"])
        self.steps = {k: int(v) for k, v in state["steps"].items()}
        return state.get("wandb_id"), int(state["metrics_lines"])


@torch.no_grad()
def solver_scores(role, tokenizer, env, tasks: list[Task], eval_cfg, batch_size: int, seed: int) -> list[list[float]]:
    """``eval_cfg.samples`` scores per task (0 for an unfinished answer): greedy, or sampled from ``seed``."""
    role.activate()
    k = eval_cfg.samples
    greedy = eval_cfg.temperature == 0
    prompts = [env.solver_prompt(t) for t in tasks for _ in range(k)]
    comps = generate(role.model, tokenizer, prompts, max_new_tokens=eval_cfg.max_new_tokens, greedy=greedy,
                     temperature=eval_cfg.temperature if not greedy else 1.0, batch_size=batch_size, seed=seed)
    out = []
    for i, t in enumerate(tasks):
        group = comps[i * k : (i + 1) * k]
        scores = score_all(lambda x, t=t: env.score(t, x), [c.text for c in group])
        out.append([s if c.finished else 0.0 for s, c in zip(scores, group)])
    return out


def accuracy_report(tasks: list[Task], scores: list[list[float]]) -> dict[str, float]:
    """``eval/accuracy`` over every score, and ``eval/accuracy/tier_L`` per level."""
    correct: dict[int, list[float]] = {}
    for t, s in zip(tasks, scores):
        correct.setdefault(t.level, []).extend(s)
    out = {"eval/accuracy": float(np.mean([s for v in correct.values() for s in v]))}
    for level in sorted(correct):
        out[f"eval/accuracy/tier_{level}"] = float(np.mean(correct[level]))
    return out


def evaluate_solver(role, tokenizer, env, tasks: list[Task], eval_cfg, batch_size: int) -> dict[str, float]:
    """Accuracy on ``tasks``: greedy, or the mean over ``eval_cfg.samples`` samples per task.

    Sampling is seeded from ``eval_cfg.seed`` alone, so every round is scored on the
    same random stream (round-to-round differences are the model's, not the dice's).
    """
    return accuracy_report(tasks, solver_scores(role, tokenizer, env, tasks, eval_cfg, batch_size, eval_cfg.seed))
