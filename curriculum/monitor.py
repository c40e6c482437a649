"""Metrics: a JSONL log always, wandb when enabled, and a null twin for other ranks."""
from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import time
from collections import defaultdict
from pathlib import Path

from curriculum import metrics as M

log = logging.getLogger(__name__)

# The per-round console line: (metric, format) in print order; absent metrics are left out.
SUMMARY = [
    (M.ACCURACY, "acc {:.3f}"), (M.MEAN_AT_K, "mean@k {:.3f}"), (M.FRONTIER, "frontier L{:.0f}"),
    (M.CHALLENGER_VALID, "valid {:.2f}"), (M.ACCEPTED, "accepted {:.0f}"), (M.ACCEPTED_LEVEL, "at level {:.2f}"),
    (M.POOL_SIZE, "pool {:.0f}"), (M.LABEL_ACCURACY, "label acc {:.2f}"),
    (M.SOLVER_REWARD, "solver reward {:.3f}"), (M.NO_SIGNAL, "no-signal {:.2f}"),
    ("tokens", "tokens {}"), (M.ROUND_S, "{:.1f} s"),  # tokens: both roles' generated tokens, summed here
]
_AVERAGED = tuple(M.of_role(role, "") for role in M.ROLES)  # logged every step: the round's mean; else its last
_TOKENS = tuple(M.of_role(role, M.GENERATED_TOKENS) for role in M.ROLES)  # cumulative: their last value


def summary_line(r: int, rounds: int, values: dict[str, list[float]]) -> str:
    """``round 3/8 | acc 0.412 | ...`` from one round's logged values (see ``SUMMARY``)."""
    agg = {k: (sum(v) / len(v) if k.startswith(_AVERAGED) and k not in _TOKENS else v[-1])
           for k, v in values.items() if v}
    tokens = sum(agg.get(k, 0) for k in _TOKENS)
    if tokens:
        agg["tokens"] = f"{tokens / 1e6:.2f}M" if tokens >= 1e5 else f"{tokens / 1e3:.1f}k"
    parts = [f"round {r}/{rounds}"] + [fmt.format(agg[k]) for k, fmt in SUMMARY if k in agg]
    return " | ".join(parts)


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
        self._round_values: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.wandb = None
        self.wandb_id = wandb_id
        self.wandb_mode = wandb_mode
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
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self._round_values[round][k].append(v)
        if self.wandb is not None:
            self.wandb.log({"round": round, **{k: v for k, v in metrics.items() if isinstance(v, (int, float))}})

    def summary(self, round: int, rounds: int) -> str:
        """One line on what round ``round`` did (then forgets it)."""
        return summary_line(round, rounds, self._round_values.pop(round, {}))

    def alert(self, title: str, text: str) -> None:
        """A wandb alert (an e-mail or Slack message) in online mode; a failure to send is logged, never fatal."""
        if self.wandb is None or self.wandb_mode != "online":
            return
        try:
            self.wandb.alert(title=title, text=text[:1000])
        except Exception as exc:  # noqa: BLE001 - the alarm is already in the log and the metrics
            logging.getLogger("selfplay").warning("wandb.alert failed: %s", exc)

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

    def alert(self, *a, **k):
        pass

    def summary(self, *a, **k) -> str:
        return ""

    def flush(self):
        pass

    def close(self):
        pass


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _is_record(line: bytes) -> bool:
    try:
        return line.endswith(b"\n") and isinstance(json.loads(line.decode("utf-8")), dict)
    except ValueError:  # UnicodeDecodeError, JSONDecodeError
        return False


def _truncate_lines(path: Path, keep: int) -> None:
    """Keep the first ``keep`` complete lines (a resumed run re-logs what came after). Lines of
    those ``keep`` that are missing or garbage are named in a warning, the damaged file kept
    beside as ``metrics.jsonl.damaged-<time>``: nothing is lost without a word."""
    lines = []
    if path.exists():
        with open(path, "rb") as f:
            lines = f.readlines()
    ok = [_is_record(ln) for ln in lines[:keep]]
    bad = [i + 1 for i, good in enumerate(ok) if not good]
    kept = [ln for ln, good in zip(lines, ok) if good]
    if len(kept) < keep:
        copy = ""
        if path.exists():
            aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
            shutil.copy2(path, aside)
            copy = f"; the file as it was is kept as {aside}"
        log.warning("%s holds %d of the %d lines the checkpoint logged (%s)%s; the resume goes on from the %d intact "
                    "lines", path, len(kept), keep,
                    "missing" if not path.exists() else
                    f"{max(0, keep - len(lines))} missing at the end, garbage at lines {bad[:10]}", copy, len(kept))
    if not path.exists():
        return
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "wb") as f:
        f.writelines(kept)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file. A garbage line is skipped with one warning naming the file
    and the lines; a torn last line (a writer still at it, or killed) is skipped without one."""
    if not path.is_file():
        return []
    lines = path.read_bytes().split(b"\n")
    out, bad = [], []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError, JSONDecodeError
            rec = None
        if isinstance(rec, dict):
            out.append(rec)
        elif i < len(lines) - 1:  # the last element has no newline after it: torn, not garbage
            bad.append(i + 1)
    if bad:
        log.warning("%s: skipped %d line(s) that are not JSON records: lines %s", path, len(bad), bad[:10])
    return out
