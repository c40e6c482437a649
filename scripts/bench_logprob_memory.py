#!/usr/bin/env python
"""Peak memory and time of token log-probs: naive full-logits log-softmax vs chunked.

Each (variant, hidden size) runs in its own subprocess, which allocates its inputs
in place, then records the op's peak resident memory above that baseline
(``ru_maxrss`` high-water mark minus the RSS before the op) and its wall time for
forward + backward. Gradient tensors (``h.grad``, ``W.grad``) are outputs both variants must allocate, so
they are subtracted. ``naive`` is ``log_softmax((h @ W^T).float()).gather(y)`` as most
trainers write it; ``chunked`` is ``curriculum.engine.rl.logprobs.linear_logprobs``.

Modes: ``frozen-head`` (default; gradient to the hidden states only, as under LoRA),
``trainable-head`` (gradient to W too), ``no-grad`` (old/ref log-probs).

    python scripts/bench_logprob_memory.py                         # ~2 min on 2 cores
    python scripts/bench_logprob_memory.py --tokens 2048 --hidden 1024,2048,4096 --mode trainable-head
    python scripts/bench_logprob_memory.py --device cuda --dtype bfloat16 --tokens 16384   # GPU: CUDA peak stats
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# Same for both variants (inherited by the worker subprocesses), set before torch loads: a spinning
# OpenMP worker on a 2-vCPU VM adds stalls, and 4 KiB page faults dominate fresh large tensors.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def worker(args):
    import resource

    import psutil
    import torch

    sys.path.insert(0, ROOT)
    from curriculum.engine.rl.logprobs import linear_logprobs

    dev, dtype = args.device, getattr(torch, args.dtype)
    torch.manual_seed(0)
    M, H, V = args.tokens, args.hidden_one, args.vocab
    # In-place init: no temporaries, so the setup's own peak stays below the op's baseline.
    h = torch.empty(M, H, dtype=dtype, device=dev).normal_(0, 1.0)
    w = torch.empty(V, H, dtype=dtype, device=dev).normal_(0, H ** -0.5)
    y = torch.randint(0, V, (M,), device=dev)
    g = torch.randn(M, device=dev)
    grad = args.mode != "no-grad"
    h.requires_grad_(grad)
    w.requires_grad_(args.mode == "trainable-head")
    proc = psutil.Process()
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = proc.memory_info().rss
    times = []
    for _ in range(args.repeats):  # min over repeats: a shared 2-vCPU VM is noisy
        h.grad = w.grad = None
        t0 = time.perf_counter()
        with torch.set_grad_enabled(grad):
            if args.variant == "naive":
                logsm = torch.log_softmax((h @ w.T).float(), dim=-1)
                logp = logsm.gather(-1, y[:, None]).squeeze(-1)
                ent = -(logsm.exp() * logsm).sum(-1) if args.entropy else None
                del logsm
            else:
                logp, ent = linear_logprobs(h, w, y, with_entropy=args.entropy, chunk_size=args.chunk_size,
                                            vocab_chunk_size=args.vocab_chunk_size)
            if grad:
                (logp * g).sum().backward()
        if dev == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if dev == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    dt = min(times)
    peak -= sum(t.grad.numel() * t.grad.element_size() for t in (h, w) if t.grad is not None)  # outputs, not workspace
    check = [float(logp.double().sum())]
    if grad:
        check.append(float(h.grad.double().norm()))
    print(json.dumps({"time_s": dt, "peak_mb": max(peak, 0) / 2**20, "base_mb": base / 2**20, "check": check}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=256, help="M = batch x sequence positions")
    ap.add_argument("--repeats", type=int, default=2, help="time = min over this many runs")
    ap.add_argument("--hidden", default="1024,4096")
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--mode", default="frozen-head", choices=["frozen-head", "trainable-head", "no-grad"])
    ap.add_argument("--entropy", action="store_true", help="also compute the entropy (not differentiated)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--chunk-size", type=int, default=1024)
    ap.add_argument("--vocab-chunk-size", type=int, default=16384)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--hidden-one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        return worker(args)
    print(f"# bench_logprob_memory  device={args.device} dtype={args.dtype} M={args.tokens} V={args.vocab} "
          f"mode={args.mode} entropy={args.entropy} chunks={args.chunk_size}x{args.vocab_chunk_size} "
          f"time=min of {args.repeats} OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']} "
          f"THP_MEM_ALLOC_ENABLE={os.environ['THP_MEM_ALLOC_ENABLE']}")
    print(f"{'H':>5} | {'naive peak':>11} {'ours peak':>10} {'ratio':>6} | {'naive s':>8} {'ours s':>8} {'speed':>6}")
    for H in [int(x) for x in args.hidden.split(",")]:
        res = {}
        for variant in ("naive", "chunked"):
            cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--variant", variant, "--hidden-one", str(H)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            res[variant] = json.loads(out.strip().splitlines()[-1])
        n, c = res["naive"], res["chunked"]
        for a, b in zip(n["check"], c["check"]):
            assert abs(a - b) <= 1e-3 * max(1.0, abs(a)), (n["check"], c["check"])
        print(f"{H:>5} | {n['peak_mb']:>8.0f} MB {c['peak_mb']:>7.0f} MB {c['peak_mb'] / n['peak_mb']:>5.1%} | "
              f"{n['time_s']:>8.2f} {c['time_s']:>8.2f} {n['time_s'] / c['time_s']:>5.2f}x", flush=True)


if __name__ == "__main__":
    main()
