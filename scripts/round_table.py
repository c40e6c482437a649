"""Per-round figures of one or more runs (seeds of one arm) as a markdown table: each metric's mean over
the runs, and a last row over every round of every run.

    python scripts/round_table.py RUN [RUN ...] [--metrics name ...] [--rounds 1 12]

A round's value of a metric is the dashboard's (``curriculum.dashboard.data.per_round``): the mean over
the round's steps for challenger/* and solver/*, the last value for the rest (curriculum/label_accuracy
is then over all the round's checks). A metric a run did not log in a round (eval between
``eval.every`` rounds) is left out of that round's mean; "-" where no run has it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["challenger/valid_fraction", "curriculum/valid_fraction", "curriculum/label_accuracy",
           "curriculum/label_checks", "curriculum/accepted_fraction", "curriculum/accepted_level_mean",
           "challenger/solve_rate_mean", "solver/no_signal_fraction", "eval/accuracy", "time/round_s",
           "time/propose_s", "time/probe_s", "time/solve_s", "time/challenger_update_s", "time/solver_update_s",
           "time/eval_s"]


def mean(values: list[float]) -> str:
    return f"{sum(values) / len(values):.3g}" if values else "-"


def table(runs: list[Path], metrics: list[str], first: int, last: int) -> str:
    sys.path.insert(0, str(ROOT))
    from curriculum.dashboard.data import per_round

    rows = [per_round(run / "metrics.jsonl") for run in runs]
    rounds = [r for r in sorted({r for rs in rows for r in rs}) if first <= r <= last]
    out = [f"| round | {' | '.join(metrics)} |", "|---" * (len(metrics) + 1) + "|"]
    for r in rounds:
        cells = [mean([rs[r][m] for rs in rows if m in rs.get(r, {})]) for m in metrics]
        out.append(f"| {r} | " + " | ".join(cells) + " |")
    every = [mean([rs[r][m] for rs in rows for r in rounds if m in rs.get(r, {})]) for m in metrics]
    return "\n".join(out + [f"| rounds {rounds[0]}-{rounds[-1]}, {len(runs)} run(s) | " + " | ".join(every) + " |"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--metrics", nargs="+", default=DEFAULT)
    ap.add_argument("--rounds", nargs=2, type=int, default=[0, 1 << 30], metavar=("FIRST", "LAST"))
    args = ap.parse_args()
    missing = [str(r) for r in args.runs if not (r / "metrics.jsonl").is_file()]
    if missing:
        sys.exit(f"round_table: no metrics.jsonl in {', '.join(missing)}")
    print(table(args.runs, args.metrics, *args.rounds))


if __name__ == "__main__":
    main()
