"""The challenger role: prompt, propose through a sampling function it is handed, parse, reward.

The challenger does not own a model: the loop hands it ``sample(prompts) -> completions``
(a completion is anything with ``text`` and ``finished``). Each GRPO group gets its own
prompt, conditioned on a few reference tasks (Absolute Zero's reference triplets), so
the groups of a batch ask for different things and the group baseline compares
proposals that answered the same prompt.
"""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import torch

from challenger.proposals import Parsed, parse_proposals
from challenger.rewards import challenger_rewards, repetition_penalty


class ChallengerEnv(Protocol):
    """What the challenger needs of an environment. One with several task types (``task_types``) takes
    the type as a keyword: ``challenger_prompt(kind=...)``, ``parse_proposal(text, kind=...)``."""

    def challenger_prompt(self) -> str | list[dict]: ...

    def parse_proposal(self, text: str) -> Any: ...

    def format_proposal(self, task: Any) -> str: ...


@dataclass
class Proposal:
    """One sampled proposal: its completion, what parsing made of it and, once probed, its solve rate
    and the answer it was graded against (its reference answer, or the solver's majority label);
    ``kind``: the task type its prompt asked for ("" in an environment without types)."""

    completion: Any
    parsed: Parsed
    solve_rate: float | None = None
    label: str | None = None
    kind: str = ""

    @property
    def valid(self) -> bool:
        return self.parsed.valid

    @property
    def task(self) -> Any:
        return self.parsed.task


def proposal_prompt(prefix: str, references: Sequence[str]) -> str:
    """Few-shot prompt: each reference written as a proposal on its own line, then ``prefix``.

    ``proposal_prompt("L:", ["a1b2", "a3b4c5"]) == "L:a1b2\\nL:a3b4c5\\nL:"``; no references
    gives ``prefix`` alone.
    """
    return "".join(f"{prefix}{ref}\n" for ref in references) + prefix


def proposal_messages(messages: Sequence[dict], references: Sequence[str]) -> list[dict]:
    """Chat prompt with references: the last message (the user's request) gains the references,
    each as the proposal that would pose it, as examples to differ from; none gives ``messages``."""
    out = [dict(m) for m in messages]
    if references:
        out[-1]["content"] += "\n\nTasks already posed (propose a different one):\n\n" + "\n\n".join(references)
    return out


class Challenger:
    """Proposes tasks of ``env``; is rewarded for tasks at the solver's frontier that are not repeats."""

    def __init__(self, env: ChallengerEnv, *, frontier: str = "uncertainty", repetition_coef: float = 1.0,
                 repetition_threshold: float = 0.5, invalid_reward: float = -1.0, wrong_reward: float | None = None):
        self.env = env
        self.frontier = frontier
        self.repetition_coef = repetition_coef
        self.repetition_threshold = repetition_threshold
        self.invalid_reward = invalid_reward
        self.wrong_reward = wrong_reward  # None: every rejection gets invalid_reward

    def prompt(self, references: Sequence[Any] = (), kind: str = "") -> str | list[dict]:
        """The prompt of one group, conditioned on reference tasks (none: the environment's own prompt):
        text few-shot (``proposal_prompt``) or chat messages (``proposal_messages``), as the environment writes it;
        ``kind`` asks a typed environment for a task of that type."""
        base, refs = self.env.challenger_prompt(**_typed(kind)), [self.env.format_proposal(t) for t in references]
        return proposal_prompt(base, refs) if isinstance(base, str) else proposal_messages(base, refs)

    def propose(self, prompts: Sequence[Any], sample: Callable[[list[str]], list],
                kinds: Sequence[str] | None = None) -> list[Proposal]:
        """One proposal per prompt (of the type ``kinds[i]`` asked for); a truncated or unparsable one is a
        rejection, never an exception."""
        completions = sample(list(prompts))
        kinds = list(kinds) if kinds is not None else [""] * len(completions)
        parsed = [parse_proposals([c.text], functools.partial(self.env.parse_proposal, **_typed(k)),
                                  finished=[c.finished])[0] for c, k in zip(completions, kinds)]
        return [Proposal(c, p, kind=k) for c, p, k in zip(completions, parsed, kinds)]

    def rewards(self, proposals: Sequence[Proposal]) -> tuple[torch.Tensor, dict[str, float]]:
        """gate x (frontier(p) - coef x repetition); ``proposals`` must be probed. Returns (reward_b, stats)."""
        valid_b = torch.tensor([p.valid for p in proposals], dtype=torch.bool)
        p_b = torch.tensor([p.solve_rate if p.valid else 0.0 for p in proposals], dtype=torch.float32)
        rep_b = repetition_penalty([p.task.text if p.valid else "" for p in proposals],
                                   self.repetition_threshold, valid=valid_b.tolist())
        tiers = {} if self.wrong_reward is None else dict(
            wrong_b=torch.tensor([p.parsed.well_formed for p in proposals], dtype=torch.bool), wrong_reward=self.wrong_reward)
        reward_b, stats = challenger_rewards(valid_b, p_b, rep_b, frontier=self.frontier,
                                             repetition_coef=self.repetition_coef, invalid_reward=self.invalid_reward,
                                             **tiers)
        stats.update(proposal_stats(proposals))
        return reward_b, stats


def _typed(kind: str) -> dict:
    return {"kind": kind} if kind else {}


def proposal_stats(proposals: Sequence[Proposal]) -> dict[str, float]:
    """Distinct texts, mean level and solve rate of the valid ones, the share of each rejection reason, and
    per task type (where the prompts asked for types) the valid fraction and the valid ones' solve rate."""
    n = max(1, len(proposals))
    valid = [p for p in proposals if p.valid]
    rates = [p.solve_rate for p in valid if p.solve_rate is not None]
    reasons = rejection_reasons(proposals)
    stats = {
        "unique_fraction": len({p.completion.text for p in proposals}) / n,
        "level_mean": sum(p.task.level for p in valid) / len(valid) if valid else 0.0,
        "solve_rate_mean": sum(rates) / len(rates) if rates else 0.0,
    }
    stats.update({f"rejected/{k}": v / n for k, v in sorted(reasons.items())})
    stats.update(per_type_stats(proposals))
    return stats


def rejection_reasons(proposals: Sequence[Proposal]) -> Counter:
    """How many invalid proposals each rejection reason holds (``too_long:9>6`` counts as ``too_long``)."""
    return Counter(p.parsed.reason.split(":")[0] for p in proposals if not p.valid)


def per_type_stats(proposals: Sequence[Proposal]) -> dict[str, float]:
    """``valid_fraction/type_K`` and ``solve_rate/type_K`` (mean over the probed valid ones) per task type K."""
    stats: dict[str, float] = {}
    for kind in sorted({p.kind for p in proposals if p.kind}):
        mine = [p for p in proposals if p.kind == kind]
        rates = [p.solve_rate for p in mine if p.valid and p.solve_rate is not None]
        stats[f"valid_fraction/type_{kind}"] = sum(p.valid for p in mine) / len(mine)
        if rates:
            stats[f"solve_rate/type_{kind}"] = sum(rates) / len(rates)
    return stats
