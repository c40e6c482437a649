"""The local dashboard: built from a run directory's files, safe to open, served live."""
import json
import math
import os
import re
import threading
import types
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from curriculum import dashboard
from curriculum.config import load_config, to_yaml
from curriculum.trainer import SelfPlayTrainer

ROOT = Path(__file__).resolve().parents[2]
ATTACK = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def write_run(run: Path, rounds: int = 3, gain: float = 0.05, extra: bool = False) -> Path:
    """A run directory as the trainer leaves it: config, metrics, tasks (no checkpoint).
    ``extra``: also the metrics added with the curriculum (quantiles, mean@k, tokens, ...)."""
    run.mkdir(parents=True)
    cfg = load_config(ROOT / "configs" / "demo_cpu.yaml", [f"run.dir={run}", f"train.rounds={rounds}"])
    (run / "config.yaml").write_text(to_yaml(cfg))
    lines = [{"round": 0, "phase": "eval", "time": 0.0, "eval/accuracy": 0.30, "eval/accuracy/tier_1": 0.6,
              "eval/accuracy/tier_2": 0.2}]
    for r in range(1, rounds + 1):
        lines += [
            {"round": r, "phase": "update_challenger", "time": 1.0, "challenger/valid_fraction": 0.5 + 0.1 * r,
             "challenger/reward_mean": 0.1},
            {"round": r, "phase": "update_challenger", "time": 2.0, "challenger/valid_fraction": 0.7 + 0.1 * r,
             "challenger/reward_mean": 0.3},
            {"round": r, "phase": "fill_pool", "time": 3.0, "curriculum/accepted": 4 * r,
             "curriculum/accepted_level_mean": 1.0 + r, "curriculum/pool_size": 10 * r},
            {"round": r, "phase": "eval", "time": 4.0, "eval/accuracy": 0.30 + gain * r,
             "eval/accuracy/tier_1": 0.6, "eval/accuracy/tier_2": 0.2 + 0.05 * r},
        ]
        if extra:
            lines[-2].update({"curriculum/accepted_difficulty_p10": 0.2, "curriculum/accepted_difficulty_p50": 0.5,
                              "curriculum/accepted_difficulty_p90": 0.8, "curriculum/pool_difficulty_p10": 0.1,
                              "curriculum/pool_difficulty_p50": 0.4, "curriculum/pool_difficulty_p90": 0.7,
                              "curriculum/label_accuracy": 0.9})
            lines[-1].update({"eval/mean_at_k": 0.2 + gain * r, "eval/mean_at_k/tier_1": 0.5,
                              "eval/mean_at_k/tier_2": 0.1, "eval/frontier_level": 1 + r // 2})
            lines[-1:-1] = [{"round": r, "phase": "update_solver", "time": 3.5, "solver/no_signal_fraction": 0.25,
                             "solver/generated_tokens": 1000 * (2 * r - 1 + step), "solver/tool_calls_mean": 1.5,
                             "solver/tool_error_rate": 0.1, "challenger/generated_tokens": 500 * r,
                             "solver/engine_logprob_gap": 1e-6, "solver/tis_capped_frac": 0.0}
                            for step in range(2)]
    text = "".join(json.dumps(x) + "\n" for x in lines) + '[1, 2]\n{"phase": "eval"}\n{"round": 3, "phase": "ev'  # not records
    (run / "metrics.jsonl").write_text(text)
    (run / "tasks").mkdir()
    for r in range(1, rounds + 1):
        recs = [{"round": r, "phase": "fill", "text": f"Q:{r}+{i}=", "task": {"text": f"{r}+{i}", "level": 1 + i % r},
                 "rejected": None, "solve_rate": 0.5, "accepted": True, "prompt": "Q:"} for i in range(r)]
        recs.append({"round": r, "phase": "fill", "text": ATTACK, "task": None, "rejected": "grammar",
                     "solve_rate": None, "accepted": False})
        (run / "tasks" / f"round_{r:04d}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    return run


def polyline(page: str, label: str) -> list[tuple[float, float]]:
    m = re.search(r'<polyline points="([^"]*)"[^>]*><title>' + re.escape(label) + "</title>", page)
    assert m, f"no line {label!r}"
    return [tuple(map(float, p.split(","))) for p in m.group(1).split()]


def figure(page: str, caption: str) -> str:
    """The chart captioned ``caption``."""
    m = re.search(r"<figure><figcaption>" + re.escape(caption) + "</figcaption>.*?</figure>", page, re.S)
    assert m, f"no chart {caption!r}"
    return m.group(0)


def captions(page: str) -> list[str]:
    return re.findall(r"<figcaption>([^<]*)</figcaption>", page)


def ticks(svg: str, axis: str) -> list[str]:
    return re.findall(rf'class="{axis}tick">([^<]*)<', svg)


def test_per_round_means_steps_and_skips_what_is_no_record(tmp_path):
    rows = dashboard.per_round(write_run(tmp_path / "run", extra=True) / "metrics.jsonl")
    assert sorted(rows) == [0, 1, 2, 3]
    assert rows[2]["challenger/valid_fraction"] == pytest.approx((0.7 + 0.9) / 2)  # mean of the steps
    assert rows[2]["solver/generated_tokens"] == 4000  # a cumulative counter: its last value, not the mean
    assert rows[3]["eval/accuracy"] == pytest.approx(0.45)  # the torn line added nothing
    assert dashboard.tiers(rows) == ["eval/accuracy/tier_1", "eval/accuracy/tier_2"]
    assert dashboard.tiers(rows, "eval/mean_at_k") == ["eval/mean_at_k/tier_1", "eval/mean_at_k/tier_2"]
    assert dashboard.per_round(tmp_path / "missing.jsonl") == {}
    # No task accepted: the accepted tasks' mean level (logged as 0) is no point of the curve.
    rows[2]["curriculum/accepted"] = 0
    assert [r for r, _ in dashboard.series(rows, "curriculum/accepted_level_mean")] == [1, 3]


def test_per_round_reads_only_the_lines_appended_since_its_last_call(tmp_path, monkeypatch):
    from curriculum.dashboard import data

    path = tmp_path / "metrics.jsonl"
    step = lambda r, v: json.dumps({"round": r, "phase": "update_solver", "solver/reward_mean": v}) + "\n"  # noqa: E731
    path.write_text(step(1, 0.2) + step(1, 0.4) + step(2, 0.6)[:20])  # round 2's line torn mid-write
    parsed = []
    real = data._record
    monkeypatch.setattr(data, "_record", lambda line: parsed.append(line) or real(line))

    def fresh():
        data._METRICS.pop(str(path))
        return dashboard.per_round(path)

    rows = dashboard.per_round(path)
    assert rows == {1: {"solver/reward_mean": pytest.approx(0.3)}}
    with open(path, "a") as f:  # the writer finishes round 2's line, then another
        f.write(step(2, 0.6)[20:] + step(2, 1.0))
    parsed.clear()
    rows = dashboard.per_round(path)
    assert len(parsed) == 2 and rows == fresh() and rows[2]["solver/reward_mean"] == pytest.approx(0.8)
    parsed.clear()
    rows[1]["solver/reward_mean"] = 9.0  # a caller's change stays its own
    assert dashboard.per_round(path)[1]["solver/reward_mean"] == pytest.approx(0.3) and parsed == []
    # Cut back (a resume keeps the checkpoint's lines) or rewritten in place: read anew.
    path.write_text(step(1, 0.2))
    assert dashboard.per_round(path) == {1: {"solver/reward_mean": 0.2}}
    path.write_text(step(1, 0.7))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**6))  # clocks coarser than two writes
    assert dashboard.per_round(path) == {1: {"solver/reward_mean": 0.7}}


def test_page_shows_the_curriculum_and_escapes_model_text(tmp_path):
    run = write_run(tmp_path / "run")
    page = dashboard.write(run).read_text()
    # One point per round on the accuracy line, rising as the metrics do (SVG y grows downwards).
    pts = polyline(page, "greedy")
    assert len(pts) == 4 and [y for _, y in pts] == sorted((y for _, y in pts), reverse=True)
    assert len(polyline(page, "level 2")) == 4 and len(polyline(page, "accepted")) == 3
    assert "round 0 of 3, in progress" in page  # no checkpoint yet
    # Every chart scales with the page and names both axes.
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    assert len(svgs) >= 6
    for svg in svgs:
        assert 'viewBox="0 0 ' in svg and "width=" not in svg.split(">")[0]
        assert len(re.findall(r'class="axis-title">[^<]+<', svg)) == 2
    # Accepted tasks by level: round 3 accepted levels 1, 2, 3 once each.
    levels = page[page.index("Accepted tasks by level"):page.index("<h2>Training")]
    assert "<th>level 3</th>" in levels and levels.count("<tr>") == 4
    # Greedy accuracy as a level x round table too, in percent.
    heat = page[page.index("Greedy accuracy, % by level"):page.index("<h2>Curriculum")]
    assert heat.count("<tr>") == 3 and ">35</span>" in heat  # level 2, round 3: 0.35
    # Model-written text is shown, escaped; the page runs and fetches nothing.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page and "<img" not in page
    assert not re.search(r"<[^>]*\b(src|href)=", page)  # no tag loads anything
    assert "rejected: grammar" in page


def test_ticks_are_round_numbers():
    assert dashboard.nice_ticks(0, 60.2) == [0, 10, 20, 30, 40, 50, 60, 70]
    assert dashboard.nice_ticks(-1, 0.5) == [-1, -0.5, 0, 0.5]
    assert dashboard.tick_labels(dashboard.nice_ticks(0, 23456)) == ["0", "5k", "10k", "15k", "20k", "25k"]
    # Rates: quarters of 0..1, whatever the data's maximum.
    rates = dashboard.line_chart("acc", {"a": [(1, 0.998), (2, 0.749), (3, 0.2)]}, rate=True)
    assert ticks(rates, "y") == ["0", "0.25", "0.5", "0.75", "1"]
    # Anything else: a 1-2-5 step, from 0 (or below) to just above the maximum.
    for top in (60.2, 0.117, 7.0, 1234.0, 3e6):
        svg = dashboard.line_chart("v", {"a": [(1, top / 3), (2, top)]})
        values = dashboard.nice_ticks(0, top)
        labels = ticks(svg, "y")
        assert labels == dashboard.tick_labels(values) and labels[0] == "0"
        step = values[1] - values[0]
        assert round(step / 10 ** math.floor(math.log10(step)), 9) in (1, 2, 5)
        assert values[-2] < top <= values[-1] and all(b - a == pytest.approx(step) for a, b in zip(values, values[1:]))


def test_x_ticks_are_whole_rounds():
    for last, expected in ((2, ["0", "1", "2"]), (7, [str(i) for i in range(8)]),
                           (30, [str(i) for i in range(0, 31, 5)])):
        svg = dashboard.line_chart("v", {"a": [(r, 0.5) for r in range(last + 1)]})
        assert ticks(svg, "x") == expected
    # Whole rounds even when the span is short, and only within the data.
    assert ticks(dashboard.line_chart("v", {"a": [(3, 1.0), (4, 2.0)]}), "x") == ["3", "4"]


def test_a_run_of_a_single_round(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"round": 1, "phase": "eval", "time": 0, "eval/accuracy": 0.5,
                                                   "eval/accuracy/tier_1": 0.5, "time/eval_s": 2.0}) + "\n")
    page = dashboard.render(run)
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    assert svgs and all(ticks(svg, "x") == ["1"] for svg in svgs)  # not an axis from 1 to 2
    (x, _), = polyline(page, "greedy")
    assert x == pytest.approx((58 + 480 - 16) / 2)  # the lone point in the middle of the plot


