"""The roles' work spread over the ranks: seeded sampling functions handed to the roles, gathered results.

Rollouts are data-parallel by *units* (a GRPO group, a probed task's samples): each rank
runs a role on a contiguous share of the units, sampling through ``generate`` with a seed
derived from (run.seed, round, phase, step), and the results are gathered in unit order,
so every rank holds the same proposals, attempts and scores. Generated tokens are counted
per role (the model's own, not a tool's observations): the compute axis of the curriculum
comparison. A role with tools (``solver.tools``, ``challenger.tools``) samples over several turns
(``curriculum.engine.tools``).
"""
from __future__ import annotations

import functools
import hashlib
import time

from challenger.role import Challenger, Proposal
from curriculum import metrics as M
from curriculum.config import Config, ToolUseConfig
from curriculum.engine.distributed import run_sharded
from curriculum.engine.policy import ROLES
from curriculum.engine.rollout import HFEngine
from curriculum.engine.tools import generate_with_tools
from solver.role import Attempt, Solver
from solver.tools import TOOLS, Toolbox

# Memory limit of a tool call's sandboxed process (MB).
TOOL_MEMORY_MB = 256


def make_tools(sc: ToolUseConfig) -> Toolbox | None:
    """A role's tools (``solver.tools``, ``challenger.tools``) on this process's shared sandbox pool; None
    without tools."""
    if not sc.tools:
        return None
    from curriculum.envs.code_output import shared_sandbox

    box = shared_sandbox(sc.tool_workers, sc.tool_timeout_s, TOOL_MEMORY_MB)
    return Toolbox({name: TOOLS[name](box, sc.tool_timeout_s) for name in sc.tools}, sc.tool_output_chars)


def make_engine(cfg: Config, roles: dict, device):
    """The sampling engine of ``rollout.engine`` for ``roles`` (name -> Role): the one switch every rollout
    (propose, probe, solve, eval) goes through. ``hf``: transformers' generate on the role's module;
    ``vllm``: a vLLM engine beside the trainer (``curriculum.engine.vllm_engine``)."""
    if cfg.rollout.engine == "vllm":
        from curriculum.engine.vllm_engine import VLLMEngine

        return VLLMEngine(cfg, roles, device)
    return HFEngine()


