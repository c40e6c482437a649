"""Health alarms in real runs (the CLI in this process): the demo raises none; a solver driven to collapse raises solver_collapse,
health.stop_on ends that run with a checkpoint, and a resume carries the alarms on exactly."""
import json

import pytest

from curriculum.checkpoint import read_state
from tests.test_cli import selfplay

# The demo on its cached warm-up, a few short rounds: 3 is the longest default alarm window but
# stall's and plateau's (10 rounds).
DEMO = ["configs/demo_cpu.yaml", "run.threads=1", "eval.per_level=5", "wandb.mode=disabled", "log.progress=false"]
# The generator arm at a solver lr 3000x the demo's: held-out accuracy 0.5 -> 0.03 after one round.
COLLAPSE = DEMO + ["curriculum.mode=uniform", "solver.optim.lr=0.03", "solver.steps=4"]


def health_records(run) -> list[dict]:
    return [rec for rec in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if rec["phase"] == "health"]


@pytest.mark.slow
def test_the_demo_raises_no_alarm(tmp_path):
    run = tmp_path / "demo"
    proc = selfplay("train", *DEMO, f"run.dir={run}", "train.rounds=3")
    assert "health alarm" not in proc.stderr
    records = health_records(run)
    assert [rec["round"] for rec in records] == [1, 2, 3]
    assert all(rec["health/active"] == 0 for rec in records)
    assert json.loads(selfplay("status", run, "--json").stdout)["alarms"] == []
    assert "no alarm has fired" in (run / "dashboard.html").read_text()


@pytest.mark.slow
def test_collapse_fires_stops_and_resumes(tmp_path):
    run = tmp_path / "collapse"
    proc = selfplay("train", *COLLAPSE, f"run.dir={run}", "train.rounds=5", "health.stop_on=[solver_collapse]")
    starts = [line for line in proc.stderr.splitlines() if "health alarm solver_collapse:" in line]
    assert len(starts) == 1 and "round 2:" in starts[0] and "eval/accuracy" in starts[0]
    assert "stopped by health.stop_on: solver_collapse" in proc.stderr
    # stopped after round 2, checkpointed, the reason in the state and the metrics
    status = json.loads(selfplay("status", run, "--json").stdout)
    assert status["state"] == "stopped" and status["round"] == 2 and "solver_collapse" in status["alarms"]
    assert status["stop_reason"].startswith("health.stop_on: solver_collapse")
    assert read_state(run / "checkpoints" / "round_0002")["stop_reason"] == status["stop_reason"]
    last = health_records(run)[-1]
    assert last["round"] == 2 and last["health/solver_collapse"] == 1 and last["health/stop_reason"]
    row = selfplay("status", run).stdout.splitlines()[1].split()
    assert row[4].split(",") == status["alarms"] and row[5:] == ["health.stop_on:", "solver_collapse"]
    page = (run / "dashboard.html").read_text()
    assert "<h2 id='health'>Health</h2>" in page and "<b>solver_collapse</b></td><td>ON</td><td>2</td>" in page
    assert 'class="alarm"><title>health alarm solver_collapse from round 2</title>' in page

    # with the alarm taken out of stop_on the run goes on; the alarm, still on, does not start again
    resumed = selfplay("train", "--resume", run, "health.stop_on=[]")
    assert "health alarm solver_collapse:" not in resumed.stderr
    rounds = {rec["round"]: rec for rec in health_records(run)}
    assert sorted(rounds) == [1, 2, 3, 4, 5] and all(rounds[r]["health/solver_collapse"] == 1 for r in (2, 3, 4, 5))
    status = json.loads(selfplay("status", run, "--json").stdout)
    assert status["state"] == "finished" and "stop_reason" not in status