def test_round_selector_lists_every_round(tmp_path):
    run = write_run(tmp_path / "run")
    many = [{"round": 4, "phase": "fill", "text": f"Q:{i}", "task": {"text": str(i), "level": 2}, "rejected": None,
             "solve_rate": 0.5, "accepted": i % 10 == 0} for i in range(100)]
    (run / "tasks" / "round_0004.jsonl").write_text("".join(json.dumps(x) + "\n" for x in many))
    page = dashboard.render(run)
    blocks = re.findall(r"<details id='round-(\d+)'( open)?>(.*?)</details>", page, re.S)
    assert [(r, o) for r, o, _ in blocks] == [("4", " open"), ("3", ""), ("2", ""), ("1", "")]  # newest first, open
    newest = blocks[0][2]
    assert "100 proposals, 10 accepted" in newest and "showing 30 of 100" in newest
    assert newest.count("<tr class='accepted'>") == 10 and newest.count("<tr") == 31  # capped, accepted first
    assert "Q:3+2=" in blocks[1][2]  # an older round's proposals are on the page too


def test_difficulty_bands_drawn_when_the_quantiles_exist(tmp_path):
    page = dashboard.render(write_run(tmp_path / "full", extra=True))
    chart = figure(page, "Task difficulty (1 − solve rate)")
    for label, (lo, mid, hi) in (("accepted", (0.2, 0.5, 0.8)), ("pool", (0.1, 0.4, 0.7))):
        band = re.search(r'<polygon points="([^"]*)"[^>]*><title>' + label + " p10–p90</title>", chart)
        assert band, f"no {label} band"
        ys = sorted({float(p.split(",")[1]) for p in band.group(1).split()})
        median = polyline(chart, f"{label} (median)")
        assert len(median) == 3 and len(ys) == 2
        top, bottom = ys  # SVG y grows downwards: p90 on top
        assert top < median[0][1] < bottom
        assert (bottom - median[0][1]) / (bottom - top) == pytest.approx((mid - lo) / (hi - lo), abs=0.01)
    bare = figure(dashboard.render(write_run(tmp_path / "bare")), "Task difficulty (1 − solve rate)")
    assert "<polygon" not in bare and "no data yet" in bare