def derive_seed(*parts) -> int:
    """A 63-bit seed from any tuple of parts (stable across processes and Python versions)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class Rollouts:
    """Proposals of the challenger and attempts of the solver, sharded over ``dist``'s ranks."""

    def __init__(self, cfg: Config, dist, roles: dict, tokenizer, challenger: Challenger, solver: Solver,
                 progress: bool = False, style: str = "plain", engine=None):
        self.cfg = cfg
        self.engine = engine or HFEngine()  # what samples (rollout.engine): make_engine
        self.style = style  # prompt style, resolved: chat or plain
        self.dist = dist
        self.roles = roles
        self.tokenizer = tokenizer
        self.challenger = challenger
        self.solver = solver
        self.progress = progress
        self.tokens = {r: 0 for r in ROLES}  # generated tokens per role, cumulative
        self.role_tools = {r: make_tools(getattr(cfg, r)) for r in ROLES}
        self.tools = self.role_tools["solver"]  # the solver's: eval and the solver's metrics use them
        self.new_round()
        self._env_counts: dict[str, float] = {}  # the environment's counters at the last env_stats call

    def propose(self, prompts: list[str], parts: tuple, desc: str, kinds: list[str] | None = None) -> list[Proposal]:
        """One proposal per prompt (G repeats of a prompt form a group), parsed by the environment as a task of
        type ``kinds[i]`` (typed environments)."""

        def work(items: list[tuple], seed: int) -> list[Proposal]:
            return self.challenger.propose([p for p, _ in items], self.sampler("challenger", seed, desc),
                                           kinds=[k for _, k in items])

        items, t0 = list(zip(prompts, kinds or [""] * len(prompts))), time.time()
        proposals = self.sharded(items, self.cfg.challenger.group_size, work, parts)
        self.seconds[M.PROPOSE_S] += time.time() - t0
        self._count("challenger", [p.completion for p in proposals])
        self.sandbox_s += sum(getattr(p.completion, "sandbox_s", 0.0) for p in proposals)
        return proposals

    def attempt(self, tasks: list, m: int, parts: tuple, desc: str, temperature: float = 0.0,
                purpose: str = M.SOLVE_S) -> list[Attempt]:
        """``m`` scored solver attempts per task (task-major), each rank answering and scoring its share; their
        seconds count under ``purpose`` (M.SOLVE_S: training answers, M.PROBE_S: probes and label checks)."""

        def work(items: list, seed: int) -> list[Attempt]:
            return self.solver.attempt(items, self.sampler("solver", seed, desc, temperature))

        t0 = time.time()
        attempts = self.sharded([t for t in tasks for _ in range(m)], m, work, parts)
        self.seconds[purpose] += time.time() - t0
        self._count("solver", [a.completion for a in attempts])
        self.sandbox_s += sum(getattr(a.completion, "sandbox_s", 0.0) for a in attempts)
        return attempts

    def probe(self, tasks: list, m: int, parts: tuple) -> dict[str, list[Attempt]]:
        """``m`` scored probe attempts at each task at the probing temperature, by task text."""
        if not tasks:
            return {}
        attempts = self.attempt(tasks, m, parts, desc="probe", temperature=self.cfg.curriculum.probe_temperature,
                                purpose=M.PROBE_S)
        return {t.text: attempts[i * m : (i + 1) * m] for i, t in enumerate(tasks)}

    def env_stats(self) -> dict[str, float]:
        """How much the environment's counters (``env.stats()``: sandbox executions, ...) grew since the last
        call, summed over the ranks. Results an environment caches are not run again, so a resumed run may
        count more than an uninterrupted one."""
        env = self.solver.env
        now = env.stats() if hasattr(env, "stats") else {}
        if self.dist.world > 1:
            parts = self.dist.all_gather_object(now)
            now = {k: sum(p.get(k, 0) for p in parts) for k in now}
        delta = {k: v - self._env_counts.get(k, 0) for k, v in now.items()}
        self._env_counts = now
        return delta

    def new_round(self) -> None:
        """The round's counters to zero (the trainer calls it as a round begins)."""
        self.sandbox_s = 0.0  # seconds the rollouts of both roles waited on tool calls
        self.seconds = dict.fromkeys((M.PROPOSE_S, M.PROBE_S, M.SOLVE_S), 0.0)  # generation and scoring by purpose

    def round_stats(self) -> dict[str, float]:
        """The round's line of rollout costs: tokens so far, the environment's counters, time in tools, and
        seconds spent generating and scoring proposals, probes and the solver's training answers."""
        tools = any(t is not None for t in self.role_tools.values())
        return {**({M.SANDBOX_S: self.sandbox_s} if tools else {}), **self.seconds, **self.token_stats(),
                **self.env_stats()}

    def token_stats(self) -> dict[str, int]:
        return {f"{name}/generated_tokens": n for name, n in self.tokens.items()}

    def sampler(self, name: str, seed: int, desc: str, temperature: float = 0.0):
        """``sample(prompts) -> completions`` of role ``name`` at its sampling settings (``temperature`` > 0
        overrides the configured one), seeded."""
        sc = getattr(self.cfg, name).sampling
        fn, tools = self.engine.generate, self.role_tools[name]
        if tools is not None:
            fn = functools.partial(generate_with_tools, tools=tools, max_turns=getattr(self.cfg, name).max_turns,
                                   sample_fn=self.engine.generate)
        return functools.partial(fn, self.roles[name], self.tokenizer, max_new_tokens=sc.max_new_tokens,
                                 temperature=temperature or sc.temperature, top_p=sc.top_p, batch_size=sc.batch_size,
                                 seed=seed, desc=desc, progress=self.progress, style=self.style)

    def sharded(self, items: list, unit: int, work, parts: tuple) -> list:
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

    def _count(self, name: str, completions) -> None:
        self.tokens[name] += sum(c.model_tokens for c in completions)  # a tool's observations are not generated
