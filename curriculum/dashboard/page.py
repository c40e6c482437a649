"""The dashboard pages: which charts and tables a run's page (and a comparison of runs) shows,
in what order, and the HTML around them."""
from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path

from curriculum import health
from curriculum import metrics as M
from curriculum.checkpoint import atomic_write
from curriculum.dashboard.charts import fmt, line_chart
from curriculum.dashboard.data import (PROPOSALS_PER_ROUND, RoundDigest, band, per_round, round_digest, run_line,
                                       series, tier_level, tiers, token_series, types)
from curriculum.rundir import RunDir, run_status


@dataclass(frozen=True)
class Chart:
    """One chart: lines of metrics, and p10-p90 bands of metrics logged as quantiles."""

    title: str
    lines: tuple[tuple[str, str], ...]  # (metric, label)
    y_title: str
    rate: bool = False  # a share or accuracy: y axis 0..1
    bands: tuple[tuple[str, str], ...] = ()  # (prefix, label): PREFIX_p10 / _p50 / _p90
    integer: bool = False  # whole numbers (counts, levels): whole ticks
    step: bool = False  # a value held until the next round (the frontier level)
    optional: bool = False  # left out while none of its metrics is logged (metrics added later)
    per_type: str = ""  # a metric drawn once per task type the run logs it for (its /type_K keys)


BENCHMARK = [  # followed by one line per level, after the first chart
    Chart("Held-out accuracy", ((M.ACCURACY, "greedy"), (M.MEAN_AT_K, "mean@k")), "accuracy", rate=True),
    Chart("Frontier level", ((M.FRONTIER, "highest level solved ≥ 50%"),), "level",
          integer=True, step=True, optional=True),
]
CURRICULUM = [
    Chart("Task difficulty (1 − solve rate)", (), "difficulty", rate=True,
          bands=((M.ACCEPTED_DIFFICULTY, "accepted"), (M.POOL_DIFFICULTY, "pool"))),
    Chart("Solve rate", ((M.CHALLENGER_SOLVE_RATE, "challenger's tasks, probed"),
                         (M.SOLVED_ALL, "solver: tasks always solved"),
                         (M.SOLVED_NONE, "solver: tasks never solved")), "share", rate=True),
    Chart("Task level", ((M.ACCEPTED_LEVEL, "accepted"), (M.quantile(M.POOL_LEVEL, "mean"), "pool"),
                         (M.SOLVER_LEVEL, "solver trained on")), "level"),
    Chart("Pool", ((M.POOL_SIZE, "size"), (M.ACCEPTED, "accepted this round")), "tasks", integer=True),
    Chart("Pseudo-label accuracy", ((M.LABEL_ACCURACY, "majority vote"),), "accuracy", rate=True, optional=True),
    # Typed environments (code_triplets: Absolute Zero's three code tasks), with the types their metrics name
    Chart("Held-out accuracy per task type", (), "accuracy", rate=True, optional=True, per_type=M.ACCURACY),
    Chart("Solver solve rate per task type", (), "share", rate=True, optional=True, per_type=M.SOLVE_RATE),
]
TRAINING = [
    Chart("Validity", ((M.CHALLENGER_VALID, "challenger updates"), (M.VALID_FRACTION, "fill proposals")),
          "valid share", rate=True),
    Chart("Reward", ((M.CHALLENGER_REWARD, "challenger"), (M.SOLVER_REWARD, "solver")), "mean reward"),
    Chart("Groups without signal", ((M.NO_SIGNAL, "solver"),), "share of GRPO groups", rate=True, optional=True),
    Chart("Generated tokens", tuple((M.of_role(role, M.GENERATED_TOKENS), role) for role in M.ROLES),
          "tokens, cumulative", integer=True, optional=True),
    Chart("Tool use", ((M.TOOL_CALLS, "calls per answer"), (M.TOOL_ERROR_RATE, "error rate")), "calls / rate",
          optional=True),
    Chart("Rollout engine vs trainer (rollout.engine=vllm)",
          ((M.of_role("solver", M.ENGINE_LOGPROB_GAP), "solver: mean |log-prob gap|"),
           (M.of_role("solver", M.TIS_CAPPED), "solver: tokens at the TIS cap")), "nats / share", optional=True),
    Chart("Validity per task type", (), "valid share", rate=True, optional=True, per_type=M.CHALLENGER_VALID),
    Chart("Sandbox runs per round", ((M.SANDBOX_EXECUTIONS, "executions"), (M.SANDBOX_TIMEOUTS, "timeouts")), "runs",
          integer=True, optional=True),
    Chart("Seconds per round", ((M.ROUND_S, "round"), (M.EVAL_S, "eval")), "seconds"),
]
#: Columns of the per-round table (also ``scripts/summarize_run.py``); unlogged ones are dropped.
COLUMNS = [
    (M.ACCURACY, "eval acc"),
    (M.MEAN_AT_K, "mean@k"),
    (M.FRONTIER, "frontier"),
    (M.CHALLENGER_VALID, "valid"),
    (M.CHALLENGER_REWARD, "ch reward"),
    (M.ACCEPTED, "accepted"),
    (M.ACCEPTED_LEVEL, "acc level"),
    (M.quantile(M.ACCEPTED_DIFFICULTY, "mean"), "acc diff"),
    (M.LABEL_ACCURACY, "label acc"),
    (M.POOL_SIZE, "pool"),
    (M.SOLVER_REWARD, "sv reward"),
    (M.NO_SIGNAL, "no signal"),
]
#: Charts that overlay several runs: one line per run of the chart's single metric.
COMPARE = [
    Chart("Held-out accuracy (greedy)", ((M.ACCURACY, ""),), "accuracy", rate=True),
    Chart("Held-out mean@k", ((M.MEAN_AT_K, ""),), "mean@k", rate=True, optional=True),
    Chart("Frontier level", ((M.FRONTIER, ""),), "level", integer=True, step=True, optional=True),
    Chart("Accepted task level", ((M.ACCEPTED_LEVEL, ""),), "level"),
    Chart("Median difficulty of accepted tasks", ((M.quantile(M.ACCEPTED_DIFFICULTY, "p50"), ""),), "difficulty",
          rate=True, optional=True),
    Chart("Level of the tasks the solver trained on", ((M.SOLVER_LEVEL, ""),), "level"),
    Chart("Solver reward", ((M.SOLVER_REWARD, ""),), "mean reward"),
    Chart("Solver groups without signal", ((M.NO_SIGNAL, ""),), "share of GRPO groups", rate=True, optional=True),
    Chart("Challenger valid fraction", ((M.CHALLENGER_VALID, ""),), "valid share", rate=True),
    Chart("Pool size", ((M.POOL_SIZE, ""),), "tasks", integer=True),
]

