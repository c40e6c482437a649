"""Stop anywhere, resume exactly: SIGKILL at random moments, SIGTERM mid-phase, corrupt checkpoints.
The runs that are killed or signalled are real processes; the rest (``selfplay``) run in this process."""
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import TINY_OVERRIDES
from tests.test_cli import metrics, selfplay, strip_times

ROOT = Path(__file__).resolve().parents[1]


def start(*args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_SILENT": "true"}
    return subprocess.Popen([sys.executable, "-m", "curriculum.cli", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def final_weights(run: Path, name: str = "round_0003") -> dict[str, bytes]:
    return {role: (run / "checkpoints" / name / role / "model.safetensors").read_bytes() for role in ("challenger", "solver")}


@pytest.fixture(scope="module")
def cache(warmup_cache):
    return warmup_cache


def run_overrides(cache) -> list[str]:
    # every_steps=1: a checkpoint after every step, so kills land inside rounds and inside writes.
    return TINY_OVERRIDES + [f"model.warmup.cache_dir={cache}", "checkpoint.every_steps=1",
                             "checkpoint.keep_last=50", "train.rounds=3"]


@pytest.fixture
def common(cache):
    return run_overrides(cache)


@pytest.fixture(scope="module")
def straight(tmp_path_factory, cache):
    """The uninterrupted reference run, shared by the tests of this module."""
    run = tmp_path_factory.mktemp("straight") / "run"
    selfplay("train", "configs/demo_cpu.yaml", *run_overrides(cache), "--run-dir", run)
    return run


def metric_lines(run: Path) -> int:
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_is_bit_identical(tmp_path, straight, common):
    run = tmp_path / "killed"
    rng = random.Random(1234)
    total = metric_lines(straight)
    # Three kills, each a random moment after a random amount of progress (inside rounds,
    # often inside a checkpoint write, since every step writes one).
    targets = sorted(rng.sample(range(2, total - 2), 3))
    proc = start("train", "configs/demo_cpu.yaml", *common, "--run-dir", run)
    for target in targets:
        while metric_lines(run) < target and proc.poll() is None:
            time.sleep(0.01)
        assert proc.poll() is None, f"run ended before the kill at line {target}: " + proc.stderr.read()[-3000:]
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc = start("train", "--resume", run)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert final_weights(run) == final_weights(straight)
    assert strip_times(metrics(run)) == strip_times(metrics(straight))
    for r in (1, 2, 3):
        name = f"round_{r:04d}.jsonl"
        assert (run / "tasks" / name).read_text() == (straight / "tasks" / name).read_text()


@pytest.mark.slow
def test_sigterm_mid_phase_checkpoints_and_resumes(tmp_path, straight, common):
    run = tmp_path / "termed"
    overrides = [o for o in common if not o.startswith("checkpoint.every_steps")]
    proc = start("train", "configs/demo_cpu.yaml", *overrides, "--run-dir", run)
    # SIGTERM as soon as round 1's first step has logged: the run is then inside round 1.
    while metric_lines(run) < 2:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    names = sorted(p.name for p in (run / "checkpoints").iterdir() if p.is_dir())
    mid = [n for n in names if "+" in n]
    assert mid, f"no mid-round checkpoint written on SIGTERM: {names}"
    assert "checkpoint" in err and "--resume" in err
    selfplay("train", "--resume", run)
    assert final_weights(run) == final_weights(straight)
    assert strip_times(metrics(run)) == strip_times(metrics(straight))


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncate", "manifest", "resealed truncate", "resealed rng {}",
                                    "resealed state without stage"])
def test_corrupt_newest_checkpoint_falls_back(tmp_path, straight, damage):
    run = tmp_path / "corrupt"
    import json
    import shutil

    import torch

    from tests.curriculum.test_checkpoint_damage import reseal

    shutil.copytree(straight, run)
    newest = run / "checkpoints" / "round_0003"
    f = newest / "solver" / "model.safetensors"
    if damage.endswith("truncate"):
        f.write_bytes(f.read_bytes()[:100])
    elif damage == "manifest":
        (newest / "manifest.json").unlink()
    elif damage.endswith("rng {}"):
        f = newest / "rng.pt"
        torch.save({}, f)
    else:
        f = newest / "state.json"
        f.write_text(json.dumps({k: v for k, v in json.loads(f.read_text()).items() if k != "stage"}))
    if damage.startswith("resealed"):  # damage done before the manifest was computed: only the load sees it
        reseal(newest)
    proc = selfplay("train", "--resume", run)
    assert "skipping checkpoint" in proc.stderr and "round_0003" in proc.stderr
    if damage.startswith("resealed"):
        assert str(f) in proc.stderr
    # It resumed from the step before round 3 ended and redid the rest identically.
    assert final_weights(run) == final_weights(straight)
    assert strip_times(metrics(run)) == strip_times(metrics(straight))


@pytest.mark.slow
def test_second_signal_exits_at_once(tmp_path, common):
    run = tmp_path / "twice"
    # A slow fill phase (many proposals) so that both signals land inside one step.
    overrides = [o for o in common if not o.startswith("checkpoint.every_steps")]
    proc = start("train", "configs/demo_cpu.yaml", *overrides, "train.rounds=50", "curriculum.fill_proposals=4000",
                 "--run-dir", run)
    err_lines: list[str] = []

    def read_stderr():
        for line in iter(proc.stderr.readline, ""):
            err_lines.append(line)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    while metric_lines(run) < 2:  # round 0 eval, round 1 challenger step: now filling the pool
        assert proc.poll() is None, "".join(err_lines)[-3000:]
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    # The same signal twice at once is delivered once: wait until the first was handled.
    deadline = time.time() + 30
    while "finishing the current step" not in "".join(err_lines) and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    reader.join(timeout=10)
    err = "".join(err_lines)
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    assert "second signal" in err
    # What was written before is intact and resumable.
    selfplay("train", "--resume", run, "train.rounds=1")


@pytest.mark.slow
def test_readers_during_a_live_run_lose_nothing(tmp_path, straight, common):
    """eval, status and dashboard while the trainer writes: its metrics, tasks and weights are the straight run's."""
    run = tmp_path / "live"
    proc = start("train", "configs/demo_cpu.yaml", *common, "--run-dir", run)
    reads = 0
    while proc.poll() is None and reads < 3:
        if (run / "checkpoints" / "latest").exists() and metric_lines(run) > 2 + 3 * reads:
            for args in (["eval", run], ["status", run, "--json"], ["dashboard", run, "--out", tmp_path / "page.html"]):
                out = selfplay(*args, check=False)
                assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
            reads += 1
        time.sleep(0.05)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert reads >= 1, "the run ended before any reader ran"
    assert final_weights(run) == final_weights(straight)
    assert strip_times(metrics(run)) == strip_times(metrics(straight))
    for r in (1, 2, 3):
        name = f"round_{r:04d}.jsonl"
        assert (run / "tasks" / name).read_text() == (straight / "tasks" / name).read_text()
