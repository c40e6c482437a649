"""Metric names: the trainer writes them to metrics.jsonl (and wandb); the round lines, the health
alarms and the dashboard read them. One spelling each, so a rename cannot silently blank a chart.

A name is ``section/what``; per-level and per-type variants append ``/tier_N`` or ``/type_T``
(``per_level``, ``per_type``), and the dashboard discovers those suffixes from the keys it reads.
"""
from __future__ import annotations

# ---- eval (held-out benchmark, every eval.every rounds)
ACCURACY = "eval/accuracy"  # greedy, all levels; per_level(ACCURACY, N) per level
MEAN_AT_K = "eval/mean_at_k"  # sampled, eval.samples per task
FRONTIER = "eval/frontier_level"  # highest level scored at least 0.5
EVAL_S = "time/eval_s"

# ---- curriculum (the challenger's fill of the task pool)
PROPOSALS = "curriculum/proposals"
FILL_BATCHES = "curriculum/fill_batches"
VALID_FRACTION = "curriculum/valid_fraction"
ACCEPTED = "curriculum/accepted"
ACCEPTED_FRACTION = "curriculum/accepted_fraction"
ACCEPTED_LEVEL = "curriculum/accepted_level_mean"
ACCEPTED_DIFFICULTY = "curriculum/accepted_difficulty"  # quantiles: _mean, _p10, ...
MASTERED_KEPT = "curriculum/mastered_kept"
HELD_OUT_COLLISIONS = "curriculum/held_out_collisions"
POOL_SIZE = "curriculum/pool_size"
POOL_DIFFICULTY = "curriculum/pool_difficulty"
POOL_LEVEL = "curriculum/pool_level"  # quantiles: _mean, ...
LABEL_ACCURACY = "curriculum/label_accuracy"
LABEL_CHECKS = "curriculum/label_checks"
LABEL_ACCURACY_IN_BAND = "curriculum/label_accuracy_in_band"  # over the checks whose vote share the band admits
LABEL_CHECKS_IN_BAND = "curriculum/label_checks_in_band"
PSEUDO_LABEL_ACCURACY = "curriculum/pseudo_label_accuracy"

# ---- challenger (its GRPO step)
CHALLENGER_VALID = "challenger/valid_fraction"
CHALLENGER_REWARD = "challenger/reward_mean"
CHALLENGER_SOLVE_RATE = "challenger/solve_rate_mean"
UNIQUE_FRACTION = "challenger/unique_fraction"
REPETITION = "challenger/repetition_mean"
REJECTED = "challenger/rejected"  # per reason: REJECTED/<reason>, a share of the batch

# ---- solver (its GRPO steps)
SOLVER_REWARD = "solver/reward_mean"
SOLVER_LEVEL = "solver/task_level_mean"
NO_SIGNAL = "solver/no_signal_fraction"
SOLVED_ALL = "solver/solved_all_fraction"
SOLVED_NONE = "solver/solved_none_fraction"
GROUPS_DRAWN = "solver/groups_drawn"
DISTINCT_TASKS = "solver/distinct_tasks"
REPLAYED = "solver/replayed_tasks"
SKIPPED = "solver/skipped"
SOLVE_RATE = "solver/solve_rate"  # per type only: per_type(SOLVE_RATE, T)
TOOL_CALLS = "solver/tool_calls_mean"
TOOL_ERROR_RATE = "solver/tool_error_rate"

# ---- either role's GRPO step, logged as of_role(role, what)
ROLES = ("challenger", "solver")
GENERATED_TOKENS = "generated_tokens"  # cumulative over the run
ENTROPY = "entropy"
APPROX_KL = "approx_kl"
KL_REF = "kl_ref"  # to the reference model, loss.kl_coef > 0
ENGINE_LOGPROB_GAP = "engine_logprob_gap"  # rollout.engine=vllm
TIS_CAPPED = "tis_capped_frac"
NONFINITE_STEPS = "nonfinite_steps"

# ---- sandbox (environments that run code)
SANDBOX_EXECUTIONS = "sandbox/executions"
SANDBOX_TIMEOUTS = "sandbox/timeouts"

# ---- time and health
ROUND_S = "time/round_s"
SANDBOX_S = "time/sandbox_s"
# a round's generation and scoring by purpose: proposals, probes (label checks included), training answers
PROPOSE_S, PROBE_S, SOLVE_S = "time/propose_s", "time/probe_s", "time/solve_s"
HEALTH = "health"  # alarm(name): 0/1 per round; alarm(name)/<value>: the numbers behind it
HEALTH_ACTIVE = "health/active"
STOP_REASON = "health/stop_reason"


def per_level(name: str, level: int) -> str:
    return f"{name}/tier_{level}"


def per_type(name: str, kind: str) -> str:
    return f"{name}/type_{kind}"


def level_of(key: str, name: str) -> int | None:
    """N of ``per_level(name, N)``; None for any other key."""
    head = per_level(name, "")
    return int(key[len(head):]) if key.startswith(head) and key[len(head):].isdigit() else None


def type_of(key: str, name: str) -> str | None:
    """K of ``per_type(name, K)``; None for any other key."""
    head = per_type(name, "")
    return key[len(head):] if key.startswith(head) and len(key) > len(head) and "/" not in key[len(head):] else None


def quantile(name: str, q: str) -> str:
    """One statistic of a metric logged as quantiles (pool.quantiles): q is mean, p10, p50 or p90."""
    return f"{name}_{q}"


def of_role(role: str, what: str) -> str:
    return f"{role}/{what}"


def alarm(name: str) -> str:
    return f"{HEALTH}/{name}"
