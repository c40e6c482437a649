"""Reading a run's files for the dashboard: ``metrics.jsonl`` into one row per round, task logs
into per-round digests, the saved config into one line."""
from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import yaml

from curriculum import metrics as M
from curriculum.monitor import read_jsonl
from curriculum.rundir import RunDir

log = logging.getLogger(__name__)

#: Cumulative counters, whose round value is their last; x axis of "accuracy against tokens".
TOKENS = tuple(M.of_role(role, M.GENERATED_TOKENS) for role in M.ROLES)
PROPOSALS_PER_ROUND = 30
#: Logged every step: the round's mean; the rest: its last value.
_AVERAGED = tuple(M.of_role(role, "") for role in M.ROLES)
#: A mean over the round's accepted tasks is undefined (logged as 0) when none was accepted.
_UNDEFINED_WHEN_ZERO = {M.ACCEPTED_LEVEL: M.ACCEPTED}


def per_round(path: Path) -> dict[int, dict[str, float]]:
    """One value per metric per round: the mean over the round's steps for challenger/* and
    solver/*, the last value for the rest (and for the cumulative token counters). Lines that
    are not a record (a torn last line from a killed writer) are skipped.

    Cached per file: the trainer calls this every round (health check, page), so a file that
    only grew is read from where the last call stopped; one cut back or rewritten is read anew."""
    try:
        st = path.stat()
    except FileNotFoundError:
        _METRICS.pop(str(path), None)
        return {}
    reader = _METRICS.get(str(path))
    if reader is None or not reader.update(path, st):
        reader = _METRICS[str(path)] = _MetricsReader((st.st_dev, st.st_ino))
        reader.update(path, st)
    return {r: dict(m) for r, m in reader.rows.items()}


class _MetricsReader:
    """What ``per_round`` has read of one metrics file: its first ``offset`` bytes."""

    SEAM = 64  # bytes before ``offset`` compared on each read: a file rewritten under us is not appended to

    def __init__(self, ident: tuple[int, int]):
        self.ident, self.stamp = ident, None
        self.offset, self.newlines, self.seam = 0, 0, b""
        self.values: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.rows: dict[int, dict[str, float]] = {}

    def update(self, path: Path, st) -> bool:
        """Take in what was appended since the last read; False if the file changed otherwise."""
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self.stamp:
            return True
        if (st.st_dev, st.st_ino) != self.ident or (self.stamp is not None and st.st_size <= self.offset):
            return False
        with open(path, "rb") as f:
            f.seek(self.offset - len(self.seam))
            data = f.read()
        if not data.startswith(self.seam):
            return False
        data = data[len(self.seam):]
        # Up to the last newline; a last line without one waits for it unless it is already a whole record.
        end = data.rfind(b"\n") + 1
        if data[end:].strip() and _record(data[end:]) is not None:
            end = len(data)
        self._take(path, data[:end])
        self.offset += end
        self.newlines += data[:end].count(b"\n")
        self.seam = (self.seam + data[:end])[-self.SEAM:]
        self.stamp = stamp
        return True

    def _take(self, path: Path, chunk: bytes) -> None:
        touched, bad = set(), []
        for i, line in enumerate(chunk.split(b"\n")):
            if not line.strip():
                continue
            rec = _record(line)
            if rec is None:
                bad.append(self.newlines + i + 1)
            elif isinstance(rec.get("round"), int):
                touched.add(rec["round"])
                for k, v in rec.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("round", "time"):
                        self.values[rec["round"]][k].append(float(v))
        if bad:
            log.warning("%s: skipped %d line(s) that are not JSON records: lines %s", path, len(bad), bad[:10])
        for r in touched:
            self.rows[r] = _aggregate(self.values[r])
        if list(self.rows) != sorted(self.rows):
            self.rows = dict(sorted(self.rows.items()))


