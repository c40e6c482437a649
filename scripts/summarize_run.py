"""Print a run's curriculum at a glance: one row per round from metrics.jsonl.

    python scripts/summarize_run.py runs/demo
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

COLUMNS = [
    ("eval/accuracy", "eval acc"),
    ("challenger/valid_fraction", "valid"),
    ("challenger/reward_mean", "ch reward"),
    ("curriculum/accepted", "accepted"),
    ("curriculum/accepted_level_mean", "acc level"),
    ("curriculum/accepted_difficulty_mean", "acc diff"),
    ("curriculum/pool_size", "pool"),
    ("solver/reward_mean", "sv reward"),
]


def per_round(path: Path) -> dict[int, dict[str, float]]:
    """Last value of each metric per round, except challenger/* which are averaged over steps."""
    sums: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        for k, v in rec.items():
            if isinstance(v, (int, float)) and k not in ("round", "time"):
                sums[rec["round"]][k].append(v)
    return {r: {k: (sum(v) / len(v) if k.startswith(("challenger/", "solver/reward")) else v[-1]) for k, v in m.items()}
            for r, m in sorted(sums.items())}


def main(run_dir: str) -> None:
    rows = per_round(Path(run_dir) / "metrics.jsonl")
    tiers = sorted({k for m in rows.values() for k in m if k.startswith("eval/accuracy/tier_")}, key=lambda k: int(k.rsplit("_", 1)[1]))
    header = ["round"] + [name for _, name in COLUMNS] + [t.replace("eval/accuracy/", "") for t in tiers]
    print(" | ".join(f"{h:>9}" for h in header))
    for r, m in rows.items():
        cells = [f"{r:>9}"] + [f"{m[k]:>9.3f}" if k in m else f"{'':>9}" for k, _ in COLUMNS + [(t, t) for t in tiers]]
        print(" | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/demo")