# ----------------------------------------------------------------------------- tables


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<div class='scroll'><table class='{cls}'><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>"


def columns(rows: dict[int, dict[str, float]]) -> list[tuple[str, str]]:
    """The ``COLUMNS`` logged in at least one round."""
    return [(k, name) for k, name in COLUMNS if any(k in m for m in rows.values())]


def _round_table(rows: dict[int, dict[str, float]]) -> str:
    cols = columns(rows)
    body = [[str(r)] + [fmt(m[k]) if k in m else "" for k, _ in cols] for r, m in rows.items()]
    return _table(["round"] + [name for _, name in cols], body, "num")


def _shade(share: float) -> str:
    """A cell's colour for a share in [0, 1]; white text on the dark end."""
    share = min(1.0, max(0.0, share))
    return f"background:rgba(31,119,180,{share:.2f})" + (";color:#fff" if share > 0.55 else "")


def _heatmap(rows: dict[int, dict[str, float]], metric: str) -> str:
    """``metric`` per level (rows) and round (columns), in percent, shaded: every level readable
    where a chart of 25 lines is not."""
    keys = tiers(rows, metric)
    rounds = [r for r, m in rows.items() if any(k in m for k in keys)]
    body = [[f"<b>{tier_level(k)}</b>"] + [f"<span style='{_shade(rows[r][k])}'>{rows[r][k] * 100:.0f}</span>"
                                       if k in rows[r] and math.isfinite(rows[r][k]) else "" for r in rounds]
            for k in keys]
    return _table(["level \\ round"] + [str(r) for r in rounds], body, "num heat")