NEW_CHARTS = ["mean@k per level", "Frontier level", "Pseudo-label accuracy", "Groups without signal",
              "Generated tokens", "Tool use", "Rollout engine vs trainer (rollout.engine=vllm)"]


def test_new_metrics_are_charted_when_present(tmp_path):
    page = dashboard.render(write_run(tmp_path / "full", extra=True))
    assert set(NEW_CHARTS) <= set(captions(page))
    assert len(polyline(figure(page, "Held-out accuracy"), "mean@k")) == 3  # rounds 1-3 logged it
    assert len(polyline(figure(page, "mean@k per level"), "level 2")) == 3
    frontier = polyline(figure(page, "Frontier level"), "highest level solved ≥ 50%")
    assert len(frontier) == 5 and all(a[0] == b[0] or a[1] == b[1] for a, b in zip(frontier, frontier[1:]))  # steps
    assert ticks(figure(page, "Frontier level"), "y") == ["0", "1", "2"]  # whole levels
    tokens = polyline(figure(page, "Generated tokens"), "solver")
    assert len(tokens) == 3 and tokens[0][1] > tokens[1][1] > tokens[2][1]  # cumulative: rising
    assert "mean@k, % by level and round" in page and "<th>mean@k</th>" in page and "<th>no signal</th>" in page
    # Absent: no chart, no empty column, no error.
    bare = dashboard.render(write_run(tmp_path / "bare"))
    assert not set(NEW_CHARTS) & set(captions(bare))
    assert "mean@k" not in bare and "<th>no signal</th>" not in bare


