#!/usr/bin/env python
"""Advantage computation, side by side: verl's per-sample loop, TRL's fixed-group
vectorisation, and ``curriculum.engine.rl.compute_advantages``.

All three go from rewards [N] + group ids [N] (+ a response mask [N, T]) to GRPO
advantages, [N] ("seq") or [N, T] ("token"), on the same data (groups of G, contiguous,
since TRL's ``view(-1, G)`` needs that; ours does not). Results are checked equal
before timing. Prints times and ratios over the loop.

    python scripts/bench_advantages.py                          # CPU, N up to 16384, T = 4096
    python scripts/bench_advantages.py --device cuda --backend auto   # on a GPU (Triton)
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections import defaultdict

# Same for every variant, set before torch loads: a spinning OpenMP worker on a 2-vCPU VM adds
# ~8 ms stalls to small ops, and 4 KiB page faults dominate writing a fresh [N, T] tensor.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from curriculum.engine.rl import compute_advantages  # noqa: E402


def verl_loop(scores_n, index, response_mask_nt=None, epsilon=1e-6):
    """As verl's ``compute_grpo_outcome_advantage`` (verl/trainer/ppo/core_algos.py) does it:
    a Python loop over samples into a dict keyed by uid, a loop over groups, a loop back."""
    scores = scores_n.clone()
    id2score, id2mean, id2std = defaultdict(list), {}, {}
    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            id2score[index[i]].append(scores[i])
        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx], id2std[idx] = torch.tensor(0.0), torch.tensor(1.0)
            else:
                scores_tensor = torch.stack(id2score[idx])
                id2mean[idx], id2std[idx] = torch.mean(scores_tensor), torch.std(scores_tensor)
        for i in range(bsz):
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        if response_mask_nt is None:
            return scores
        return scores.unsqueeze(-1) * response_mask_nt


def trl_vectorised(rewards_n, num_generations, response_mask_nt=None):
    """As TRL's GRPOTrainer does it: ``view(-1, G)`` statistics and ``repeat_interleave``
    (fixed group size, groups contiguous); the token broadcast is what its loss does."""
    mean_g = rewards_n.view(-1, num_generations).mean(dim=1).repeat_interleave(num_generations, dim=0)
    std_g = rewards_n.view(-1, num_generations).std(dim=1).repeat_interleave(num_generations, dim=0)
    adv = (rewards_n - mean_g) / (std_g + 1e-6)
    if response_mask_nt is None:
        return adv
    return adv.unsqueeze(1) * response_mask_nt


def timeit(fn, device, min_time=0.3, max_reps=50):
    """Median wall time of repeated calls (at least one, until ``min_time`` has passed)."""
    times = []
    while len(times) < max_reps and (sum(times) < min_time or len(times) < 3):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if times[-1] > 2.0:  # a slow baseline: one or two runs are enough
            break
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024,4096,16384", help="comma-separated N (sequences)")
    ap.add_argument("--tokens", type=int, default=4096, help="T of the response mask")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backend", default="torch", help="backend of ours: auto | torch | triton")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = args.device
    print(f"# bench_advantages  device={dev} threads={torch.get_num_threads()} torch={torch.__version__} "
          f"G={args.group_size} T={args.tokens} ours=compute_advantages(backend={args.backend!r}) "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']} THP_MEM_ALLOC_ENABLE={os.environ['THP_MEM_ALLOC_ENABLE']}")
    print(f"{'N':>6} {'out':>5} | {'verl loop':>10} {'TRL view':>10} {'ours':>10} | {'loop/ours':>9} {'TRL/ours':>8}")
    gen = torch.Generator().manual_seed(0)
    for n in [int(s) for s in args.sizes.split(",")]:
        g = args.group_size
        rewards = torch.randint(0, 2, (n,), generator=gen).float().to(dev)  # binary, as verifiers give
        group_ids = torch.arange(n // g).repeat_interleave(g).to(dev)
        uids = np.array([str(uuid.uuid4()) for _ in range(n // g)], dtype=object)[group_ids.cpu().numpy()]
        lengths = torch.randint(args.tokens // 8, args.tokens + 1, (n,), generator=gen)
        mask = (torch.arange(args.tokens)[None, :] < lengths[:, None]).float().to(dev)
        for kind, m in (("seq", None), ("token", mask)):
            ref = verl_loop(rewards, uids, m)
            trl = trl_vectorised(rewards, g, m)
            ours = compute_advantages(rewards, group_ids, "grpo", response_mask=m, backend=args.backend)
            torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(trl, ref, atol=1e-4, rtol=1e-4)
            t_loop = timeit(lambda: verl_loop(rewards, uids, m), dev)
            t_trl = timeit(lambda: trl_vectorised(rewards, g, m), dev)
            t_ours = timeit(lambda: compute_advantages(rewards, group_ids, "grpo", response_mask=m,
                                                       backend=args.backend), dev)
            print(f"{n:>6} {kind:>5} | {t_loop * 1e3:>8.2f}ms {t_trl * 1e3:>8.2f}ms {t_ours * 1e3:>8.2f}ms | "
                  f"{t_loop / t_ours:>8.1f}x {t_trl / t_ours:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
