"""Four ways to pick the solver's tasks, compared on paired seeds: at equal solver updates and at
equal generated tokens.

    python scripts/compare_curriculum.py [--config configs/ladder_cpu.yaml] [--seeds 0 1 2 3 4]
        [--modes uniform uniform_filtered adaptive selfplay] [--out runs/compare] [--jobs 2]
        [--equal-tokens [extend|lower]] [key=value ...]

Each (mode, seed) is a real `selfplay train` run in OUT/<mode>_seed<seed> (`curriculum.mode`
set, everything else from the config). Every arm makes the same number of solver updates
(train.rounds x solver.steps). With --equal-tokens, each arm that generated fewer tokens than
self-play (challenger proposals and probes count) is resumed for more rounds until it has
generated at least as many, and its held-out scores are read at self-play's token budget
(linear interpolation between evaluated rounds). `--equal-tokens lower` runs nothing more: each
arm is paired with self-play at the smaller of their two budgets at the last round, the costlier
run read where it had spent as many tokens as the cheaper one. Tables: mean and 95% confidence interval
over seeds, and the paired difference of self-play minus each arm (t interval over seeds).
Runs already finished are reused; OUT/compare.html overlays the curves.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scipy import stats as scipy_stats

ROOT = Path(__file__).resolve().parents[1]
MODES = ("uniform", "uniform_filtered", "adaptive", "selfplay")
HEADLINE = ("eval/mean_at_k", "eval/frontier_level", "eval/accuracy")


def run(out: Path, mode: str, seed: int, cmd: list[str], threads: int) -> Path:
    run_dir = out / f"{mode}_seed{seed}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": str(threads)}
    with open(out / f"{mode}_seed{seed}.log", "a") as log:
        subprocess.run([sys.executable, "-m", "curriculum.cli", *cmd], cwd=ROOT, env=env, stdout=log, stderr=log, check=True)
    return run_dir


def train(config: str, out: Path, mode: str, seed: int, overrides: list[str], threads: int, rounds: int) -> Path:
    """Start the run of one arm and seed, or resume it up to ``rounds``; one that got there is reused."""
    run_dir = out / f"{mode}_seed{seed}"
    state = latest_state(run_dir)
    if state is None:
        cmd = ["train", config, f"run.dir={run_dir}", f"run.seed={seed}", f"curriculum.mode={mode}",
               f"run.threads={threads}", "log.progress=false", "wandb.mode=disabled", *overrides,
               f"train.rounds={rounds}"]
        return run(out, mode, seed, cmd, threads)
    if state["round"] >= rounds:
        return run_dir
    cmd = ["train", "--resume", str(run_dir), f"train.rounds={rounds}"]
    return run(out, mode, seed, cmd, threads)


def latest_state(run_dir: Path) -> dict | None:
    latest = run_dir / "checkpoints" / "latest"
    if not latest.exists():
        return None
    return json.loads((run_dir / "checkpoints" / latest.read_text().strip() / "state.json").read_text())


def curve(run_dir: Path) -> list[dict]:
    """Per evaluated round: its eval metrics and the tokens generated so far (both roles)."""
    tokens, evals = {}, {}
    from curriculum.monitor import read_jsonl  # a killed arm may leave a torn last line

    for rec in read_jsonl(run_dir / "metrics.jsonl"):
        t = rec.get("challenger/generated_tokens", 0) + rec.get("solver/generated_tokens", 0)
        if "solver/generated_tokens" in rec or "challenger/generated_tokens" in rec:
            tokens[rec["round"]] = t
        if rec["phase"] == "eval":
            evals[rec["round"]] = {k: v for k, v in rec.items() if k.startswith("eval/")}
    return [{"round": r, "tokens": tokens.get(r, 0), **e} for r, e in sorted(evals.items())]


def at_round(points: list[dict], r: int) -> dict:
    return next(p for p in points if p["round"] == r)


def at_tokens(points: list[dict], budget: float) -> dict:
    """Metrics at ``budget`` generated tokens, linearly interpolated between evaluated rounds."""
    for a, b in zip(points, points[1:]):
        if a["tokens"] <= budget <= b["tokens"]:
            w = 0.0 if b["tokens"] == a["tokens"] else (budget - a["tokens"]) / (b["tokens"] - a["tokens"])
            return {k: a[k] + w * (b[k] - a[k]) for k in a if k in b and isinstance(a[k], (int, float))}
    raise ValueError(f"token budget {budget:.0f} outside the run's range "
                     f"{points[0]['tokens']:.0f}..{points[-1]['tokens']:.0f}")


def ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t confidence interval."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, scipy_stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)


def fmt(values: list[float]) -> str:
    mean, half = ci(values)
    return f"{mean:.3f} ± {half:.3f}"


def table(title: str, results: dict[str, dict[int, dict]], modes: list[str], seeds: list[int]) -> list[str]:
    """Markdown: each headline metric and per-level mean@k per arm, and paired differences vs self-play."""
    metrics = [m for m in HEADLINE if all(m in results[mode][s] for mode in modes for s in seeds)]
    levels = sorted({k for r in results.values() for p in r.values() for k in p if k.startswith("eval/mean_at_k/tier_")},
                    key=lambda k: int(k.rsplit("_", 1)[1]))
    rows = [f"### {title}", "", "| metric | " + " | ".join(modes) + " |", "|---" * (len(modes) + 1) + "|"]
    for m in metrics + levels + ["tokens"]:
        cells = [fmt([results[mode][s][m] for s in seeds]) if all(m in results[mode][s] for s in seeds) else "-"
                 for mode in modes]
        rows.append(f"| {m.replace('eval/mean_at_k/tier_', 'mean@k level ')} | " + " | ".join(cells) + " |")
    if "selfplay" in modes and len(modes) > 1:
        rows += ["", "Paired difference, self-play minus arm (mean ± 95% CI over seeds; > 0 favours self-play):", "",
                 "| metric | " + " | ".join(m for m in modes if m != "selfplay") + " |",
                 "|---" * len(modes) + "|"]
        for m in metrics:
            cells = [fmt([results["selfplay"][s][m] - results[mode][s][m] for s in seeds]) for mode in modes if mode != "selfplay"]
            rows.append(f"| {m} | " + " | ".join(cells) + " |")
    return rows + [""]


def paired_at_lower_budget(curves: dict, results: dict, modes: list[str], seeds: list[int], rounds: int) -> list[str]:
    """Markdown: each arm beside self-play at the same generated tokens, the lower of the two runs' budgets."""
    rows = ["### At equal generated tokens (each arm and self-play at the lower of their budgets)", "",
            "| metric | " + " | ".join(f"{m} | self-play | self-play - {m}" for m in modes if m != "selfplay") + " |",
            "|---" * (1 + 3 * (len(modes) - 1)) + "|"]
    paired = {}
    for mode in modes:
        if mode == "selfplay":
            continue
        for s in seeds:
            budget = min(results[mode][s]["tokens"], results["selfplay"][s]["tokens"])
            paired[mode, s] = (at_tokens(curves[mode, s], budget), at_tokens(curves["selfplay", s], budget), budget)
    metrics = [m for m in HEADLINE if all(m in a and m in b for a, b, _ in paired.values())]
    for m in metrics + ["tokens"]:
        cells = []
        for mode in modes:
            if mode == "selfplay":
                continue
            pick = [paired[mode, s] for s in seeds]
            if m == "tokens":
                cells += [fmt([b for _, _, b in pick])] * 2 + ["-"]
            else:
                cells += [fmt([a[m] for a, _, _ in pick]), fmt([b[m] for _, b, _ in pick]),
                          fmt([b[m] - a[m] for a, b, _ in pick])]
        rows.append(f"| {m} | " + " | ".join(cells) + " |")
    return rows + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/ladder_cpu.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--out", default="runs/compare")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (each gets cores/jobs threads)")
    ap.add_argument("--equal-tokens", nargs="?", const="extend", choices=("extend", "lower"),
                    help="also compare at equal generated tokens: extend cheaper arms to self-play's budget, "
                         "or pair each arm with self-play at the lower of their budgets (no more runs)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 2) // args.jobs)
    jobs = [(m, s) for s in args.seeds for m in args.modes]

    def parallel(fn):
        with ThreadPoolExecutor(args.jobs) as pool:
            return list(pool.map(fn, jobs))

    sys.path.insert(0, str(ROOT))
    from curriculum.config import load_config

    rounds = load_config(args.config, args.overrides).train.rounds
    dirs = dict(zip(jobs, parallel(lambda ms: train(args.config, out, *ms, args.overrides, threads, rounds))))
    results = {m: {s: {**at_round(curve(dirs[(m, s)]), rounds)} for s in args.seeds} for m in args.modes}
    lines = [f"Command: python scripts/compare_curriculum.py {' '.join(sys.argv[1:])}", "",
             f"Seeds {args.seeds}; every arm {rounds} rounds of the same solver updates.", ""]
    lines += table(f"At equal solver updates (round {rounds})", results, args.modes, args.seeds)
    if args.equal_tokens == "lower" and "selfplay" in args.modes:
        upto = {k: [p for p in curve(d) if p["round"] <= rounds] for k, d in dirs.items()}
        lines += paired_at_lower_budget(upto, results, args.modes, args.seeds, rounds)
    if args.equal_tokens == "extend" and "selfplay" in args.modes:
        budget = {s: results["selfplay"][s]["tokens"] for s in args.seeds}

        def extend(ms):
            mode, seed = ms
            per_round = results[mode][seed]["tokens"] / rounds
            need = rounds if mode == "selfplay" else max(rounds, math.ceil(budget[seed] / max(per_round, 1.0)) + 1)
            return train(args.config, out, mode, seed, args.overrides, threads, rounds=need)

        parallel(extend)
        at_budget = {m: {s: {**at_tokens(curve(dirs[(m, s)]), budget[s]), "tokens": budget[s]} for s in args.seeds}
                     for m in args.modes}
        lines += table("At equal generated tokens (self-play's budget per seed)", at_budget, args.modes, args.seeds)
    report = "\n".join(lines)
    print(report)
    (out / "compare.md").write_text(report + "\n")
    from curriculum import dashboard

    print(f"curves of every run: {dashboard.write(list(dirs.values()), out / 'compare.html')}")


if __name__ == "__main__":
    main()