TYPE_CHARTS = ["Held-out accuracy per task type", "Solver solve rate per task type", "Validity per task type"]


def test_task_types_are_found_in_the_metric_names(tmp_path):
    run = write_run(tmp_path / "typed")
    with open(run / "metrics.jsonl", "a") as f:  # after the torn line: a writer that went on
        f.write("\n")
        for r in range(1, 4):
            f.write(json.dumps({"round": r, "phase": "eval", "eval/accuracy/type_sorting": 0.2 * r,
                                "eval/accuracy/type_zebra": 0.5, "solver/solve_rate/type_sorting": 0.1 * r,
                                "challenger/valid_fraction/type_sorting": 0.9}) + "\n")
    page = dashboard.render(run)
    accuracy = figure(page, "Held-out accuracy per task type")
    assert len(polyline(accuracy, "sorting")) == 3 and len(polyline(accuracy, "zebra")) == 3
    assert [y for _, y in polyline(accuracy, "sorting")] == sorted((y for _, y in polyline(accuracy, "sorting")),
                                                                     reverse=True)  # rising
    assert len(polyline(figure(page, "Solver solve rate per task type"), "sorting")) == 3
    assert "zebra" not in figure(page, "Solver solve rate per task type")  # only the types each metric names
    assert len(polyline(figure(page, "Validity per task type"), "sorting")) == 3
    # A run of untyped tasks: no per-type chart at all.
    assert not set(TYPE_CHARTS) & set(captions(dashboard.render(write_run(tmp_path / "plain", extra=True))))