def _level_table(digests: dict[int, RoundDigest]) -> str:
    """Accepted tasks per level and round: the curriculum's shape, shaded by share."""
    levels = sorted({lv for d in digests.values() for lv in d.levels})
    if not levels:
        return "<p class='none'>no task accepted yet</p>"
    body = []
    for r, d in digests.items():
        total = sum(d.levels.values())
        cells = [f"<span style='{_shade(d.levels[lv] / total)}'>{d.levels[lv]}</span>" if d.levels[lv] else ""
                 for lv in levels]
        body.append([str(r)] + cells + [str(total)])
    return _table(["round"] + [f"level {lv}" for lv in levels] + ["total"], body, "num heat")


def _verdict(rec: dict) -> tuple[str, str]:
    """(text, row class) of a proposal's verdict."""
    if rec.get("rejected"):
        return f"rejected: {rec['rejected']}", "rejected"
    if rec.get("accepted"):
        return "accepted", "accepted"
    if rec.get("accepted") is False:
        return "outside the band", ""
    return "valid", ""  # a challenger update step: scored, not judged for the pool


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + f"… (+{len(text) - limit} chars)"


def _proposal_table(d: RoundDigest) -> str:
    if not d.shown:
        return "<p class='none'>no proposals</p>"
    rows = []
    for rec in d.shown:
        verdict, cls = _verdict(rec)
        task, rate = rec.get("task"), rec.get("solve_rate")
        level = task.get("level", "") if isinstance(task, dict) else ""
        rows.append(f"<tr class='{cls}'><td><code>{html.escape(_clip(str(rec.get('text', ''))))}</code></td>"
                    f"<td>{html.escape(str(level))}</td><td>{html.escape(verdict)}</td>"
                    f"<td>{'' if not isinstance(rate, (int, float)) else fmt(rate)}</td></tr>")
    head = "<tr><th>proposal (model-written)</th><th>level</th><th>verdict</th><th>solve rate</th></tr>"
    return f"<table class='proposals'><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


def _round_selector(digests: dict[int, RoundDigest]) -> str:
    """One collapsible block per round, newest first and open: browsable with no script."""
    if not digests:
        return "<p class='none'>none yet</p>"
    newest = max(digests)
    out = []
    for r in sorted(digests, reverse=True):
        d = digests[r]
        accepted = sum(d.levels.values())
        levels = f", levels {min(d.levels)}–{max(d.levels)}" if d.levels else ""
        shown = f"showing {len(d.shown)} of {d.pool}" + (" (accepted first)" if accepted else "")
        out.append(f"<details id='round-{r}'{' open' if r == newest else ''}><summary>Round {r}"
                   f"<span class='meta'> — {d.proposals} proposals, {accepted} accepted{levels}; {shown}</span>"
                   f"</summary>{_proposal_table(d)}</details>")
    return "".join(out)


# ----------------------------------------------------------------------------- pages


_STYLE = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;padding:18px 24px 40px;
  color:#1d2330;background:#f5f6f8}
