"""Curriculum health: named alarms computed every round from what ``metrics.jsonl`` already holds.

Each alarm is a pure function of the run's per-round metrics up to a round (``dashboard.per_round``:
challenger/* and solver/* are the round's means, the rest its last value) and the ``health.*``
thresholds. It returns None (quiet) or a ``Fired`` with the numbers behind it and what to change.
Nothing is kept between rounds: the trainer recomputes the history from the metrics file, so a
resumed run (whose metrics file is cut back to its checkpoint) has exactly the alarms it had.
See docs/health.md.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Callable

from curriculum import metrics as M

log = logging.getLogger("selfplay")

Rows = dict[int, dict[str, float]]  # round -> metric -> value (dashboard.per_round)


@dataclass(frozen=True)
class Fired:
    """An alarm that is on: the numbers behind it (logged as health/<name>/<key>) and a one-line why/what-to-do."""

    values: dict[str, float]
    text: str


@dataclass(frozen=True)
class Context:
    """What the alarms need besides the metrics: the thresholds and the run's shape."""

    h: "object"  # curriculum.config.HealthConfig
    solver_batch: int = 0
    selfplay: bool = True


def _series(rows: Rows, key: str) -> list[tuple[int, float]]:
    return [(r, m[key]) for r, m in rows.items() if key in m]


def _held_out(rows: Rows) -> tuple[str, list[tuple[int, float]]]:
    """The held-out score: mean@k where it is logged (what GRPO trains), else greedy accuracy."""
    for key in (M.MEAN_AT_K, M.ACCURACY):
        s = _series(rows, key)
        if s:
            return key, s
    return M.ACCURACY, []


def _tail_all(s: list[tuple[int, float]], n: int, ok: Callable[[float], bool]) -> bool:
    return len(s) >= n and all(ok(v) for _, v in s[-n:])


# ----------------------------------------------------------------------------- the alarms


def solver_collapse(rows: Rows, c: Context) -> Fired | None:
    """Held-out score or training reward at or below health.collapse_score for health.collapse_rounds
    evaluations/rounds in a row after having been above it, or solver entropy at or below health.entropy_floor."""
    h = c.h
    n, low = h.collapse_rounds, h.collapse_score
    key, held = _held_out(rows)
    reward = _series(rows, M.SOLVER_REWARD)
    entropy_key = M.of_role("solver", M.ENTROPY)
    entropy = _series(rows, entropy_key)
    why = []
    for name, s in ((key, held), (M.SOLVER_REWARD, reward)):
        if _tail_all(s, n, lambda v: v <= low) and any(v > low for _, v in s[:-n]):
            why.append(f"{name} {s[-1][1]:.3f} <= {low} for {n} in a row (it was {max(v for _, v in s[:-n]):.3f})")
    if h.entropy_floor > 0 and _tail_all(entropy, n, lambda v: v <= h.entropy_floor):
        why.append(f"{entropy_key} {entropy[-1][1]:.4f} <= health.entropy_floor {h.entropy_floor}")
    if not why:
        return None
    values = {"held_out": held[-1][1] if held else math.nan, "reward": reward[-1][1] if reward else math.nan,
              "entropy": entropy[-1][1] if entropy else math.nan}
    return Fired(values, "; ".join(why) + ": the solver collapsed. Likely a solver step too large for its data "
                 "(lower solver.optim.lr, raise solver.optim.warmup_steps or solver.loss.kl_coef) or training "
                 "on tasks without signal (see health/no_signal; curriculum.mode=uniform_filtered or selfplay)")


def forgetting(rows: Rows, c: Context) -> Fired | None:
    """A level whose held-out accuracy once reached health.master_score is now more than
    health.forget_margin below its best."""
    h = c.h
    worst = None
    for key in sorted({k for m in rows.values() for k in m if M.level_of(k, M.ACCURACY) is not None}):
        s = _series(rows, key)
        best = max(v for _, v in s)
        now = s[-1][1]
        if best >= h.master_score and best - now > h.forget_margin and (worst is None or best - now > worst[1] - worst[2]):
            worst = (M.level_of(key, M.ACCURACY), best, now)
    if worst is None:
        return None
    level, best, now = worst
    return Fired({"level": level, "best": best, "now": now},
                 f"level {level}'s held-out accuracy fell from {best:.2f} to {now:.2f} (> health.forget_margin "
                 f"{h.forget_margin} below its best): the solver forgets what it mastered. Replay past tasks "
                 "(curriculum.replay_fraction=0.2), lower solver.optim.lr, or raise solver.loss.kl_coef")


