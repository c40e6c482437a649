"""The real CLI in a subprocess: a couple of tiny rounds, then resume, eval and status."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY_OVERRIDES

ROOT = Path(__file__).resolve().parents[1]


def selfplay(*args, check=True):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_SILENT": "true"}
    proc = subprocess.run([sys.executable, "-m", "curriculum.cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"selfplay {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def strip_times(records):
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith("time/")} for r in records]


@pytest.mark.slow
def test_train_resume_eval_status(tmp_path):
    run = tmp_path / "run"
    common = TINY_OVERRIDES + [f"model.warmup.cache_dir={tmp_path / 'cache'}", "wandb.mode=offline"]
    selfplay("train", "configs/demo_cpu.yaml", *common, "train.rounds=2", "--run-dir", run)

    assert (run / "config.yaml").is_file()
    recs = metrics(run)
    assert all("round" in r and "phase" in r for r in recs)
    phases = {(r["round"], r["phase"]) for r in recs}
    for r in (1, 2):
        assert {(r, "update_challenger"), (r, "fill_pool"), (r, "update_solver"), (r, "eval")} <= phases
    assert (0, "eval") in phases
    assert any(k.startswith("eval/accuracy/tier_") for k in recs[-2])
    tasks = [json.loads(line) for line in (run / "tasks" / "round_0001.jsonl").read_text().splitlines()]
    assert tasks and {"text", "task", "rejected", "solve_rate", "accepted"} <= set(tasks[0])
    assert (run / "checkpoints" / "round_0002" / "manifest.json").is_file()
    assert list((run / "wandb").glob("offline-run-*")), "wandb offline run missing"

    # A second `train` into the same directory is refused, not silently overwritten.
    again = selfplay("train", "configs/demo_cpu.yaml", *common, "--run-dir", run, check=False)
    assert again.returncode == 2 and "--resume" in again.stderr

    # Changing the group size on resume would break the run.
    bad = selfplay("train", "--resume", run, "solver.group_size=8", check=False)
    assert bad.returncode == 2 and "solver.group_size" in bad.stderr

    selfplay("train", "--resume", run, "train.rounds=3")
    recs = metrics(run)
    assert max(r["round"] for r in recs) == 3
    assert len([r for r in recs if r["phase"] == "eval"]) == 4  # rounds 0..3, none twice
    assert len(list((run / "wandb").glob("offline-run-*"))) >= 1
    state = json.loads((run / "checkpoints" / "round_0003" / "state.json").read_text())
    first = json.loads((run / "checkpoints" / "round_0002" / "state.json").read_text())
    assert state["wandb_id"] == first["wandb_id"]

    out = selfplay("eval", run)
    result = json.loads(out.stdout[out.stdout.index("{"):])
    assert result["round"] == 3 and 0.0 <= result["eval/accuracy"] <= 1.0
    logged = [r for r in metrics(run) if r["phase"] == "eval" and r["round"] == 3][0]
    assert result["eval/accuracy"] == logged["eval/accuracy"]  # same checkpoint, same score

    status = selfplay("status", run)
    info = json.loads(status.stdout.strip().splitlines()[-1])
    assert info["round"] == 3 and info["finished"] is True
    assert info["rounds"] == 3  # config.yaml follows train.rounds=3 given on resume

    # The trainer refreshed the local dashboard after the last round; the CLI writes it anywhere.
    page = (run / "dashboard.html").read_text()
    assert "round 3 of 3, finished" in page and page.count("<svg") >= 4
    out = selfplay("dashboard", run, "--out", tmp_path / "copy.html")
    assert Path(out.stdout.strip()) == tmp_path / "copy.html" and (tmp_path / "copy.html").is_file()
    missing = selfplay("dashboard", tmp_path / "nope", check=False)
    assert missing.returncode == 2 and "run directory" in missing.stderr


@pytest.mark.slow
def test_resume_matches_uninterrupted_run(tmp_path):
    common = TINY_OVERRIDES + [f"model.warmup.cache_dir={tmp_path / 'cache'}"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    selfplay("train", "configs/demo_cpu.yaml", *common, "train.rounds=3", "--run-dir", straight)
    selfplay("train", "configs/demo_cpu.yaml", *common, "train.rounds=1", "--run-dir", split)
    selfplay("train", "--resume", split, "train.rounds=3")
    assert strip_times(metrics(straight)) == strip_times(metrics(split))
    for role in ("challenger", "solver"):
        a = (straight / "checkpoints" / "round_0003" / role / "model.safetensors").read_bytes()
        b = (split / "checkpoints" / "round_0003" / role / "model.safetensors").read_bytes()
        assert a == b, f"{role} weights differ after resume"


def test_config_error_exit_code(tmp_path):
    proc = selfplay("train", "configs/demo_cpu.yaml", "train.round=2", "--run-dir", tmp_path / "r", check=False)
    assert proc.returncode == 2
    assert "train.rounds" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_sandboxed_environment_runs_in_the_loop(tmp_path):
    run = tmp_path / "code"
    selfplay("train", "configs/code_output_cpu.yaml", *TINY_OVERRIDES, f"model.warmup.cache_dir={tmp_path / 'cache'}",
             "env.kwargs={num_levels: 3, max_chars: 60}", "model.tiny.max_positions=128",
             "challenger.sampling.max_new_tokens=64", "train.rounds=1", "--run-dir", run)
    recs = metrics(run)
    assert {(1, "update_challenger"), (1, "fill_pool"), (1, "eval")} <= {(r["round"], r["phase"]) for r in recs}
    tasks = [json.loads(line) for line in (run / "tasks" / "round_0001.jsonl").read_text().splitlines()]
    # Every proposal was either grounded by execution or rejected with a reason.
    assert tasks and all((t["task"] is None) != (t["rejected"] is None) for t in tasks)


@pytest.mark.slow
def test_plugins_from_the_readme_train_and_resume(tmp_path):
    """The README's environment and reward, as a run.plugins file: train, then resume in a fresh process."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Plugging in your own", 1)[1]
    blocks = [b.split("\n", 1)[1] for b in section.split("```")[1::2] if b.startswith("python")]
    plugin = tmp_path / "my_envs.py"
    plugin.write_text("\n\n".join(blocks[:2]))  # the environment, then the reward
    run = tmp_path / "run"
    common = TINY_OVERRIDES + [f"model.warmup.cache_dir={tmp_path / 'cache'}", f"run.plugins=[{plugin}]",
                               "env.name=reverse", "reward.frontier=gaussian"]
    selfplay("train", "configs/demo_cpu.yaml", *common, "train.rounds=1", "--run-dir", run)
    tasks = [json.loads(line) for line in (run / "tasks" / "round_0001.jsonl").read_text().splitlines()]
    assert any(t["rejected"] == "not a word of 3-5 letters" for t in tasks)  # the plugin's parser ran
    assert {t["task"]["level"] for t in tasks if t["task"]} <= {1, 2, 3}
    selfplay("train", "--resume", run, "train.rounds=2")  # a new interpreter finds the plugin via config.yaml
    assert max(r["round"] for r in metrics(run)) == 2
    missing = selfplay("train", "configs/demo_cpu.yaml", "run.plugins=[nowhere.py]", check=False)
    assert missing.returncode == 2 and f"run.plugins: cannot import '{ROOT / 'nowhere.py'}'" in missing.stderr
    bad_kwargs = selfplay("train", "configs/demo_cpu.yaml", *common, "env.kwargs={colour: red}",
                          "--run-dir", tmp_path / "bad", check=False)
    assert bad_kwargs.returncode == 2 and "env.kwargs do not fit environment 'reverse'" in bad_kwargs.stderr