h1{font-size:20px;margin:0 0 4px;word-break:break-all} h2{font-size:16px;margin:28px 0 10px;padding-bottom:4px;
  border-bottom:1px solid #d9dde3} h3{font-size:14px;margin:16px 0 6px}
.meta{color:#5b6472;font-weight:400;margin:2px 0} .none{color:#8a929e}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(400px,1fr));gap:14px}
figure{margin:0;background:#fff;border:1px solid #d9dde3;border-radius:6px;padding:10px 12px 8px;min-width:0}
figcaption{font-weight:600;margin-bottom:2px} figure svg{display:block;width:100%;height:auto}
svg text{font-size:11px;fill:#5b6472} svg .axis-title{font-size:11.5px;fill:#2f3542}
.grid{stroke:#e9ecf0} .axis{stroke:#98a1ad} .line{fill:none;stroke-width:2;stroke-linejoin:round}
.band{fill-opacity:.14} .edge{fill:none;stroke-width:1;stroke-dasharray:3 3;stroke-opacity:.8}
.empty{margin:70px 0;text-align:center}
.legend{display:flex;flex-wrap:wrap;gap:2px 14px;font-size:12px;color:#2f3542;margin-top:2px}
.legend i{display:inline-block;width:16px;height:3px;vertical-align:middle;margin-right:5px}
.legend i.swatch-band{height:10px;opacity:.45} .legend i.ramp{width:110px;height:8px;margin:0 6px}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:12.5px;background:#fff}
td,th{border:1px solid #e1e4e9;padding:3px 7px} th{background:#eef0f3;font-weight:600;white-space:nowrap}
table.num td{text-align:right;font-variant-numeric:tabular-nums}
table.heat td{padding:0} table.heat td span,table.heat td b{display:block;padding:3px 6px;min-width:30px}
details{background:#fff;border:1px solid #d9dde3;border-radius:6px;margin:6px 0}
summary{cursor:pointer;padding:6px 10px;font-weight:600} details[open] summary{border-bottom:1px solid #e1e4e9}
table.proposals{width:100%;border:0} table.proposals td:first-child{width:70%}
tr.accepted td{background:#eef8ee} tr.rejected td{color:#6b7280}
code{white-space:pre-wrap;word-break:break-all;font-size:12px}
.alarm{stroke:#d62728;stroke-width:1.5;stroke-dasharray:4 3} .ok{color:#2c7a3f}
table.health tr.on td{background:#fdecea} table.health tr.past td{color:#6b7280}
"""


def _page(title: str, body: list[str], refresh_s: int) -> str:
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s > 0 else ""
    return "".join([f"<!doctype html><html lang='en'><head><meta charset='utf-8'>{refresh}",
                    "<meta name='viewport' content='width=device-width,initial-scale=1'>",
                    f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>", *body,
                    "</body></html>"])


def _charts(charts: list[str]) -> str:
    return "<div class='charts'>" + "".join(charts) + "</div>"


def _chart(spec: Chart, rows: dict[int, dict[str, float]], span: tuple[float, float] | None,
           markers: list[tuple[float, str]] | None = None) -> str:
    """``spec`` over the run's rounds; "" for an optional chart with nothing logged."""
    lines = {label: series(rows, k) for k, label in spec.lines}
    if spec.per_type:
        lines.update({kind: series(rows, k) for kind, k in types(rows, spec.per_type).items()})
    bands = {label: band(rows, prefix) for prefix, label in spec.bands}
    if spec.optional and not any([*lines.values(), *bands.values()]):
        return ""
    return line_chart(spec.title, lines, y_title=spec.y_title, rate=spec.rate, integer=spec.integer, step=spec.step,
                      bands=bands, x_span=span, markers=markers)


def _tier_charts(rows: dict[int, dict[str, float]], span: tuple[float, float] | None) -> list[str]:
    """One line per level, coloured along the ramp, for greedy accuracy and mean@k."""
    out = []
    for metric, name in ((M.ACCURACY, "Greedy accuracy per level"), (M.MEAN_AT_K, "mean@k per level")):
        keys = tiers(rows, metric)
        if keys:
            out.append(line_chart(name, {f"level {tier_level(k)}": series(rows, k) for k in keys}, y_title="accuracy",
                                  rate=True, ramp=True, x_span=span))
    return out


def _heatmaps(rows: dict[int, dict[str, float]]) -> list[str]:
    return [f"<h3>{title}, % by level and round</h3>" + _heatmap(rows, metric)
            for metric, title in ((M.ACCURACY, "Greedy accuracy"), (M.MEAN_AT_K, "mean@k"))
            if tiers(rows, metric)]


def _ranges(rounds: list[int]) -> list[tuple[int, int]]:
    """[3, 4, 5, 8] -> [(3, 5), (8, 8)]."""
    out: list[tuple[int, int]] = []
    for r in rounds:
        if out and r == out[-1][1] + 1:
            out[-1] = (out[-1][0], r)
        else:
            out.append((r, r))
    return out


def alarm_markers(rows: dict[int, dict[str, float]]) -> list[tuple[float, str]]:
    """(round, label) of each round at which a health alarm started."""
    return sorted((a, f"health alarm {name} from round {a}") for name, rounds in health.timeline(rows).items()
                  for a, _ in _ranges(rounds))


def _health_panel(rows: dict[int, dict[str, float]]) -> str:
    """Alarms on at the last checked round first, then those that fired and cleared (docs/health.md)."""
    checked = [r for r, m in rows.items() if M.HEALTH_ACTIVE in m]
    if not checked:
        return "<p class='none'>no health check yet</p>"
    fired, last = health.timeline(rows), rows[checked[-1]]
    if not fired:
        return f"<p class='ok'>no alarm has fired (checked every round, last at round {checked[-1]})</p>"
    body = []
    for name in sorted(fired, key=lambda n: (last.get(M.alarm(n)) != 1, n)):
        on = last.get(M.alarm(name)) == 1
        when = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in _ranges(fired[name]))
        values = {k.rsplit("/", 1)[1]: v for k, v in (last if on else rows[fired[name][-1]]).items()
                  if k.startswith(M.alarm(name) + "/")}
        shown = ", ".join(f"{k} {fmt(v)}" for k, v in values.items())
        doc = " ".join((health.ALARMS[name].__doc__ or "").split())
        body.append(f"<tr class='{'on' if on else 'past'}'><td><b>{html.escape(name)}</b></td>"
                    f"<td>{'ON' if on else 'cleared'}</td><td>{when}</td><td>{html.escape(shown)}</td>"
                    f"<td>{html.escape(doc)}</td></tr>")
    return ("<table class='health'><tr><th>alarm</th><th>now</th><th>rounds on</th><th>values (last on)</th>"
            "<th>meaning (docs/health.md)</th></tr>" + "".join(body) + "</table>")


def _header(rd: RunDir) -> str:
    status = run_status(rd)
    if "error" in status:
        meta = "cannot read the run: " + html.escape(status["error"])
    else:
        done = "finished" if status.get("finished") else "in progress"
        meta = (f"round {status.get('round', '?')} of {status.get('rounds', '?')}, {done}; newest checkpoint: "
                f"{html.escape(str(status.get('checkpoint')))}")
    what = run_line(rd)
    return (f"<h1>{html.escape(str(rd.path))}</h1><p class='meta'>{meta}</p>"
            + (f"<p class='meta'>{html.escape(what)}</p>" if what else ""))


def render(run_dir: Path, refresh_s: int = 0, proposals: int = PROPOSALS_PER_ROUND) -> str:
    """The dashboard page of ``run_dir`` as HTML."""
    rd = RunDir(run_dir)
    rows = per_round(rd.metrics)
    span = (min(rows), max(rows)) if rows else None
    digests = {r: round_digest(path, proposals) for r, path in rd.task_files().items()}

    markers = alarm_markers(rows)

    def charts(specs: list[Chart]) -> list[str]:
        return [_chart(spec, rows, span, markers) for spec in specs]

    bench = charts(BENCHMARK)
    body = [_header(rd), "<h2 id='health'>Health</h2>", _health_panel(rows),
            "<h2>Held-out benchmark</h2>", _charts(bench[:1] + _tier_charts(rows, span) + bench[1:]), *_heatmaps(rows),
            "<h2>Curriculum</h2>", _charts(charts(CURRICULUM)),
            "<h3>Accepted tasks by level</h3><p class='meta'>Fill-phase proposals inside the band, before "
            "de-duplication against the pool; shaded by their share of the round.</p>", _level_table(digests),
            "<h2>Training</h2>", _charts(charts(TRAINING)),
            "<h2>Per round</h2>", _round_table(rows) if rows else "<p class='none'>no metrics yet</p>",
            f"<h2>Proposals by round</h2><p class='meta'>Up to {proposals} fill-phase proposals per round, "
            "accepted first; open a round to see its own.</p>", _round_selector(digests)]
    return _page(f"{rd.path.name}: self-play curriculum", body, refresh_s)


def _names(run_dirs: list[Path]) -> list[str]:
    """Directory names, or whole paths where two runs share a name."""
    short = [d.name for d in run_dirs]
    return short if len(set(short)) == len(short) else [str(d) for d in run_dirs]


def _compare_table(runs: dict[str, dict[int, dict[str, float]]]) -> str:
    levels = sorted({t for rows in runs.values() for t in tiers(rows)}, key=tier_level)
    extra = [(k, name) for k, name in ((M.MEAN_AT_K, "mean@k, last"), (M.FRONTIER, "frontier, last"))
             if any(k in m for rows in runs.values() for m in rows.values())]
    body = []
    for name, rows in runs.items():
        evals = [r for r, m in rows.items() if M.ACCURACY in m]
        if not evals:
            body.append([html.escape(name), "", "", "", ""] + [""] * (len(extra) + len(levels)))
            continue
        first, last = rows[evals[0]], rows[evals[-1]]
        gain = last[M.ACCURACY] - first[M.ACCURACY]
        later = [k for k, _ in extra] + levels
        body.append([html.escape(name), str(evals[-1]), fmt(first[M.ACCURACY]), fmt(last[M.ACCURACY]),
                     f"{gain:+.3f}"] + [fmt(last[k]) if k in last else "" for k in later])
    header = (["run", "last round", "accuracy, round 0", "accuracy, last", "change"] + [name for _, name in extra]
              + [f"level {tier_level(t)}, last" for t in levels])
    return _table(header, body, "num")


def _token_charts(runs: dict[str, dict[int, dict[str, float]]]) -> list[str]:
    """Held-out accuracy against the tokens both roles generated: runs compared at equal compute."""
    out = []
    for metric, title in ((M.ACCURACY, "Greedy accuracy"), (M.MEAN_AT_K, "mean@k")):
        lines = {name: token_series(rows, metric) for name, rows in runs.items()}
        if any(lines.values()):
            out.append(line_chart(f"{title} against generated tokens", lines, y_title="accuracy",
                                  x_title="tokens generated (challenger + solver)", rate=True,
                                  x_span=(0, 0)))  # from no tokens at all
    return out


def render_compare(run_dirs: list[Path], refresh_s: int = 0) -> str:
    """One page over several runs (say self-play against the uniform baseline): their curves
    overlaid, and held-out accuracy at round 0 and at the last round, overall and per level."""
    run_dirs = [Path(d) for d in run_dirs]
    runs = {name: per_round(RunDir(d).metrics) for name, d in zip(_names(run_dirs), run_dirs)}
    rounds = [r for rows in runs.values() for r in rows]
    span = (min(rounds), max(rounds)) if rounds else None
    charts = []
    for spec in COMPARE:
        metric = spec.lines[0][0]
        lines = {name: series(rows, metric) for name, rows in runs.items()}
        if not (spec.optional and not any(lines.values())):
            charts.append(line_chart(spec.title, lines, y_title=spec.y_title, rate=spec.rate, integer=spec.integer,
                                     step=spec.step, x_span=span))
    return _page("compare: " + ", ".join(runs), [
        "<h1>Runs compared</h1>",
        f"<p class='meta'>{html.escape(', '.join(str(d) for d in run_dirs))}</p>",
        "<h2>Held-out accuracy</h2>", _compare_table(runs),
        "<h2>Curves, per round</h2>", _charts(charts[:1] + _token_charts(runs) + charts[1:]),
    ], refresh_s)


def run_dirs_of(run_dir: Path | list[Path]) -> list[Path]:
    return [Path(d) for d in (run_dir if isinstance(run_dir, list) else [run_dir])]


def render_any(run_dirs: list[Path], refresh_s: int = 0) -> str:
    return render(run_dirs[0], refresh_s) if len(run_dirs) == 1 else render_compare(run_dirs, refresh_s)


def write(run_dir: Path | list[Path], out: Path | None = None) -> Path:
    """Write the page of one run (default ``RUN_DIR/dashboard.html``), or the comparison of
    several (default ``compare.html``), atomically; return its path."""
    run_dirs = run_dirs_of(run_dir)
    default = RunDir(run_dirs[0]).dashboard if len(run_dirs) == 1 else Path("compare.html")
    out = Path(out) if out else default
    atomic_write(out, render_any(run_dirs))
    return out

