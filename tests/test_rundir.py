"""One owner per run directory: the trainer's lock, read-only readers, resumes that cannot break a run.
The lock's other holder is a real process; the CLI runs in this process."""
import os
import signal
import socket
import subprocess
import sys
import textwrap

from pathlib import Path

import pytest

from curriculum.rundir import RunDir, RunLock, RunLocked, lock_holder, run_status
from tests.cli_runner import in_process
from tests.conftest import TINY_OVERRIDES

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}


def hold_lock(run: Path) -> subprocess.Popen:
    """Another process that holds the run's lock until killed."""
    code = textwrap.dedent(f"""
        import sys, time
        from curriculum.rundir import RunDir, RunLock
        RunLock(RunDir({str(run)!r})).acquire()
        print("held", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def selfplay(*args):
    return in_process(*args, check=False)


def test_a_second_holder_is_refused_with_pid_and_host_until_the_first_dies(tmp_path):
    run = RunDir(tmp_path / "run")
    proc = hold_lock(run.path)
    try:
        with pytest.raises(RunLocked, match=f"in use by pid {proc.pid} on {socket.gethostname()}"):
            RunLock(run).acquire()
        assert lock_holder(run)["pid"] == proc.pid
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert lock_holder(run) is None  # the kernel dropped it with the process
    with RunLock(run):
        assert lock_holder(run)["pid"] == os.getpid()
    assert lock_holder(run) is None


def test_status_reads_without_writing(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("train:\n  rounds: 4\n")
    before = sorted(p.name for p in run.rglob("*"))
    assert run_status(run) == {"run": str(run), "rounds": 4, "round": 0, "checkpoint": None, "finished": False,
                               "state": "new", "alarms": []}
    (run / "config.yaml").write_text("train: [")
    assert run_status(run)["state"] == "invalid"
    assert sorted(p.name for p in run.rglob("*")) == before


@pytest.mark.slow
def test_a_live_run_refuses_train_and_resume_and_keeps_its_files(tmp_path, warmup_cache_override):
    run = tmp_path / "run"
    common = [*TINY_OVERRIDES, warmup_cache_override, "train.rounds=1"]
    assert selfplay("train", "configs/demo_cpu.yaml", *common, f"run.dir={run}").returncode == 0
    files = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"}
    proc = hold_lock(run)
    try:
        for args in (["train", "--resume", run, "train.rounds=2"], ["train", "configs/demo_cpu.yaml", *common, f"run.dir={run}"]):
            out = selfplay(*args)
            assert out.returncode == 2 and "Traceback" not in out.stderr
            assert f"is in use by pid {proc.pid}" in out.stderr
        assert run_status(run)["state"] == "running"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert {p: p.read_bytes() for p in files} == files  # config.yaml not rewritten, metrics untouched
    assert run_status(run)["state"] == "finished"


@pytest.mark.slow
def test_resume_refuses_an_edited_config_and_a_failed_start_begins_afresh(tmp_path, warmup_cache_override):
    run = tmp_path / "run"
    common = [*TINY_OVERRIDES, warmup_cache_override, "train.rounds=1"]
    assert selfplay("train", "configs/demo_cpu.yaml", *common, f"run.dir={run}").returncode == 0
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("group_size: 4", "group_size: 6"))
    out = selfplay("train", "--resume", run, "train.rounds=2")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "challenger.group_size" in out.stderr and "solver.group_size" in out.stderr

    # A run that died before its first checkpoint: the same command starts it afresh.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "config.yaml").write_text("train:\n  rounds: 1\n")
    (fresh / "metrics.jsonl").write_text('{"round": 0, "phase": "eval", "stale": 1}\n')
    assert selfplay("train", "configs/demo_cpu.yaml", *common, f"run.dir={fresh}").returncode == 0
    assert "stale" not in (fresh / "metrics.jsonl").read_text()
    # ... and once it holds a checkpoint, a second `train` is refused.
    again = selfplay("train", "configs/demo_cpu.yaml", *common, f"run.dir={fresh}")
    assert again.returncode == 2 and "already holds a run" in again.stderr
    assert selfplay("train", "--resume", fresh, "train.rounds=2").returncode == 0
