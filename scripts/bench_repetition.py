"""Cost of the repetition penalty on one challenger batch: the vectorised BLEU matrix against
sacrebleu's sentence BLEU called pair by pair (the same numbers), side by side.

    python scripts/bench_repetition.py [--group 16] [--prompts 16] [--repeats 3]

Texts are ladder-like digit strings and arithmetic-like expressions, a few duplicates among them.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sacrebleu.metrics.bleu import BLEU  # noqa: E402

from challenger.rewards import bleu_scores, bleu_tokens, repetition_penalty  # noqa: E402


def batch(n: int, rng: random.Random) -> list[str]:
    out = []
    for _ in range(n):
        if out and rng.random() < 0.2:
            out.append(rng.choice(out))  # a repeat
        elif rng.random() < 0.5:
            out.append("".join(rng.choice("0123456789") for _ in range(rng.randint(2, 17))))
        else:
            out.append("".join(f"{rng.randint(0, 9)}{rng.choice('+-')}" for _ in range(rng.randint(1, 6))) + "1")
    return out


def pairwise(texts: list[str]) -> np.ndarray:
    ref = BLEU(tokenize="none", smooth_method="floor", smooth_value=0.1, effective_order=True)
    toks = [" ".join(bleu_tokens(t)) for t in texts]
    return np.array([[ref.sentence_score(a, [b]).score / 100 for b in toks] for a in toks])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    texts = batch(args.group * args.prompts, random.Random(0))
    uniq = sorted(set(texts))
    assert np.allclose(bleu_scores(uniq), pairwise(uniq), atol=1e-12)
    times = {"sacrebleu pair by pair": [], "bleu_scores (all pairs)": [], "repetition_penalty (whole)": []}
    for _ in range(args.repeats):
        for name, fn in (("sacrebleu pair by pair", lambda: pairwise(uniq)),
                         ("bleu_scores (all pairs)", lambda: bleu_scores(uniq)),
                         ("repetition_penalty (whole)", lambda: repetition_penalty(texts, 0.5))):
            t0 = time.process_time()
            fn()
            times[name].append(time.process_time() - t0)
    print(f"batch of {len(texts)} proposals ({len(uniq)} distinct), CPU seconds, best of {args.repeats}:")
    best = {k: min(v) for k, v in times.items()}
    for k, v in best.items():
        print(f"  {k:<28} {v:8.3f} s")
    print(f"  pair-by-pair / vectorised: {best['sacrebleu pair by pair'] / best['bleu_scores (all pairs)']:.1f}x")


if __name__ == "__main__":
    main()
