"""Self-play vs the uniform baseline: same solver updates, 3 seeds, held-out accuracy per tier.

    python scripts/compare_curriculum.py [--config configs/demo_cpu.yaml] [--seeds 0 1 2]
                                         [--out runs/compare] [--jobs 2] [key=value ...]

Each (mode, seed) is a real `selfplay train` run in its own directory; the table is read
from their metrics.jsonl (final round vs round 0), and OUT/compare.html overlays their
curves. Runs already finished are reused.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("selfplay", "uniform")


def run_one(config: str, out: Path, mode: str, seed: int, overrides: list[str], threads: int) -> Path:
    run_dir = out / f"{mode}_seed{seed}"
    status = run_dir / "checkpoints" / "latest"
    if status.exists():
        state = json.loads((run_dir / "checkpoints" / status.read_text().strip() / "state.json").read_text())
        if state.get("finished"):
            return run_dir
        cmd = ["train", "--resume", str(run_dir)]
    else:
        cmd = ["train", config, f"run.dir={run_dir}", f"run.seed={seed}", f"curriculum.mode={mode}",
               f"run.threads={threads}", "log.progress=false", "wandb.mode=disabled", *overrides]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = open(out / f"{mode}_seed{seed}.log", "w")
    subprocess.run([sys.executable, "-m", "curriculum.cli", *cmd], cwd=ROOT, env=env, stdout=log, stderr=log, check=True)
    return run_dir


def evals(run_dir: Path) -> dict[int, dict[str, float]]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["phase"] == "eval":
            out[rec["round"]] = {k: v for k, v in rec.items() if k.startswith("eval/accuracy")}
    return out


def fmt(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}" if values else "-"
    return f"{statistics.mean(values):.3f}±{statistics.stdev(values):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/demo_cpu.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/compare")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (each gets cores/jobs threads)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 2) // args.jobs)
    jobs = [(m, s) for s in args.seeds for m in MODES]
    with ThreadPoolExecutor(args.jobs) as pool:
        dirs = list(pool.map(lambda ms: run_one(args.config, out, ms[0], ms[1], args.overrides, threads), jobs))
    results = {ms: evals(d) for ms, d in zip(jobs, dirs)}
    keys = sorted({k for r in results.values() for e in r.values() for k in e},
                  key=lambda k: (k != "eval/accuracy", len(k), k))
    print(f"held-out accuracy, mean±std over seeds {args.seeds} (round 0 = after warm-up, before RL)")
    print(f"{'metric':<24}" + "".join(f"{m + ' r0':>16}{m + ' final':>18}" for m in MODES))
    for k in keys:
        row = f"{k.replace('eval/accuracy', 'acc'):<24}"
        for m in MODES:
            first = [results[(m, s)][0][k] for s in args.seeds]
            last = [results[(m, s)][max(results[(m, s)])][k] for s in args.seeds]
            row += f"{fmt(first):>16}{fmt(last):>18}"
        print(row)
    sys.path.insert(0, str(ROOT))
    from curriculum import dashboard

    print(f"curves of every run: {dashboard.write(dirs, out / 'compare.html')}")


if __name__ == "__main__":
    main()
