"""OpenMP's wait policy and a CPU training round, on an idle machine and beside a CPU hog.

    python scripts/bench_threads.py [--hogs 1] [--repeats 1] [key=value ...]

Runs the same one-round CPU training (configs/demo_cpu.yaml, train.rounds=1, the warm-up
cache filled first by an untimed run; key=value arguments are further overrides) two ways:

  torch default   torch imported before the CLI sets OMP_WAIT_POLICY, i.e. the behaviour before
                  `selfplay` defaulted it: libgomp spins between parallel regions
  PASSIVE         plain `selfplay train` with OMP_WAIT_POLICY unset: the CLI sets PASSIVE

each once with the machine as it is and once beside `--hogs` processes running
`python -c "while True: pass"`, and prints the round's seconds (time/round_s of
metrics.jsonl) and the ratios side by side, with the load average before each column (on a
shared machine "as is" is not idle).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The CLI, with torch loaded first: libgomp reads OMP_WAIT_POLICY when torch loads it, so the
# CLI's default comes too late and torch's own (busy-waiting) policy applies.
TORCH_FIRST = "import sys, torch; from curriculum.cli import main; sys.exit(main(sys.argv[1:]))"
POLICIES = {"torch default": [sys.executable, "-c", TORCH_FIRST], "PASSIVE": [sys.executable, "-m", "curriculum.cli"]}
# The demo's model and batches, but one round and a quiet log.
OVERRIDES = ["train.rounds=1", "wandb.mode=disabled", "log.progress=false", "log.dashboard=false"]


def train_round(command: list[str], work: Path, extra: list[str], timeout: float) -> float:
    """Seconds of round 1 of a fresh run (inf if it ran past ``timeout``)."""
    run = Path(tempfile.mkdtemp(dir=work, prefix="run-"))
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(PYTHONPATH=str(ROOT), WANDB_SILENT="true")
    args = ["train", "configs/demo_cpu.yaml", *OVERRIDES, f"model.warmup.cache_dir={work / 'cache'}",
            f"run.dir={run / 'run'}", *extra]
    try:
        subprocess.run([*command, *args], cwd=ROOT, env=env, check=True, timeout=timeout, capture_output=True)
    except subprocess.TimeoutExpired:
        return float("inf")
    records = [json.loads(line) for line in (run / "run" / "metrics.jsonl").read_text().splitlines()]
    return next(r["time/round_s"] for r in records if r["round"] == 1 and r["phase"] == "round")


def measure(work: Path, extra: list[str], hogs: int, repeats: int, timeout: float) -> dict[str, float]:
    """Median seconds per round for each policy, beside ``hogs`` busy processes; and the
    machine's load average (1 min) before the hogs started."""
    load = os.getloadavg()[0]
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        time.sleep(1.0 if hogs else 0.0)  # let the hogs reach full speed
        times: dict[str, list[float]] = {name: [] for name in POLICIES}
        for _ in range(repeats):  # interleaved, so a change in the machine's load hits both alike
            for name, command in POLICIES.items():
                times[name].append(train_round(command, work, extra, timeout))
        return {**{name: statistics.median(t) for name, t in times.items()}, "load": load}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def report(idle: dict[str, float], loaded: dict[str, float], hogs: int) -> str:
    rows = [f"{'s/round':<24}{'as is':>8}{f'+{hogs} hog':>10}{'ratio':>8}"]
    for name in POLICIES:
        rows.append(f"{name:<24}{idle[name]:>8.1f}{loaded[name]:>10.1f}{loaded[name] / idle[name]:>7.1f}x")
    a, b = POLICIES
    rows.append(f"{a + ' / ' + b:<24}{idle[a] / idle[b]:>7.1f}x{loaded[a] / loaded[b]:>9.1f}x")
    rows.append(f"{'load average before':<24}{idle['load']:>8.2f}{loaded['load']:>10.2f}")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="more config overrides")
    p.add_argument("--hogs", type=int, default=1, help="busy processes beside the loaded runs (default 1)")
    p.add_argument("--repeats", type=int, default=1, help="runs per cell; the median is shown (default 1)")
    p.add_argument("--timeout", type=float, default=900, help="seconds before a run counts as inf (default 900)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp:
        work = Path(tmp)
        print(f"warm-up (untimed, fills the cache); {os.cpu_count()} CPUs", flush=True)
        train_round(POLICIES["PASSIVE"], work, args.overrides, args.timeout)
        idle = measure(work, args.overrides, 0, args.repeats, args.timeout)
        loaded = measure(work, args.overrides, args.hogs, args.repeats, args.timeout)
    print(report(idle, loaded, args.hogs))


if __name__ == "__main__":
    main()
