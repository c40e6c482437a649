"""Cost of code_triplets' tasks, side by side: the generator evaluated in-process against the same
tasks grounded in the sandbox (why the warm-up's tens of thousands of draws stay in-process), and a
solver answer scored per task type (deduction compares literals; abduction and induction run once).

    python scripts/bench_triplets.py [--tasks 300] [--workers 2]
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from curriculum.envs import make_env  # noqa: E402
from curriculum.envs.code_triplets import KINDS  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    env = make_env("code_triplets", num_levels=4, workers=args.workers)
    env.sandbox.run("print(1)")  # start the pool outside the clock
    rng = random.Random(0)

    t0 = time.perf_counter()
    tasks = [env.sample_task(rng.randint(1, 4), rng) for _ in range(args.tasks)]
    generate_s = time.perf_counter() - t0
    proposals = [(env.format_proposal(t), t.kind) for t in tasks]
    t0 = time.perf_counter()
    grounded = [env.parse_proposal(text, kind=kind) for text, kind in proposals]  # two sandbox runs each
    ground_s = time.perf_counter() - t0
    assert grounded == tasks, "the sandbox disagrees with the generator"

    n = args.tasks
    print(f"{n} tasks, levels 1-4, sandbox workers {args.workers}")
    print(f"  generator, in-process       {generate_s / n * 1e3:8.3f} ms/task")
    print(f"  grounded in the sandbox (2x) {ground_s / n * 1e3:8.3f} ms/task   ratio {ground_s / generate_s:6.1f}x")
    for kind in KINDS:
        mine = [t for t in tasks if t.kind == kind]
        t0 = time.perf_counter()
        scores = [env.score(t, env.format_answer(t)) for t in mine]  # not scored before: not cached
        per = (time.perf_counter() - t0) / max(1, len(mine))
        right = all(s == 1.0 for s in scores)
        print(f"  score a {kind:<9} answer      {per * 1e3:8.3f} ms/answer  (all right: {right})")


if __name__ == "__main__":
    main()