def test_many_levels_stay_readable(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    recs = [{"round": r, "phase": "eval", "time": 0, "eval/accuracy": 0.5,
             **{f"eval/accuracy/tier_{lv}": min(1.0, r / lv) for lv in range(1, 21)}} for r in range(6)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    page = dashboard.render(run)
    chart = figure(page, "Greedy accuracy per level")
    colours = re.findall(r'<polyline points="[^"]*" stroke="([^"]*)"', chart)
    assert len(colours) == 20 and len(set(colours)) == 20  # each level its own shade along the ramp
    assert "linear-gradient" in chart and chart.count("<span>") == 1  # one legend entry, level 1 to level 20
    heat = page[page.index("Greedy accuracy, % by level"):page.index("<h2>Curriculum")]
    assert heat.count("<tr>") == 21 and "<b>20</b>" in heat


def test_compare_page_overlays_runs(tmp_path):
    from curriculum.cli import main

    a = write_run(tmp_path / "selfplay_seed0", extra=True)
    b = write_run(tmp_path / "uniform_seed0", rounds=2, gain=-0.02)
    out = tmp_path / "compare.html"
    assert main(["dashboard", str(a), str(b), "--out", str(out)]) == 0
    page = out.read_text()
    assert len(polyline(page, "selfplay_seed0")) == 4 and len(polyline(page, "uniform_seed0")) == 3
    rows = re.findall(r"<tr><td>([^<]*)</td><td>(\d+)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>", page)
    assert rows == [("selfplay_seed0", "3", "0.3", "0.45", "+0.150"), ("uniform_seed0", "2", "0.3", "0.26", "-0.040")]
    # Accuracy against the tokens both roles generated, for the runs that count them.
    chart = figure(page, "Greedy accuracy against generated tokens")
    assert "tokens generated (challenger + solver)" in chart and "uniform_seed0" not in chart
    assert [x for x, _ in polyline(chart, "selfplay_seed0")] == sorted(x for x, _ in polyline(chart, "selfplay_seed0"))
    assert ticks(chart, "x") == [str(1000 * i) for i in range(8)]  # from 0 to the last round's 7500 tokens
    assert "Held-out mean@k" in captions(page) and "Frontier level" in captions(page)
    bare = dashboard.render_compare([b, write_run(tmp_path / "uniform_seed1")])
    assert "against generated tokens" not in bare and "Frontier level" not in captions(bare)
    # Runs with the same name are told apart by their paths.
    c = write_run(tmp_path / "other" / "selfplay_seed0")
    assert str(c) in dashboard.render_compare([a, c])
    assert main(["dashboard", str(a), str(tmp_path / "missing")]) == 2


def test_task_logs_are_reread_only_when_a_file_changes(tmp_path, monkeypatch):
    run = write_run(tmp_path / "run")
    first = dashboard.render(run)
    reads = []
    real = dashboard.data.load_records
    monkeypatch.setattr(dashboard.data, "load_records", lambda path: reads.append(path.name) or real(path))
    assert dashboard.render(run) == first and reads == []  # every round's proposals and levels from the cache
    path = run / "tasks" / "round_0001.jsonl"
    path.write_text(path.read_text().replace('"level": 1', '"level": 4'))
    page = dashboard.render(run)
    assert reads == ["round_0001.jsonl"] and "<th>level 4</th>" in page


def test_chart_leaves_out_nonfinite_points():
    svg = dashboard.line_chart("loss", {"loss": [(1, 0.5), (2, float("nan")), (3, float("inf")), (4, 0.25)],
                                        "empty": [(1, float("nan"))]},
                               bands={"q": [(1, 0.1, 0.2, float("nan")), (2, 0.1, 0.2, 0.3)]})
    assert len(polyline(svg, "loss")) == 2 and len(polyline(svg, "q (median)")) == 1
    assert "nan" not in svg.lower() and "inf" not in svg.lower() and "empty" not in svg


def test_page_of_an_empty_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    page = dashboard.render(run)
    assert "cannot read the run" in page and "no metrics yet" in page


def test_serve_rebuilds_the_page_per_request(tmp_path):
    run = write_run(tmp_path / "run")
    server = dashboard.serve(run, port=0, refresh_s=7)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}/"
    try:
        first = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'http-equiv="refresh" content="7"' in first and "<details id='round-3' open>" in first
        (run / "tasks" / "round_0004.jsonl").write_text(json.dumps({"round": 4, "phase": "fill", "text": "Q:9"}) + "\n")
        assert "<details id='round-4' open>" in urllib.request.urlopen(url, timeout=10).read().decode()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "etc/passwd", timeout=10)
        with pytest.raises(RuntimeError, match=f"port {port} is in use; pick another with --port"):
            dashboard.serve(run, port=port)
    finally:
        server.shutdown()
        server.server_close()


def test_a_failing_dashboard_never_stops_training(tmp_path, monkeypatch, caplog):
    def broken(run_dir, out=None):
        raise OSError("disk full")

    monkeypatch.setattr(dashboard, "write", broken)
    fake = types.SimpleNamespace(dist=types.SimpleNamespace(is_main=True), run_dir=tmp_path,
                                 cfg=types.SimpleNamespace(log=types.SimpleNamespace(dashboard=True)))
    SelfPlayTrainer.write_dashboard(fake)  # logs, does not raise
    assert "could not write the dashboard" in caplog.text


def test_cli_dashboard_on_a_busy_port_says_so_in_one_line(tmp_path, capsys):
    import socket

    from curriculum.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("train:\n  rounds: 1\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(["dashboard", str(run), "--serve", "--port", str(port)])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"selfplay: port {port} is in use; pick another with --port"
