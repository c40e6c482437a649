"""The local dashboard: one self-contained HTML page per run directory.

Built from the run's own files (``metrics.jsonl``, ``tasks/``, checkpoints), which
resume already keeps exact, so the page never disagrees with the run. It has no
script and loads nothing from the network: it opens from a cluster node's disk, a
copied file, or ``selfplay dashboard RUN_DIR --serve``.
"""
from __future__ import annotations

import html
import http.server
import json
import logging
import math
from collections import Counter, defaultdict
from pathlib import Path

from curriculum.checkpoint import atomic_write

log = logging.getLogger(__name__)

#: (title, [(metric, label)]) for each chart, in page order.
CHARTS = [
    ("Held-out accuracy", [("eval/accuracy", "all")]),  # plus one line per tier
    ("Challenger", [("challenger/valid_fraction", "valid fraction"), ("challenger/reward_mean", "reward"),
                    ("challenger/solve_rate_mean", "solve rate of its tasks")]),
    ("Task level", [("curriculum/accepted_level_mean", "accepted"), ("curriculum/pool_level_mean", "pool"),
                    ("solver/task_level_mean", "solver trained on")]),
    ("Pool", [("curriculum/pool_size", "size"), ("curriculum/accepted", "accepted this round")]),
    ("Solver", [("solver/reward_mean", "reward"), ("solver/solved_all_fraction", "tasks always solved"),
                ("solver/solved_none_fraction", "tasks never solved")]),
    ("Seconds per round", [("time/round_s", "round"), ("time/eval_s", "eval")]),
]
#: Columns of the per-round table (also ``scripts/summarize_run.py``).
COLUMNS = [
    ("eval/accuracy", "eval acc"),
    ("challenger/valid_fraction", "valid"),
    ("challenger/reward_mean", "ch reward"),
    ("curriculum/accepted", "accepted"),
    ("curriculum/accepted_level_mean", "acc level"),
    ("curriculum/accepted_difficulty_mean", "acc diff"),
    ("curriculum/pool_size", "pool"),
    ("solver/reward_mean", "sv reward"),
]
#: (title, metric) of the charts that overlay several runs.
COMPARE = [
    ("Held-out accuracy", "eval/accuracy"),
    ("Accepted task level", "curriculum/accepted_level_mean"),
    ("Level of the tasks the solver trained on", "solver/task_level_mean"),
    ("Solver reward", "solver/reward_mean"),
    ("Challenger valid fraction", "challenger/valid_fraction"),
    ("Pool size", "curriculum/pool_size"),
]
_AVERAGED = ("challenger/", "solver/")  # logged every step: the round's mean; the rest: its last value
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def per_round(path: Path) -> dict[int, dict[str, float]]:
    """One value per metric per round: the mean over the round's steps for challenger/* and
    solver/*, the last value for the rest. Lines that are not a record (a torn last line
    from a killed writer) are skipped."""
    values: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("round"), int):
            continue
        for k, v in rec.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("round", "time"):
                values[rec["round"]][k].append(float(v))
    return {r: {k: sum(v) / len(v) if k.startswith(_AVERAGED) else v[-1] for k, v in m.items()}
            for r, m in sorted(values.items())}


def tiers(rows: dict[int, dict[str, float]]) -> list[str]:
    found = {k for m in rows.values() for k in m if k.startswith("eval/accuracy/tier_")}
    return sorted(found, key=lambda k: int(k.rsplit("_", 1)[1]))


def task_files(run_dir: Path) -> dict[int, Path]:
    """``tasks/round_NNNN.jsonl`` of every round, by round."""
    return {int(p.stem.split("_")[1]): p for p in sorted((Path(run_dir) / "tasks").glob("round_*.jsonl"))}


def load_records(path: Path) -> list[dict]:
    """One round's task records; lines that are not a record are skipped."""
    out = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


_LEVELS_CACHE: dict[tuple[str, int, int], Counter] = {}


