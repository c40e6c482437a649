#!/usr/bin/env python
"""Executions per second: subprocess per snippet vs multiprocessing vs Sandbox.

Runs the same snippets, with the same parallelism, three ways, side by side:

* ``subprocess``: a fresh ``python -c`` per snippet with the sandbox's limits
  (rlimits, scrubbed env, temp cwd, own session, timeout), the usual way to
  run untrusted code "safely" without a sandbox;
* ``mp-exec``: a ``multiprocessing`` pool whose workers ``exec`` the code
  in-process (fast, isolates nothing: the "not secure" baseline);
* ``sandbox``: :class:`solver.sandbox.Sandbox` with every isolation layer the
  host allows.

Usage::

    python scripts/bench_sandbox.py                 # one slot per CPU
    python scripts/bench_sandbox.py --workers 4 --n 400 --rounds 5
    python scripts/bench_sandbox.py --import-torch  # parent like the trainer

Rates are executions per second (wall clock, all slots busy); "cpu" is the
CPU time of every process involved per snippet, which a busy neighbour on the
host disturbs much less than the rates.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from solver.sandbox import Sandbox  # noqa: E402

MEMORY_MB, FILE_MB, OPEN_FILES = 512, 16, 256

# Small programs of the kind RL environments grade: (code, stdin).
REALISTIC = [
    ("n = 2000\nsieve = [True] * n\nfor i in range(2, int(n ** .5) + 1):\n"
     "    if sieve[i]:\n        sieve[i*i::i] = [False] * len(sieve[i*i::i])\n"
     "print(sum(i for i in range(2, n) if sieve[i]))\n", None),
    ("import sys\nnums = list(map(int, sys.stdin.read().split()))\n"
     "print(sum(nums), max(nums), sorted(nums)[len(nums) // 2])\n",
     " ".join(str((i * 7919) % 1000) for i in range(300))),
    ("def lcs(a, b):\n    dp = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]\n"
     "    for i, x in enumerate(a):\n        for j, y in enumerate(b):\n"
     "            dp[i+1][j+1] = dp[i][j] + 1 if x == y else max(dp[i][j+1], dp[i+1][j])\n"
     "    return dp[-1][-1]\nprint(lcs('AGGTABQWERTYXYZ' * 3, 'GXTXAYBQWYTRXZ' * 3))\n", None),
    ("from collections import Counter\nimport re\n"
     "text = 'the quick brown fox jumps over the lazy dog ' * 40\n"
     "words = re.findall(r'[a-z]+', text)\nprint(Counter(words).most_common(3))\n", None),
    ("import json\nfrom typing import List\n"
     "def solve(xs: List[int]) -> List[int]:\n    return [x * x for x in xs if x % 3]\n"
     "data = json.loads(input())\nprint(json.dumps(solve(data)))\n",
     json.dumps(list(range(60)))),
    ("from functools import lru_cache\n@lru_cache(None)\n"
     "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
     "print(fib(90))\nprint(sum(fib(i) % 7 for i in range(80)))\n", None),
    ("class Stack:\n    def __init__(self):\n        self.items = []\n"
     "    def push(self, x):\n        self.items.append(x)\n"
     "    def pop(self):\n        return self.items.pop()\n"
     "s = Stack()\nfor ch in '(()(()))()':\n    s.push(ch) if ch == '(' else s.pop()\n"
     "print(len(s.items) == 0)\n", None),
    ("import itertools, math\n"
     "best = max(itertools.permutations(range(6)), key=lambda p: sum(i * v for i, v in enumerate(p)))\n"
     "print(best, math.comb(30, 12))\n", None),
]


def _limits() -> None:
    """Same per-process limits the sandbox applies (NPROC needs a uid switch)."""
    for which, value in ((resource.RLIMIT_AS, MEMORY_MB << 20),
                         (resource.RLIMIT_CPU, 7),
                         (resource.RLIMIT_FSIZE, FILE_MB << 20),
                         (resource.RLIMIT_NOFILE, OPEN_FILES),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(which, (value, value))


def run_subprocess(jobs, workers, timeout, python):
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}

    def one(job):
        code, stdin = job
        scratch = tempfile.mkdtemp(prefix="bench-")
        try:
            proc = subprocess.run([python, "-c", code], input=(stdin or "").encode(),
                                  capture_output=True, timeout=timeout, env=env,
                                  cwd=scratch, preexec_fn=_limits,
                                  start_new_session=True)
            return proc.stdout.decode()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, jobs))


def _exec_job(job):
    code, stdin = job
    out = io.StringIO()
    saved = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<snippet>", "exec"), {"__name__": "__main__"})
    except BaseException:  # noqa: BLE001 - a benchmark, not a sandbox
        pass
    finally:
        sys.stdin = saved
    return out.getvalue()


def make_mp_pool(workers):
    return get_context("fork").Pool(workers)


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` plus its reaped descendants, from /proc."""
    try:
        fields = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in os.listdir("/proc/%d/task" % pid):
        kids += map(int, Path("/proc/%d/task/%s/children" % (pid, task))
                    .read_text().split())
    return kids


