"""Print a run's curriculum at a glance: one row per round from metrics.jsonl.

    python scripts/summarize_run.py runs/demo
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from curriculum.dashboard import columns, per_round, tiers  # noqa: E402
from curriculum.rundir import RunDir  # noqa: E402


def main(run_dir: str) -> None:
    rows = per_round(RunDir(run_dir).metrics)
    cols = columns(rows) + [(t, t.replace("eval/accuracy/", "")) for t in tiers(rows)]
    print(" | ".join(f"{h:>9}" for h in ["round"] + [name for _, name in cols]))
    for r, m in rows.items():
        print(" | ".join([f"{r:>9}"] + [f"{m[k]:>9.3f}" if k in m else f"{'':>9}" for k, _ in cols]))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/demo")
