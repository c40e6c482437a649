"""Metrics: a JSONL log always, wandb when enabled, and a null twin for other ranks."""
from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path


class Monitor:
    """Writes ``metrics.jsonl`` (one object per line with ``round`` and ``phase``) and wandb.

    wandb runs offline unless ``mode="online"``; its run id is kept by the caller
    in the checkpoint so a resumed run continues the same wandb run.
    """

    def __init__(self, run_dir: Path, *, config: dict, wandb_mode: str = "offline", project: str = "selfplay",
                 entity: str = "", name: str = "", wandb_id: str | None = None, keep_lines: int | None = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        if keep_lines is not None:
            _truncate_lines(self.path, keep_lines)
        self.lines = _count_lines(self.path)
        self._file = open(self.path, "a", encoding="utf-8")
        self.wandb = None
        self.wandb_id = wandb_id
        if wandb_mode != "disabled":
            self._init_wandb(run_dir, config, wandb_mode, project, entity, name)

    def _init_wandb(self, run_dir, config, mode, project, entity, name):
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.wandb_id = self.wandb_id or secrets.token_hex(4)  # stored in checkpoints so resume continues it
        self.wandb = wandb.init(
            project=project, entity=entity or None, name=name or Path(run_dir).name, id=self.wandb_id,
            resume="allow", mode=mode, dir=str(run_dir), config=config,
            settings=wandb.Settings(console="off", silent=True),
        )
        self.wandb.define_metric("round")
        self.wandb.define_metric("*", step_metric="round")

    def log(self, metrics: dict, *, round: int, phase: str) -> None:
        record = {"round": round, "phase": phase, "time": time.time(), **metrics}
        self._file.write(json.dumps(record, sort_keys=False) + "\n")
        self._file.flush()
        self.lines += 1
        if self.wandb is not None:
            self.wandb.log({"round": round, **{k: v for k, v in metrics.items() if isinstance(v, (int, float))}})

    def table(self, name: str, columns: list[str], rows: list[list], *, round: int) -> None:
        if self.wandb is not None and rows:
            import wandb

            self.wandb.log({"round": round, name: wandb.Table(columns=columns, data=rows)})

    def flush(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None


class NullMonitor:
    """Same methods, does nothing: ranks other than 0 log through this."""

    lines = 0
    wandb_id = None

    def log(self, *a, **k):
        pass

    def table(self, *a, **k):
        pass

    def flush(self):
        pass

    def close(self):
        pass


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _truncate_lines(path: Path, keep: int) -> None:
    """Keep the first ``keep`` complete lines (a resumed run re-logs what came after)."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        lines = f.readlines()
    kept = [ln for ln in lines[:keep] if ln.endswith(b"\n")]
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "wb") as f:
        f.writelines(kept)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