def cpu_clock(pids_fn):
    """A clock of CPU seconds used by us, our reaped children and ``pids_fn()``."""
    def now() -> float:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
        return own + sum(_proc_cpu_s(p) for p in pids_fn())
    return now


def sandbox_zygotes(box: Sandbox) -> list[int]:
    """Host pids of the zygotes: their cutime holds every snippet's CPU."""
    return [kid for proc in box._procs if proc.poll() is None
            for kid in _children(proc.pid)]


def measure(runner, jobs, expected, clock):
    cpu0, start = clock(), time.perf_counter()
    outs = runner(jobs)
    secs, cpu = time.perf_counter() - start, clock() - cpu0
    if outs != expected:
        raise SystemExit("wrong output: %r" % ([o for o, e in zip(outs, expected)
                                                if o != e][:3],))
    return len(jobs) / secs, 1000 * cpu / len(jobs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--n", type=int, default=200, help="snippets per measurement")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds; the median is reported")
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--import-torch", action="store_true",
                    help="import torch first, like the trainer process")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter for the subprocess baseline")
    args = ap.parse_args()
    if args.import_torch:
        import torch  # noqa: F401
    sets = {"trivial": [("print(%d)" % i, None) for i in range(args.n)],
            "realistic": [REALISTIC[i % len(REALISTIC)] for i in range(args.n)]}

    start = time.perf_counter()
    box = Sandbox(workers=args.workers, timeout_s=args.timeout,
                  memory_mb=MEMORY_MB, max_file_mb=FILE_MB,
                  max_open_files=OPEN_FILES)
    start_s = time.perf_counter() - start
    pool = make_mp_pool(args.workers)
    runners = {
        "subprocess": (lambda jobs: run_subprocess(jobs, args.workers,
                                                   args.timeout, args.python),
                       cpu_clock(lambda: [])),
        "mp-exec": (lambda jobs: pool.map(_exec_job, jobs, chunksize=1),
                    cpu_clock(lambda: [p.pid for p in pool._pool])),
        "sandbox": (lambda jobs: [r.stdout for r in box.run_many(
            [c for c, _ in jobs], [s for _, s in jobs])],
                    cpu_clock(lambda: sandbox_zygotes(box))),
    }
    expected = {k: runners["mp-exec"][0](v) for k, v in sets.items()}  # warm-up
    box.run_many([c for c, _ in sets["trivial"][:20]])
    samples = {(m, k): [] for m in runners for k in sets}
    for _ in range(args.rounds):  # interleaved, so load swings hit all alike
        for set_name, jobs in sets.items():
            for name, (runner, clock) in runners.items():
                samples[name, set_name].append(
                    measure(runner, jobs, expected[set_name], clock))
    pool.close()
    layers = box.isolation()
    box.close()
    report(args, {k: median(v) for k, v in samples.items()}, start_s, layers)


def median(pairs):
    """Median rate and median CPU cost, each over the rounds."""
    rates = sorted(p[0] for p in pairs)
    cpus = sorted(p[1] for p in pairs)
    return rates[len(rates) // 2], cpus[len(cpus) // 2]


def report(args, cells, start_s, layers) -> None:
    print("date: %s   host: %s, %d cpus, load avg %s" % (
        time.strftime("%Y-%m-%d"), platform.machine(), os.cpu_count() or 0,
        " ".join("%.2f" % x for x in os.getloadavg())))
    print("python %s, euid %d, %d parallel slots, %d snippets per cell, "
          "median of %d interleaved rounds%s" % (
              platform.python_version(), os.geteuid(), args.workers, args.n,
              args.rounds, ", parent imported torch" if args.import_torch else ""))
    print("subprocess baseline interpreter: %s" % args.python)
    print("sandbox startup (all workers): %.2f s" % start_s)
    print()
    print("%-11s %10s %10s %12s %12s   %s" % (
        "method", "trivial/s", "real/s", "trivial cpu", "real cpu", "isolation"))
    iso = {"subprocess": "rlimits, own session, temp cwd, scrubbed env",
           "mp-exec": "none (exec in a shared worker)",
           "sandbox": "%d/%d layers" % (sum(bool(v) for v in layers.values()),
                                        len(layers))}
    for name in iso:
        (tr, tc), (rr, rc) = cells[name, "trivial"], cells[name, "realistic"]
        print("%-11s %10.0f %10.0f %9.2f ms %9.2f ms   %s" % (
            name, tr, rr, tc, rc, iso[name]))
    base_t, base_r = cells["subprocess", "trivial"], cells["subprocess", "realistic"]
    box_t, box_r = cells["sandbox", "trivial"], cells["sandbox", "realistic"]
    print("\nsandbox vs subprocess, throughput: %.1fx trivial, %.1fx realistic; "
          "CPU per snippet: %.1fx less, %.1fx less" % (
              box_t[0] / base_t[0], box_r[0] / base_r[0],
              base_t[1] / box_t[1], base_r[1] / box_r[1]))
    missing = [k for k, v in layers.items() if not v]
    print("isolation layers missing: %s" % (", ".join(missing) or "none"))
    print("(cpu = CPU time of every process involved, per snippet)")


if __name__ == "__main__":
    main()
