"""Multi-turn sampling with tools: the model writes, its tool call runs, the output comes back, until it answers.

One trajectory per prompt, over at most ``max_turns`` turns (each one ``generate`` call for
every trajectory still going, all continued from their token ids as they stand):

1. The model writes a turn. A turn that contains a complete tool call (the tools find it,
   ``solver.tools.Toolbox.find_call``) is cut right after the call's closing tag; the
   tokens sampled after it are dropped (``generate`` has no stop strings).
2. The calls of the turn run as one batch; each observation is encoded and appended to its
   trajectory with mask 0 (``Completion.mask``): ``pack`` gives it no log-prob, advantage or
   loss, and it is not counted as generated.
3. A turn without a complete call is the answer: the trajectory ends, ``finished`` if it
   reached a stop token. A call in the last turn (or with no token budget left) ends it
   unfinished: the solver ran out of turns without answering, which scores 0.

``max_new_tokens`` bounds the model's own tokens over all turns, so Dr. GRPO's constant
(``sampling.max_new_tokens``) still bounds a trajectory's trained tokens. ``text`` is the
answer, the last turn's text (the environment scores it); ``trajectory`` the whole text.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from curriculum.engine.prompts import TokenIds, encode_prompt
from curriculum.engine.rollout import Completion, generate


@dataclass
class Trajectory(Completion):
    """A multi-turn completion: ``completion_ids`` holds every turn and observation, ``mask`` marks the
    model's tokens, ``text`` is the answer; ``tool_statuses`` one sandbox status per call that ran,
    ``sandbox_s`` the seconds its calls kept the rollout waiting."""

    trajectory: str = ""
    turns: int = 0
    tool_statuses: list[str] = field(default_factory=list)
    sandbox_s: float = 0.0

    @property
    def tool_calls(self) -> int:
        return len(self.tool_statuses)


class Tools(Protocol):
    """What the loop needs of the tools (``solver.tools.Toolbox``)."""

    def find_call(self, text: str) -> Any | None:
        """The first complete call in ``text`` (an object with ``end``, the index after it), or None."""

    def run(self, calls: list) -> list:
        """One result per call (``observation`` text, ``status``, ``seconds``)."""


# sample(prompts, max_new_tokens, seed) -> one Completion per prompt
Sample = Callable[[list[TokenIds], int, "int | None"], list[Completion]]


def run_turns(sample: Sample, tokenizer, prompt_ids: list[list[int]], tools: Tools, *, max_turns: int,
              max_new_tokens: int, seed: int | None = None) -> list[Trajectory]:
    """One trajectory per prompt (see the module docstring); turn k samples with ``seed + k``."""
    trajs = [Trajectory(list(p), [], "", False, mask=[], logprobs=[]) for p in prompt_ids]
    active = list(range(len(trajs)))
    for turn in range(max_turns):
        if not active:
            break
        budget = [max_new_tokens - trajs[i].model_tokens for i in active]
        prompts = [TokenIds(trajs[i].prompt_ids + trajs[i].completion_ids) for i in active]
        outs = sample(prompts, max(budget), None if seed is None else seed + turn)
        calls, callers = [], []
        for i, out, left in zip(active, outs, budget):
            t = trajs[i]
            ids, text, finished, call = _cut_turn(tokenizer, out, left, tools)
            t.completion_ids += ids
            t.mask += [1] * len(ids)
            # the engine's log-probs, where it gives them (a turn without them leaves the trajectory without)
            t.logprobs = None if t.logprobs is None or out.logprobs is None else t.logprobs + out.logprobs[: len(ids)]
            t.turns += 1
            if call is None:  # an answer: done
                t.text, t.finished = text, finished
            elif turn + 1 < max_turns and t.model_tokens < max_new_tokens:
                calls.append(call)
                callers.append(i)
            # else: a call with no turn or token left to read its output: unfinished
        for i, result in zip(callers, tools.run(calls) if calls else []):
            obs = tokenizer(result.observation, add_special_tokens=False)["input_ids"]
            t = trajs[i]
            t.completion_ids += obs
            t.mask += [0] * len(obs)
            if t.logprobs is not None:
                t.logprobs += [0.0] * len(obs)
            t.tool_statuses.append(result.status)
            t.sandbox_s += result.seconds
        active = callers
    for t in trajs:
        t.trajectory = tokenizer.decode(t.completion_ids, skip_special_tokens=True)
    return trajs


def _cut_turn(tokenizer, out: Completion, budget: int, tools: Tools) -> tuple[list[int], str, bool, Any]:
    """A sampled turn as the trajectory keeps it: (ids, text, finished, call or None).

    Ids past the row's own budget are dropped (the batch sampled up to the largest budget); a
    turn with a complete call ends with the first token whose text completes it.
    """
    ids = out.completion_ids[:budget]
    finished = out.finished and len(out.completion_ids) <= budget
    text = out.text if len(ids) == len(out.completion_ids) else tokenizer.decode(ids, skip_special_tokens=True)
    call = tools.find_call(text)
    if call is None:
        return ids, text, finished, None
    lo, hi = 1, len(ids)  # the shortest prefix that holds the call (binary search: decodes are the cost)
    while lo < hi:
        mid = (lo + hi) // 2
        if tools.find_call(tokenizer.decode(ids[:mid], skip_special_tokens=True)) is None:
            lo = mid + 1
        else:
            hi = mid
    ids = ids[:hi]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    return ids, text, False, tools.find_call(text)


def generate_with_tools(model, tokenizer, prompts: list, *, tools: Tools, max_turns: int, max_new_tokens: int,
                        seed: int | None = None, style: str = "plain", sample_fn: Callable = generate,
                        **kwargs) -> list[Trajectory]:
    """``generate``'s signature and seeding, over several turns with ``tools`` (see the module docstring).
    ``sample_fn(model, tokenizer, prompts, **kw)`` samples each turn (an engine's ``generate`` with its role)."""

    def sample(batch: list[TokenIds], n: int, s: int | None) -> list[Completion]:
        return sample_fn(model, tokenizer, batch, max_new_tokens=n, seed=s, style=style, **kwargs)

    ids = [encode_prompt(tokenizer, p, style) for p in prompts]
    return run_turns(sample, tokenizer, ids, tools, max_turns=max_turns, max_new_tokens=max_new_tokens, seed=seed)


def tool_stats(trajectories: list[Trajectory], scores: list[float] | None = None) -> dict[str, float]:
    """Tool use of trajectories: calls and turns per trajectory, the share of calls that failed (any status
    but ok) and timed out, and with ``scores`` the solve rate of answers with and without a call (each only
    when there are such answers)."""
    statuses = [s for t in trajectories for s in t.tool_statuses]
    out = {
        "tool_calls_mean": float(np.mean([t.tool_calls for t in trajectories])) if trajectories else 0.0,
        "turns_mean": float(np.mean([t.turns for t in trajectories])) if trajectories else 0.0,
        "tool_error_rate": float(np.mean([s != "ok" for s in statuses])) if statuses else 0.0,
        "tool_timeout_rate": float(np.mean([s == "timeout" for s in statuses])) if statuses else 0.0,
    }
    if scores is None:
        return out
    used = [s for t, s in zip(trajectories, scores) if t.tool_calls]
    unused = [s for t, s in zip(trajectories, scores) if not t.tool_calls]
    if used:
        out["solve_rate_with_tool"] = float(np.mean(used))
    if unused:
        out["solve_rate_without_tool"] = float(np.mean(unused))
    return out