def stalled(rows: Rows, c: Context) -> Fired | None:
    """Neither the frontier level nor the accepted task level rose above its earlier best in the last
    health.stall_rounds rounds."""
    n = c.h.stall_rounds
    flat = {}
    for key in (M.FRONTIER, M.ACCEPTED_LEVEL):
        s = [(r, v) for r, v in _series(rows, key) if key != M.ACCEPTED_LEVEL or rows[r].get(M.ACCEPTED, 1) > 0]
        recent = [v for r, v in s if r > max(rows) - n]
        before = [v for r, v in s if r <= max(rows) - n]
        if not before or not recent:
            continue
        if max(recent) > max(before):
            return None
        flat[key.split("/")[1]] = max(before)
    if not flat or max(rows) - min(rows) < n:
        return None
    what = ", ".join(f"{k} at most {v:.2f}" for k, v in flat.items())
    return Fired(flat, f"no new high in {n} rounds ({what}): the curriculum is stalled while the run spends "
                 "tokens. Widen the band (curriculum.band_low/band_high), draw harder references "
                 "(curriculum.reference_sampler=hard), or stop (health.stop_on: [stalled])")


def plateau(rows: Rows, c: Context) -> Fired | None:
    """The last health.plateau_evals evaluations gained less than health.plateau_gain over the best before them."""
    n, gain = c.h.plateau_evals, c.h.plateau_gain
    key, s = _held_out(rows)
    if len(s) <= n:
        return None
    best_before = max(v for _, v in s[:-n])
    best_recent = max(v for _, v in s[-n:])
    if best_recent >= best_before + gain:
        return None
    return Fired({"best": best_before, "recent_best": best_recent},
                 f"{key}: best {best_recent:.3f} over the last {n} evaluations, against {best_before:.3f} before "
                 f"(gain < health.plateau_gain {gain}): held-out gains have stopped; the checkpoint of the best "
                 "evaluation is the one to keep. Stop here (health.stop_on: [plateau]) or change the curriculum")


def pool_starved(rows: Rows, c: Context) -> Fired | None:
    """The pool held fewer tasks than a solver batch (solver.batch_prompts) for health.pool_rounds rounds in a row."""
    if not c.selfplay:
        return None
    n = c.h.pool_rounds
    s = _series(rows, M.POOL_SIZE)
    if not _tail_all(s, n, lambda v: v < c.solver_batch):
        return None
    size = s[-1][1]
    what = "empty" if size == 0 else f"{size:.0f} tasks, fewer than a solver batch ({c.solver_batch})"
    return Fired({"pool_size": size, "batch": c.solver_batch},
                 f"the pool was {what} for {n} rounds in a row: the solver trains on a few tasks or none. Raise "
                 "curriculum.fill_proposals or fill_max_batches, widen curriculum.band_low/band_high, or lower "
                 "solver.batch_prompts")


def _valid(rows: Rows) -> list[tuple[int, float]]:
    return _series(rows, M.VALID_FRACTION) or _series(rows, M.CHALLENGER_VALID)


