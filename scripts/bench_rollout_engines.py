"""Rollout throughput, transformers' generate (rollout.engine=hf) vs the vLLM engine (rollout.engine=vllm).

    bash scripts/test_vllm.sh --co -q >/dev/null   # builds .venv-vllm once (or any env with vllm)
    LD_PRELOAD=.venv-vllm/lib/libiomp5.so .venv-vllm/bin/python scripts/bench_rollout_engines.py \
        [--model DIR [--lora]]

By default the same random-init Qwen2 model (head size 32, so vLLM's CPU attention takes it), the same
GRPO-shaped batch (P prompts x G samples), alternating the two engines for ``--reps`` rounds
in one process at one thread. A random model rarely writes its stop token, so nearly every
row runs to ``--new-tokens``. ``--model DIR``: a real model from a local directory instead (e.g.
``selfplay model get smollm2-135m-instruct``), with ``--lora`` as the trainer holds it (two LoRA adapters,
r 16, on one shared base: the engine serves the solver's). Also timed: a weight push into the engine (what each update
costs it), and the greedy agreement of the two engines on the batch's prompts.
Prints completion tokens/s per engine and the ratio vLLM / HF (wall and CPU time).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from curriculum.config import load_config  # noqa: E402
from curriculum.engine.policy import Role  # noqa: E402
from curriculum.engine.rollout import HFEngine  # noqa: E402
from curriculum.engine.tiny import build_tokenizer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--model", type=Path, help="a Hugging Face model directory instead of the random Qwen2")
    ap.add_argument("--lora", action="store_true", help="with --model: the roles' LoRA adapters on a shared base")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from curriculum.engine.vllm_engine import VLLMEngine

    with tempfile.TemporaryDirectory() as tmp:
        overrides = ["rollout.engine=vllm", "run.device=cpu", f"run.dir={tmp}/run"]
        if args.model:
            overrides += [f"model.path={args.model}", *(["model.lora.enabled=true", "model.lora.r=16"] if args.lora else [])]
        cfg = load_config(None, overrides)
        tok, role, roles, what = model_and_role(args, cfg)
        t0 = time.perf_counter()
        vllm = VLLMEngine(cfg, roles, torch.device("cpu"))
        start_s = time.perf_counter() - t0
        hf = HFEngine()
        prompts = [f"Q: {i}+{2 * i + 1}=" for i in range(args.prompts)]
        batch = [p for p in prompts for _ in range(args.group)]
        kw = dict(max_new_tokens=args.new_tokens, temperature=1.0)
        vllm.generate(role, tok, batch[:2], **kw)  # first push and warm-up, not timed
        hf.generate(role, tok, batch[:2], **kw)
        totals = {"hf": [0, 0.0, 0.0], "vllm": [0, 0.0, 0.0]}  # tokens, wall s, cpu s
        for rep in range(args.reps):
            for name, engine in (("hf", hf), ("vllm", vllm)) if rep % 2 == 0 else (("vllm", vllm), ("hf", hf)):
                w, c = time.perf_counter(), time.process_time()
                out = engine.generate(role, tok, batch, seed=rep, **kw)
                totals[name][1] += time.perf_counter() - w
                totals[name][2] += time.process_time() - c
                totals[name][0] += sum(len(x.completion_ids) for x in out)
        pushes = []
        for _ in range(3):
            role.version += 1
            t0 = time.perf_counter()
            vllm.sync(role)
            pushes.append(time.perf_counter() - t0)
        greedy = dict(max_new_tokens=args.new_tokens, greedy=True)
        same = sum(a.completion_ids == b.completion_ids for a, b in
                   zip(vllm.generate(role, tok, prompts, **greedy), hf.generate(role, tok, prompts, **greedy)))
        vllm.close()
    print(f"{what}, {args.prompts} prompts x {args.group} samples, {args.new_tokens} new tokens, {args.reps} "
          f"alternating reps, 1 thread")
    print(f"{'engine':<8}{'tokens':>9}{'wall s':>9}{'cpu s':>9}{'tok/s wall':>12}{'tok/s cpu':>11}")
    rate = {}
    for name, (tokens, wall, cpu) in totals.items():
        rate[name] = (tokens / wall, tokens / cpu)
        print(f"{name:<8}{tokens:>9}{wall:>9.2f}{cpu:>9.2f}{tokens / wall:>12,.0f}{tokens / cpu:>11,.0f}")
    print(f"vLLM / HF completion tokens/s: {rate['vllm'][0] / rate['hf'][0]:.2f}x wall, "
          f"{rate['vllm'][1] / rate['hf'][1]:.2f}x CPU time")
    print(f"engine start {start_s:.1f} s; weight push {min(pushes) * 1e3:.1f}-{max(pushes) * 1e3:.1f} ms; "
          f"greedy completions equal to HF: {same}/{len(prompts)}")


def model_and_role(args, cfg):
    """The tokenizer, the solver's role, all roles and a line naming the model."""
    if args.model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from curriculum.engine.policy import build_roles

        tok = AutoTokenizer.from_pretrained(args.model)
        base = AutoModelForCausalLM.from_pretrained(args.model).eval()
        n = sum(p.numel() for p in base.parameters())
        roles = build_roles(cfg, base, torch.device("cpu"))
        what = f"{args.model.name} {n / 1e6:.1f}M parameters" + (" + LoRA r 16 (the solver's adapter)" if args.lora else "")
        return tok, roles["solver"], roles, what
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer()
    config = Qwen2Config(vocab_size=len(tok), hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=args.hidden // 32, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    n = sum(p.numel() for p in model.parameters())
    role = Role("solver", model, None, None, None)
    return tok, role, {"solver": role}, f"Qwen2 {n / 1e6:.2f}M parameters (hidden {args.hidden}, {args.layers} layers)"


if __name__ == "__main__":
    main()
