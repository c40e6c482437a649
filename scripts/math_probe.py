"""Which one-step word problems does a real model solve, and how often is its majority answer right?

    python scripts/math_probe.py --model DIR [--tasks 16] [--samples 4] [--threads 1]

For each family of one-step problems (the math environment's wording: gets N more, uses N, becomes N
times as large; big and small numbers) and the environment's own level 1, ``--tasks`` problems (seed 0)
are each answered ``--samples`` times with the math config's solver prompt and sampling (one worked
example, temperature 0.7, top-p 0.95, 96 new tokens). Prints the per-sample accuracy, the majority
answer's accuracy (the label checks' measure, curriculum/label_accuracy) and the share of boxed answers.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from curriculum.envs.base import Task  # noqa: E402
from curriculum.envs.math import NAMES, STUFF, Math  # noqa: E402
from solver.verifier import vote  # noqa: E402


def one_step(op: str, start: tuple[int, int], operand: tuple[int, int]):
    """Problems ``start`` (op) ``operand``, worded as the environment words its steps."""
    def make(rng: random.Random) -> Task:
        name, stuff = rng.choice(NAMES), rng.choice(STUFF)
        v, n = rng.randint(*start), rng.randint(*operand)  # n drawn for every op: "-" redraws it below v
        if op == "+":
            step, answer = f"Then {name} gets {n} more {stuff}.", v + n
        elif op == "-":
            n = rng.randint(1, v - 1)
            step, answer = f"Then {name} uses {n} {stuff}.", v - n
        else:
            step, answer = f"Then {name}'s amount becomes {n} times as large.", v * n
        return Task(text=f"{name} has {v} {stuff}. {step} How many {stuff} does {name} have now?",
                    answer=str(answer), level=1)
    return make


ENV = Math(num_levels=2, examples=3)
FAMILIES = {
    "level 1 (environment)": lambda rng: ENV.sample_task(1, rng),
    "+ (2-30) + (1-20)": one_step("+", (2, 30), (1, 20)),
    "- (2-30)": one_step("-", (2, 30), (1, 20)),
    "* (2-30) x (2-4)": one_step("*", (2, 30), (2, 4)),
    "+ (2-9) + (1-9)": one_step("+", (2, 9), (1, 9)),
    "- (2-9)": one_step("-", (2, 9), (1, 9)),
    "* (2-9) x (2-3)": one_step("*", (2, 9), (2, 3)),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a Hugging Face directory (selfplay model get smollm2-135m-instruct)")
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.model)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    m = args.samples
    for name, make in FAMILIES.items():
        rng = random.Random(0)
        tasks = [make(rng) for _ in range(args.tasks)]
        start, right, majority, boxed = time.time(), 0, 0, 0
        for i in range(0, len(tasks), 8):
            batch = tasks[i:i + 8]
            prompts = [tok.apply_chat_template(ENV.solver_prompt(t), tokenize=False, add_generation_prompt=True)
                       for t in batch for _ in range(m)]
            enc = tok(prompts, return_tensors="pt", padding=True)
            torch.manual_seed(i)
            with torch.no_grad():
                out = model.generate(**enc, do_sample=True, temperature=0.7, top_p=0.95, max_new_tokens=96,
                                     pad_token_id=tok.pad_token_id)
            texts = tok.batch_decode(out[:, enc.input_ids.shape[1]:], skip_special_tokens=True)
            for j, t in enumerate(batch):
                group = texts[j * m:(j + 1) * m]  # graded by the environment's own rules, as in the loop
                answers = [ENV.extract_answer(x) for x in group]
                boxed += sum(a is not None for a in answers)
                right += sum(ENV.score(t, x) for x in group)
                label, _ = vote(answers, ENV.same_answer)
                majority += label is not None and ENV.same_answer(label, t.answer)
        n = len(tasks)
        print(f"{name:22s} sample {right / (n * m):.2f}  majority {majority / n:.2f}  boxed {boxed / (n * m):.2f}"
              f"  ({time.time() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
