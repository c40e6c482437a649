"""The local dashboard: built from a run directory's files, safe to open, served live."""
import json
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


def write_run(run: Path, rounds: int = 3, gain: float = 0.05) -> Path:
    """A run directory as the trainer leaves it: config, metrics, tasks (no checkpoint)."""
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
    text = "".join(json.dumps(x) + "\n" for x in lines) + '[1, 2]\n{"phase": "eval"}\n{"round": 3, "phase": "ev'  # not records
    (run / "metrics.jsonl").write_text(text)
    (run / "tasks").mkdir()
    for r in range(1, rounds + 1):
        recs = [{"round": r, "phase": "fill", "text": f"Q:{r}+{i}=", "task": {"text": f"{r}+{i}", "level": 1 + i % r},
                 "rejected": None, "solve_rate": 0.5, "accepted": True} for i in range(r)]
        recs.append({"round": r, "phase": "fill", "text": ATTACK, "task": None, "rejected": "grammar",
                     "solve_rate": None, "accepted": False})
        (run / "tasks" / f"round_{r:04d}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    return run


def polyline(page: str, label: str) -> list[tuple[float, float]]:
    m = re.search(r'<polyline points="([^"]*)"[^>]*><title>' + re.escape(label) + "</title>", page)
    assert m, f"no line {label!r}"
    return [tuple(map(float, p.split(","))) for p in m.group(1).split()]


def test_per_round_means_steps_and_skips_what_is_no_record(tmp_path):
    rows = dashboard.per_round(write_run(tmp_path / "run") / "metrics.jsonl")
    assert sorted(rows) == [0, 1, 2, 3]
    assert rows[2]["challenger/valid_fraction"] == pytest.approx((0.7 + 0.9) / 2)  # mean of the steps
    assert rows[3]["eval/accuracy"] == pytest.approx(0.45)  # the torn line added nothing
    assert dashboard.tiers(rows) == ["eval/accuracy/tier_1", "eval/accuracy/tier_2"]
    assert dashboard.per_round(tmp_path / "missing.jsonl") == {}


def test_page_shows_the_curriculum_and_escapes_model_text(tmp_path):
    run = write_run(tmp_path / "run")
    page = dashboard.write(run).read_text()
    # One point per round on the accuracy line, rising as the metrics do (SVG y grows downwards).
    pts = polyline(page, "all")
    assert len(pts) == 4 and [y for _, y in pts] == sorted((y for _, y in pts), reverse=True)
    assert len(polyline(page, "level 2")) == 4 and len(polyline(page, "accepted")) == 3
    assert "round 0 of 3, in progress" in page  # no checkpoint yet
    # Accepted tasks by level: round 3 accepted levels 1, 2, 3 once each.
    levels = page[page.index("Accepted tasks by level"):page.index("Per round")]
    assert "<th>level 3</th>" in levels and levels.count("<tr>") == 4
    # Model-written text is shown, escaped; the page runs and fetches nothing.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page and "<img" not in page
    assert not re.search(r"<[^>]*\b(src|href)=", page)  # no tag loads anything
    assert "Proposals of round 3" in page and "rejected: grammar" in page


def test_compare_page_overlays_runs(tmp_path):
    from curriculum.cli import main

    a = write_run(tmp_path / "selfplay_seed0")
    b = write_run(tmp_path / "uniform_seed0", rounds=2, gain=-0.02)
    out = tmp_path / "compare.html"
    assert main(["dashboard", str(a), str(b), "--out", str(out)]) == 0
    page = out.read_text()
    assert len(polyline(page, "selfplay_seed0")) == 4 and len(polyline(page, "uniform_seed0")) == 3
    rows = re.findall(r"<tr><td>([^<]*)</td><td>(\d+)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>", page)
    assert rows == [("selfplay_seed0", "3", "0.3", "0.45", "+0.150"), ("uniform_seed0", "2", "0.3", "0.26", "-0.040")]
    # Runs with the same name are told apart by their paths.
    c = write_run(tmp_path / "other" / "selfplay_seed0")
    assert str(c) in dashboard.render_compare([a, c])
    assert main(["dashboard", str(a), str(tmp_path / "missing")]) == 2


def test_level_counts_are_reread_only_when_a_file_changes(tmp_path, monkeypatch):
    run = write_run(tmp_path / "run")
    first = dashboard.render(run)
    reads = []
    real = dashboard.load_records
    monkeypatch.setattr(dashboard, "load_records", lambda path: reads.append(path.name) or real(path))
    assert dashboard.render(run) == first
    assert reads == ["round_0003.jsonl"]  # only the latest round, for its proposals table
    path = run / "tasks" / "round_0001.jsonl"
    path.write_text(path.read_text().replace('"level": 1', '"level": 4'))
    reads.clear()
    page = dashboard.render(run)
    assert sorted(reads) == ["round_0001.jsonl", "round_0003.jsonl"] and "<th>level 4</th>" in page


def test_chart_leaves_out_nonfinite_points():
    svg = dashboard.line_chart("loss", {"loss": [(1, 0.5), (2, float("nan")), (3, float("inf")), (4, 0.25)],
                                        "empty": [(1, float("nan"))]})
    assert len(polyline(svg, "loss")) == 2 and "nan" not in svg.lower() and "empty" not in svg


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
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        first = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'http-equiv="refresh" content="7"' in first and "Proposals of round 3" in first
        (run / "tasks" / "round_0004.jsonl").write_text(json.dumps({"round": 4, "phase": "fill", "text": "Q:9"}) + "\n")
        assert "Proposals of round 4" in urllib.request.urlopen(url, timeout=10).read().decode()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "etc/passwd", timeout=10)
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