def accepted_levels(path: Path) -> Counter:
    """Accepted tasks per level in one round's file. Cached by the file's identity: a page
    rebuilt every round re-reads only the files that changed, not the whole run."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _LEVELS_CACHE:
        _LEVELS_CACHE[key] = Counter(rec["task"]["level"] for rec in load_records(path)
                                     if rec.get("accepted") and isinstance(rec.get("task"), dict)
                                     and "level" in rec["task"])
    return _LEVELS_CACHE[key]


# ----------------------------------------------------------------------------- page parts


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def line_chart(title: str, series: dict[str, list[tuple[int, float]]], width: int = 440, height: int = 220) -> str:
    """An SVG line chart of ``series`` (label -> [(round, value)]); NaN/inf points and empty
    series are left out."""
    series = {k: pts for k, v in series.items() if (pts := [(x, y) for x, y in v if math.isfinite(y)])}
    head = f"<figure><figcaption>{html.escape(title)}</figcaption>"
    if not series:
        return head + "<p class='none'>not logged yet</p></figure>"
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = min(min(ys), 0.0), max(ys)
    y1 = y1 if y1 > y0 else y0 + 1
    left, right, top, bottom = 46, 10, 10, 24
    w, h = width - left - right, height - top - bottom

    def px(x: float, y: float) -> tuple[float, float]:
        return left + (x - x0) / (x1 - x0) * w, top + (1 - (y - y0) / (y1 - y0)) * h

    parts = [f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">']
    for i in range(5):  # horizontal grid and y labels
        y = y0 + (y1 - y0) * i / 4
        _, py = px(x0, y)
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{py:.1f}" y2="{py:.1f}" class="grid" />'
                     f'<text x="{left - 4}" y="{py + 4:.1f}" text-anchor="end">{_fmt(y)}</text>')
    step = max(1, round((x1 - x0) / 8))
    for x in range(int(x0), int(x1) + 1, step):
        qx, _ = px(x, y0)
        parts.append(f'<text x="{qx:.1f}" y="{height - 6}" text-anchor="middle">{x}</text>')
    for i, (label, pts) in enumerate(series.items()):
        color = _PALETTE[i % len(_PALETTE)]
        coords = " ".join("%.1f,%.1f" % px(x, y) for x, y in pts)
        parts.append(f'<polyline points="{coords}" stroke="{color}" class="line"><title>{html.escape(label)}</title></polyline>')
        parts += [f'<circle cx="{px(x, y)[0]:.1f}" cy="{px(x, y)[1]:.1f}" r="2.5" fill="{color}">'
                  f'<title>{html.escape(label)}, round {x}: {y:.4g}</title></circle>' for x, y in pts]
    parts.append("</svg>")
    legend = "".join(f'<span><i style="background:{_PALETTE[i % len(_PALETTE)]}"></i>{html.escape(k)}</span>'
                     for i, k in enumerate(series))
    return head + "".join(parts) + f"<div class='legend'>{legend}</div></figure>"


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table class='{cls}'><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _round_table(rows: dict[int, dict[str, float]]) -> str:
    cols = COLUMNS + [(t, t.replace("eval/accuracy/", "")) for t in tiers(rows)]
    body = [[str(r)] + [_fmt(m[k]) if k in m else "" for k, _ in cols] for r, m in rows.items()]
    return _table(["round"] + [name for _, name in cols], body, "num")


def _level_table(files: dict[int, Path]) -> str:
    """Accepted tasks per level and round: the curriculum's shape, shaded by share."""
    counts = {r: accepted_levels(path) for r, path in files.items()}
    levels = sorted({lv for c in counts.values() for lv in c})
    if not levels:
        return "<p class='none'>no task accepted yet</p>"
    body = []
    for r, c in counts.items():
        total = sum(c.values()) or 1
        cells = [f"<span style='background:rgba(31,119,180,{c[lv] / total:.2f})'>{c[lv]}</span>" if c[lv] else ""
                 for lv in levels]
        body.append([str(r)] + cells + [str(sum(c.values()))])
    return _table(["round"] + [f"level {lv}" for lv in levels] + ["total"], body, "num levels")