def _record(line: bytes) -> dict | None:
    try:
        rec = json.loads(line.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError, JSONDecodeError
        return None
    return rec if isinstance(rec, dict) else None


def _aggregate(values: dict[str, list[float]]) -> dict[str, float]:
    return {k: sum(v) / len(v) if k.startswith(_AVERAGED) and k not in TOKENS else v[-1] for k, v in values.items()}


_METRICS: dict[str, _MetricsReader] = {}


def tiers(rows: dict[int, dict[str, float]], metric: str = M.ACCURACY) -> list[str]:
    """``METRIC/tier_L`` keys logged in ``rows``, by level."""
    found = {k for m in rows.values() for k in m if M.level_of(k, metric) is not None}
    return sorted(found, key=tier_level)


def types(rows: dict[int, dict[str, float]], metric: str) -> dict[str, str]:
    """Task type -> its ``METRIC/type_K`` key, for the types logged in ``rows``, by name."""
    found = {kind: k for m in rows.values() for k in m if (kind := M.type_of(k, metric)) is not None}
    return dict(sorted(found.items()))


def tier_level(key: str) -> int:
    return int(key.rsplit("_", 1)[1])


def series(rows: dict[int, dict[str, float]], metric: str) -> list[tuple[float, float]]:
    """(round, value) of ``metric``, leaving out rounds where it is undefined."""
    count = _UNDEFINED_WHEN_ZERO.get(metric)
    return [(r, m[metric]) for r, m in rows.items() if metric in m and not (count and m.get(count) == 0)]


def band(rows: dict[int, dict[str, float]], prefix: str) -> list[tuple[float, float, float, float]]:
    """(round, p10, p50, p90) of a metric logged as quantiles."""
    keys = [M.quantile(prefix, q) for q in ("p10", "p50", "p90")]
    return [(r, *(m[k] for k in keys)) for r, m in rows.items() if all(k in m for k in keys)]


def token_series(rows: dict[int, dict[str, float]], metric: str) -> list[tuple[float, float]]:
    """(tokens generated by both roles so far, value of ``metric``) for the rounds that logged
    ``metric`` and a token count."""
    out = []
    for m in rows.values():
        counts = [m[k] for k in TOKENS if k in m]
        if counts and metric in m:
            out.append((sum(counts), m[metric]))
    return out


def load_records(path: Path) -> list[dict]:
    """One round's task records; lines that are not a record are skipped."""
    return read_jsonl(path)


@dataclass(frozen=True)
class RoundDigest:
    """What the page shows of one round's task log."""

    proposals: int  # records in the file
    levels: Counter  # accepted tasks per level
    shown: list[dict]  # the sample of proposals listed
    pool: int  # how many the sample was drawn from


_DIGESTS: dict[str, tuple[tuple, RoundDigest]] = {}


def round_digest(path: Path, limit: int = PROPOSALS_PER_ROUND) -> RoundDigest:
    """The digest of one round's file. Cached by the file's identity: a page rebuilt every
    round re-reads only the files that changed, not the whole run."""
    st = path.stat()
    key = (st.st_mtime_ns, st.st_size, limit)
    cached = _DIGESTS.get(str(path))
    if cached is None or cached[0] != key:
        recs = load_records(path)
        levels = Counter(rec["task"]["level"] for rec in recs if rec.get("accepted")
                         and isinstance(rec.get("task"), dict) and "level" in rec["task"])
        # The fill phase has the verdicts; the challenger's update steps only when there is no fill.
        pool = [rec for rec in recs if rec.get("phase") == "fill"] or recs
        accepted = [rec for rec in pool if rec.get("accepted")][: limit // 2]
        shown = accepted + [rec for rec in pool if not rec.get("accepted")][: limit - len(accepted)]
        cached = _DIGESTS[str(path)] = (key, RoundDigest(len(recs), levels, shown, len(pool)))
    return cached[1]


def run_line(rd: RunDir) -> str:
    """Environment and curriculum mode from the saved config, if readable."""
    try:
        cfg = yaml.safe_load(rd.config.read_text())
        env, mode = cfg["env"], cfg["curriculum"]["mode"]
        levels = (env.get("kwargs") or {}).get("num_levels")
        return f"env {env['name']}" + (f" ({levels} levels)" if levels else "") + f", curriculum {mode}"
    except (OSError, TypeError, KeyError, AttributeError, yaml.YAMLError):
        return ""