def challenger_invalid(rows: Rows, c: Context) -> Fired | None:
    """The challenger's valid share (fill proposals, else its training batches) at or below health.valid_floor."""
    s = _valid(rows)
    if not s or s[-1][1] > c.h.valid_floor:
        return None
    earlier = [(r, v) for r, v in s[:-1] if v > c.h.valid_floor]
    # Round 1's first challenger batch comes before any update: a share low from then on is the
    # format never learned, not an update that broke it.
    if not earlier:
        cause = (f"it has been <= {c.h.valid_floor} since round {s[0][0]}, before any challenger update had effect: "
                 "the model does not write proposals in the environment's format. Check the challenger prompt "
                 "(prompt.style, curriculum.references) and the warm-up (model.warmup.challenger_fraction), "
                 "or raise challenger.sampling.max_new_tokens if proposals are cut (rejected/too_long)")
    else:
        r0, v0 = earlier[-1]
        cause = (f"it was {v0:.2f} at round {r0}: the challenger collapsed after an update. Lower "
                 "challenger.optim.lr or raise challenger.optim.warmup_steps (smaller first steps)")
    reasons = {k.rsplit("/", 1)[1]: v for k, v in rows[max(rows)].items() if k.startswith(M.REJECTED + "/")}
    top = ", ".join(f"{k} {v:.0%}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
    return Fired({"valid_fraction": s[-1][1]}, f"challenger valid share {s[-1][1]:.2f}"
                 + (f" (rejected: {top})" if top else "") + f"; {cause}")


def challenger_collapse(rows: Rows, c: Context) -> Fired | None:
    """Distinct proposals (challenger/unique_fraction) at or below health.unique_floor, or the repetition
    penalty (challenger/repetition_mean) at or above health.repetition_ceiling: proposals in few clusters."""
    m = rows[max(rows)]
    u, rep = m.get(M.UNIQUE_FRACTION), m.get(M.REPETITION)
    why = []
    if u is not None and u <= c.h.unique_floor:
        why.append(f"distinct proposals {u:.2f} <= health.unique_floor {c.h.unique_floor}")
    if rep is not None and rep >= c.h.repetition_ceiling:
        why.append(f"repetition {rep:.2f} >= health.repetition_ceiling {c.h.repetition_ceiling}")
    if not why:
        return None
    return Fired({"unique_fraction": u if u is not None else math.nan, "repetition": rep if rep is not None else math.nan},
                 "; ".join(why) + ": the challenger repeats itself. Raise reward.repetition_coef, "
                 "challenger.sampling.temperature or curriculum.references, or lower challenger.optim.lr")


def label_accuracy(rows: Rows, c: Context) -> Fired | None:
    """Pseudo-label accuracy (curriculum/label_accuracy) more than health.label_drop below its best."""
    s = _series(rows, M.LABEL_ACCURACY)
    if not s:
        return None
    best, now = max(v for _, v in s), s[-1][1]
    if best - now <= c.h.label_drop:
        return None
    return Fired({"best": best, "now": now},
                 f"pseudo-label accuracy fell from {best:.2f} to {now:.2f} (> health.label_drop {c.h.label_drop}): "
                 "the pool fills with wrong labels (R-Zero's decline). Raise curriculum.probe_samples, narrow the "
                 "band (curriculum.band_high), or stop (health.stop_on: [label_accuracy])")


def no_signal(rows: Rows, c: Context) -> Fired | None:
    """The share of solver groups with no signal at or above health.no_signal_ceiling for
    health.no_signal_rounds rounds in a row."""
    n = c.h.no_signal_rounds
    s = _series(rows, M.NO_SIGNAL)
    if not _tail_all(s, n, lambda v: v >= c.h.no_signal_ceiling):
        return None
    return Fired({"no_signal_fraction": s[-1][1]},
                 f"{s[-1][1]:.0%} of solver groups scored all the same for {n} rounds: GRPO has nothing to learn "
                 "from. Tasks too easy or too hard: curriculum.mode=selfplay or uniform_filtered, a narrower "
                 "curriculum.max_level, or a larger solver.group_size")


def kl(rows: Rows, c: Context) -> Fired | None:
    """Either role's KL to its sampling policy or reference (approx_kl, kl_ref) above health.kl_ceiling, or the
    engine log-prob gap above health.logprob_gap_ceiling."""
    m = rows[max(rows)]
    why, values = [], {}
    for role in ("solver", "challenger"):
        for key, ceiling in ((M.APPROX_KL, c.h.kl_ceiling), (M.KL_REF, c.h.kl_ceiling),
                             (M.ENGINE_LOGPROB_GAP, c.h.logprob_gap_ceiling)):
            v = m.get(M.of_role(role, key))
            if v is not None and math.isfinite(v) and v > ceiling:
                why.append(f"{M.of_role(role, key)} {v:.3g} > {ceiling}")
                values[f"{role}_{key}"] = v
    if not why:
        return None
    return Fired(values, "; ".join(why) + ": the policy moves far from what sampled it (or the rollout engine's "
                 "numerics differ from the trainer's). Lower optim.lr, raise loss.kl_coef, check rollout.* "
                 "(dtype, rollout.tis_cap)")


def non_finite(rows: Rows, c: Context) -> Fired | None:
    """A non-finite loss or statistic of either role, or an update step skipped as non-finite."""
    m = rows[max(rows)]
    roles = tuple(M.of_role(role, "") for role in M.ROLES)
    bad = sorted(k for k, v in m.items() if k.startswith(roles) and not math.isfinite(v))
    skipped = {k: v for k, v in m.items() if k.endswith("/" + M.NONFINITE_STEPS) and math.isfinite(v) and v > 0}
    if not bad and not skipped:
        return None
    what = ", ".join(bad[:4] + [f"{k} {v:g}" for k, v in skipped.items()])
    return Fired({"count": len(bad) + len(skipped)},
                 f"non-finite values ({what}): lower optim.lr, keep optim.grad_clip on, prefer model.dtype=bfloat16 "
                 "over float16")


# Name -> alarm, in the order they are reported. A plugin may add one: ALARMS["mine"] = fn.
ALARMS: dict[str, Callable[[Rows, Context], Fired | None]] = {
    "solver_collapse": solver_collapse, "forgetting": forgetting, "stalled": stalled, "plateau": plateau,
    "pool_starved": pool_starved, "challenger_invalid": challenger_invalid,
    "challenger_collapse": challenger_collapse, "label_accuracy": label_accuracy, "no_signal": no_signal,
    "kl": kl, "non_finite": non_finite,
}


def evaluate(rows: Rows, c: Context) -> dict[str, Fired]:
    """The alarms on at the last round of ``rows`` (rows up to that round)."""
    if not rows:
        return {}
    return {name: fired for name, fn in ALARMS.items() if (fired := fn(rows, c)) is not None}


def upto(rows: Rows, r: int) -> Rows:
    return {k: v for k, v in rows.items() if k <= r}


def context(cfg) -> Context:
    return Context(cfg.health, cfg.solver.batch_prompts, cfg.curriculum.mode == "selfplay")


@dataclass
class Report:
    """One round's health: the alarms on, those that started and cleared, and the stop reason (or "")."""

    active: dict[str, Fired]
    started: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    stop: str = ""

    def metrics(self) -> dict[str, float]:
        """health/<name> (0/1) for every alarm, health/<name>/<value> for those on, health/active."""
        out: dict[str, float] = {M.alarm(name): float(name in self.active) for name in ALARMS}
        for name, fired in self.active.items():
            out.update({f"{M.alarm(name)}/{k}": float(v) for k, v in fired.values.items()})
        out[M.HEALTH_ACTIVE] = float(len(self.active))
        return out


def check(rows: Rows, r: int, c: Context, stop_on: list[str]) -> Report:
    """Round ``r``'s alarms against round ``r - 1``'s (both from ``rows``, the run's ``dashboard.per_round``;
    health/* records are left out): what started, what cleared, and whether an alarm in ``stop_on`` is on."""
    rows = {k: {key: v for key, v in m.items() if not key.startswith(M.HEALTH + "/")} for k, m in rows.items()}
    now = evaluate(upto(rows, r), c)
    before = evaluate(upto(rows, r - 1), c) if r - 1 in rows else {}
    stopping = [n for n in stop_on if n in now]
    stop = "; ".join(f"health.stop_on: {n} ({now[n].text})" for n in stopping)
    return Report(now, [n for n in now if n not in before], [n for n in before if n not in now], stop)


def log_report(report: Report, r: int) -> None:
    """One WARN line per alarm that started or cleared this round."""
    for name in report.started:
        log.warning("round %d: health alarm %s: %s", r, name, report.active[name].text)
    for name in report.cleared:
        log.warning("round %d: health alarm %s cleared", r, name)


def timeline(rows: Rows) -> dict[str, list[int]]:
    """Alarm name -> the rounds at which health/<name> was logged 1 (for the dashboard)."""
    out: dict[str, list[int]] = {}
    head = M.alarm("")
    for r, m in rows.items():
        for k, v in m.items():
            name = k[len(head):]
            if k.startswith(head) and name in ALARMS and v == 1:
                out.setdefault(name, []).append(r)
    return out


def check_and_report(rows: Rows, r: int, cfg, monitor) -> str:
    """The trainer's health step, on the rank that writes: round ``r`` checked (``check``), WARN lines, an
    alert per alarm that started, the health/* metrics logged. Returns the stop reason ("" to go on)."""
    report = check(rows, r, context(cfg), cfg.health.stop_on)
    log_report(report, r)
    for name in report.started:
        monitor.alert(f"health: {name}", f"round {r}: {report.active[name].text}")
    monitor.log(report.metrics() | ({"health/stop_reason": report.stop} if report.stop else {}), round=r, phase="health")
    return report.stop