def _proposal_table(recs: list[dict], limit: int) -> str:
    fill = [rec for rec in recs if rec.get("phase") == "fill"] or recs
    accepted = [rec for rec in fill if rec.get("accepted")][: limit // 2]
    fill = accepted + [rec for rec in fill if not rec.get("accepted")][: limit - len(accepted)]
    if not fill:
        return "<p class='none'>no proposals yet</p>"
    rows = []
    for rec in fill:
        verdict = "accepted" if rec.get("accepted") else (f"rejected: {rec['rejected']}" if rec.get("rejected")
                                                          else "outside the band")
        rate = rec.get("solve_rate")
        rows.append([f"<code>{html.escape(str(rec.get('text', '')))}</code>", html.escape(verdict),
                     "" if rate is None else _fmt(rate)])
    return _table(["proposal (model-written)", "verdict", "solve rate"], rows)


_STYLE = """
body{font:14px system-ui,sans-serif;margin:20px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.meta{color:#555} .none{color:#888}
.charts{display:flex;flex-wrap:wrap;gap:16px} figure{margin:0;border:1px solid #ddd;padding:8px}
figcaption{font-weight:600;margin-bottom:4px} svg text{font-size:10px;fill:#555}
.grid{stroke:#eee} .line{fill:none;stroke-width:1.8}
.legend span{margin-right:10px;font-size:12px} .legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #ddd;padding:3px 6px}
table.num td{text-align:right} code{white-space:pre-wrap;word-break:break-all}
.levels span{display:block;padding:0 4px}
"""


def _page(title: str, body: list[str], refresh_s: int) -> str:
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s > 0 else ""
    return "".join([f"<!doctype html><html><head><meta charset='utf-8'>{refresh}<title>{html.escape(title)}</title>",
                    f"<style>{_STYLE}</style></head><body>", *body, "</body></html>"])


def render(run_dir: Path, refresh_s: int = 0, proposals: int = 20) -> str:
    """The dashboard page of ``run_dir`` as HTML."""
    from curriculum.rundir import run_status

    run_dir = Path(run_dir)
    rows = per_round(run_dir / "metrics.jsonl")
    files = task_files(run_dir)
    status = run_status(run_dir)

    def series(metric: str) -> list[tuple[int, float]]:
        return [(r, m[metric]) for r, m in rows.items() if metric in m]

    charts = []
    for title, metrics in CHARTS:
        lines = {label: series(k) for k, label in metrics}
        if title == "Held-out accuracy":
            lines.update({f"level {t.rsplit('_', 1)[1]}": series(t) for t in tiers(rows)})
        charts.append(line_chart(title, lines))
    done = "finished" if status.get("finished") else "in progress"
    meta = (f"round {status.get('round', '?')} of {status.get('rounds', '?')}, {done}; newest checkpoint: "
            f"{html.escape(str(status.get('checkpoint')))}")
    if "error" in status:
        meta = "cannot read the run: " + html.escape(status["error"])
    latest = max(files) if files else None
    return _page(f"{run_dir.name}: self-play curriculum", [
        f"<h1>{html.escape(str(run_dir))}</h1><p class='meta'>{meta}</p>",
        "<h2>Curves, per round</h2><div class='charts'>", *charts, "</div>",
        "<h2>Accepted tasks by level</h2><p class='meta'>Fill-phase proposals inside the band, before "
        "de-duplication against the pool; shaded by their share of the round.</p>", _level_table(files),
        "<h2>Per round</h2>", _round_table(rows) if rows else "<p class='none'>no metrics yet</p>",
        f"<h2>Proposals of round {latest}</h2>" if latest is not None else "<h2>Proposals</h2>",
        _proposal_table(load_records(files[latest]), proposals) if latest is not None
        else "<p class='none'>none yet</p>",
    ], refresh_s)


def render_compare(run_dirs: list[Path], refresh_s: int = 0) -> str:
    """One page over several runs (say self-play against the uniform baseline): their curves
    overlaid, and held-out accuracy at round 0 and at the last round, overall and per level."""
    run_dirs = [Path(d) for d in run_dirs]
    short = [d.name for d in run_dirs]
    names = short if len(set(short)) == len(short) else [str(d) for d in run_dirs]
    runs = {name: per_round(d / "metrics.jsonl") for name, d in zip(names, run_dirs)}
    charts = [line_chart(title, {name: [(r, m[k]) for r, m in rows.items() if k in m] for name, rows in runs.items()})
              for title, k in COMPARE]
    levels = sorted({t for rows in runs.values() for t in tiers(rows)}, key=lambda k: int(k.rsplit("_", 1)[1]))
    body = []
    for name, rows in runs.items():
        evals = [r for r, m in rows.items() if "eval/accuracy" in m]
        if not evals:
            body.append([html.escape(name), "", "", "", ""] + [""] * len(levels))
            continue
        first, last = rows[evals[0]], rows[evals[-1]]
        gain = last["eval/accuracy"] - first["eval/accuracy"]
        body.append([html.escape(name), str(evals[-1]), _fmt(first["eval/accuracy"]), _fmt(last["eval/accuracy"]),
                     f"{gain:+.3f}"] + [_fmt(last[t]) if t in last else "" for t in levels])
    header = ["run", "last round", "accuracy, round 0", "accuracy, last", "change"] + [
        f"level {t.rsplit('_', 1)[1]}, last" for t in levels]
    return _page("compare: " + ", ".join(names), [
        "<h1>Runs compared</h1>",
        f"<p class='meta'>{html.escape(', '.join(str(d) for d in run_dirs))}</p>",
        "<h2>Held-out accuracy</h2>", _table(header, body, "num"),
        "<h2>Curves, per round</h2><div class='charts'>", *charts, "</div>",
    ], refresh_s)


def _dirs(run_dir: Path | list[Path]) -> list[Path]:
    return [Path(d) for d in (run_dir if isinstance(run_dir, list) else [run_dir])]


def _render_any(run_dirs: list[Path], refresh_s: int = 0) -> str:
    return render(run_dirs[0], refresh_s) if len(run_dirs) == 1 else render_compare(run_dirs, refresh_s)


def write(run_dir: Path | list[Path], out: Path | None = None) -> Path:
    """Write the page of one run (default ``RUN_DIR/dashboard.html``), or the comparison of
    several (default ``compare.html``), atomically; return its path."""
    run_dirs = _dirs(run_dir)
    default = run_dirs[0] / "dashboard.html" if len(run_dirs) == 1 else Path("compare.html")
    out = Path(out) if out else default
    atomic_write(out, _render_any(run_dirs))
    return out


def serve(run_dir: Path | list[Path], port: int = 8000, host: str = "127.0.0.1",
          refresh_s: int = 30) -> http.server.HTTPServer:
    """An HTTP server whose ``/`` renders the page (of one run, or comparing several) afresh on
    every request and reloads itself every ``refresh_s``; call ``serve_forever()`` on it.
    Binds to localhost by default."""
    run_dirs = _dirs(run_dir)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            if self.path not in ("/", "/index.html"):
                self.send_error(404)
                return
            body = _render_any(run_dirs, refresh_s).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):
            log.debug("dashboard: " + fmt, *args)

    return http.server.ThreadingHTTPServer((host, port), Handler)
