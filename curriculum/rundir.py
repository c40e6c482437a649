"""The run directory: its layout, the trainer's lock, and the read-only views of it.

    RUN_DIR/
      config.yaml              the resolved config (resumable keys are updated on resume)
      metrics.jsonl            one JSON object per line: round, phase, time and metrics
      tasks/round_NNNN.jsonl   every proposal of a round, with its verdict
      checkpoints/<name>/      complete checkpoints; checkpoints/latest names the newest
      dashboard.html           the local dashboard, rewritten each round
      wandb/                   offline wandb runs
      .lock                    held by the training process (pid and host inside)

Only the process holding the lock writes here. Readers (``status``, ``eval``,
``dashboard``) never write the run's files and never build a trainer.
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from curriculum.checkpoint import CheckpointManager, atomic_write, read_state
from curriculum.errors import ConfigError
from curriculum.monitor import read_jsonl


log = logging.getLogger("selfplay")


class RunLocked(ConfigError):
    """Another live process trains in this run directory."""


@dataclass(frozen=True)
class RunDir:
    """Paths of one run directory; nothing is created until a writer asks for it."""

    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def tasks(self) -> Path:
        return self.path / "tasks"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def dashboard(self) -> Path:
        return self.path / "dashboard.html"

    @property
    def lock_file(self) -> Path:
        return self.path / ".lock"

    def task_file(self, r: int) -> Path:
        return self.tasks / f"round_{r:04d}.jsonl"

    def task_files(self) -> dict[int, Path]:
        """Round -> its task log, for the rounds that have one."""
        if not self.tasks.is_dir():
            return {}
        out = {}
        for p in self.tasks.glob("round_*.jsonl"):
            stem = p.stem.removeprefix("round_")
            if stem.isdigit():
                out[int(stem)] = p
        return dict(sorted(out.items()))

    def is_run(self) -> bool:
        return self.config.is_file()

    def checkpoint_manager(self, keep_last: int = 3) -> CheckpointManager:
        return CheckpointManager(self.checkpoints, keep_last)

    def latest_checkpoint(self) -> Path | None:
        """The newest intact checkpoint, or None (corrupt ones are skipped with a warning)."""
        return self.checkpoint_manager().latest() if self.checkpoints.is_dir() else None

    def has_checkpoints(self) -> bool:
        return bool(self.checkpoints.is_dir() and self.checkpoint_manager().names())


class RunLock:
    """An exclusive ``flock`` on ``RUN_DIR/.lock``, held while a trainer runs.

    The kernel drops it when the process dies (even by SIGKILL), so a stale lock never
    blocks a resume. A second trainer is refused with the holder's pid and host.
    """

    def __init__(self, run_dir: RunDir):
        self.run_dir = run_dir
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        self.run_dir.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.run_dir.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            who = lock_holder(self.run_dir) or {}
            raise RunLocked(f"run directory {self.run_dir.path} is in use by pid {who.get('pid', '?')} on "
                            f"{who.get('host', '?')} (since {who.get('since', '?')}); wait for it to finish "
                            "or stop it (Ctrl-C / SIGTERM checkpoints) before resuming") from None
        info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def claim(rd: RunDir, resume: bool, config_text: str) -> RunLock:
    """Lock the run directory for a trainer and make it ready: ``config_text`` is the run's config.

    A fresh run refuses a directory that holds checkpoints (resume it instead) and clears
    what a run that died before its first checkpoint left; a resume writes back the
    resumable keys it changed, so the next resume, ``status`` and the dashboard follow them.
    """
    lock = RunLock(rd).acquire()
    if not resume and rd.has_checkpoints():
        lock.release()
        raise ConfigError(f"run directory {rd.path} already holds a run; resume it with "
                          f"`selfplay train --resume {rd.path}` or choose another run.dir")
    if not resume:
        rd.metrics.unlink(missing_ok=True)
        rd.tasks.mkdir(parents=True, exist_ok=True)
        atomic_write(rd.config, config_text)
    elif rd.config.read_text() != config_text:
        atomic_write(rd.config, config_text)
        log.info("config.yaml updated with the resumable keys changed on resume")
    return lock


def lock_holder(run_dir: RunDir) -> dict | None:
    """``{"pid", "host", "since"}`` of the live trainer holding the lock, or None if nobody holds it."""
    try:
        fd = os.open(run_dir.lock_file, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            try:
                return json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                return {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def active_alarms(rd: RunDir) -> list[str]:
    """The health alarms on at the last round health was checked (its last ``phase: health`` record)."""
    last = next((rec for rec in reversed(read_jsonl(rd.metrics)) if rec.get("phase") == "health"), {})
    return [k.split("/", 1)[1] for k, v in last.items()
            if k.startswith("health/") and k.count("/") == 1 and k != "health/active" and v == 1]


def run_status(run_dir: Path | RunDir) -> dict:
    """What a run directory holds, read-only: rounds, round reached, newest intact checkpoint, state.

    ``state`` is ``running`` (a live trainer holds the lock), ``finished``, ``stopped``
    (checkpointed, not finished, nobody training: interrupted or crashed), ``new`` (no
    checkpoint yet) or ``invalid`` (with ``error``).
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    out: dict = {"run": str(rd.path)}
    try:
        saved = yaml.safe_load(rd.config.read_text())
        out["rounds"] = int(saved["train"]["rounds"])
    except (OSError, ValueError, TypeError, KeyError, yaml.YAMLError) as exc:
        out.update(state="invalid", error=f"no readable config.yaml ({type(exc).__name__}: {exc})")
        return out
    holder = lock_holder(rd)
    latest = rd.latest_checkpoint()
    state = {}
    if latest is not None:
        try:
            state = read_state(latest)
        except (OSError, ValueError) as exc:
            out.update(state="invalid", error=f"unreadable {latest / 'state.json'}: {exc}")
            return out
    out.update(round=int(state.get("round", 0)), checkpoint=str(latest) if latest else None,
               finished=bool(state.get("finished")), alarms=active_alarms(rd))
    if state.get("stop_reason"):
        out["stop_reason"] = state["stop_reason"]
    if holder is not None:
        out.update(state="running", pid=holder.get("pid"), host=holder.get("host"))
    else:
        out["state"] = "finished" if out["finished"] else ("stopped" if latest else "new")
    return out
