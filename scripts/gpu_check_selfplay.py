"""One self-play round of a random-init model with Qwen2-0.5B's architecture: throughput and MFU.

    python scripts/gpu_check_selfplay.py --out OUT/selfplay.json            # on a GPU (bf16)
    python scripts/gpu_check_selfplay.py --engine vllm --out OUT/selfplay_vllm.json   # rollouts on vLLM
    GPU_CHECK_SMOKE=1 python scripts/gpu_check_selfplay.py --out /tmp/s.json  # CPU dry run, tiny model

The model is written to a temporary local directory (nothing is downloaded) with the
embedded character tokenizer, and driven by the trainer's own phase methods:
propose (challenger rollout) -> probe -> challenger GRPO step -> solver answers on
generator tasks -> solver GRPO step. A random model proposes no valid task, so its
rewards are flat; the work per token (sampling, forward, backward, optimizer step) is
the same as in a real round, which is what is measured.

Reported: rollout tokens/s (generated tokens), training tokens/s (prompt + completion
tokens through the GRPO update), and model FLOPs utilisation against the bf16 dense peak
(H200: 989 TFLOP/s), counting 2N FLOPs per generated token and 8N per trained token
(a no-grad forward for the behaviour log-probs, then forward + backward), N = parameters
without the embedding.

``--engine vllm`` samples every rollout on the vLLM engine (``rollout.engine=vllm``); its
rollout seconds include pushing the weights after each update. After the solver's update the
engine's greedy completions are compared with transformers' from the same weights
(``greedy_match``: the share of identical completions; bf16 kernels may differ in a few).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curriculum.config import load_config  # noqa: E402
from curriculum.engine.rollout import pack  # noqa: E402
from curriculum.engine.tiny import build_tokenizer  # noqa: E402

SMOKE = os.environ.get("GPU_CHECK_SMOKE") == "1"
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}

# Qwen2-0.5B (config.json of Qwen/Qwen2-0.5B); SMOKE shrinks it to run on a CPU.
QWEN2_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096, rope_theta=1e6,
                 rms_norm_eps=1e-6, tie_word_embeddings=True)
# head size 32: the smallest vLLM's CPU attention takes
TINY = dict(QWEN2_05B, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512)


def write_model(path: Path, dtype: torch.dtype) -> int:
    """Random-init Qwen2 at ``path`` with the embedded tokenizer; returns non-embedding parameters."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer()
    cfg = Qwen2Config(**(TINY if SMOKE else QWEN2_05B), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(dtype)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n)


def peak_tflops() -> float:
    if not torch.cuda.is_available():
        return float("nan")
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_TFLOPS.items() if k in name), float("nan"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--lora", action="store_true", help="LoRA on a shared base instead of two full models")
    ap.add_argument("--engine", choices=("hf", "vllm"), default="hf", help="rollout.engine")
    args = ap.parse_args()
    from curriculum.rollouts import derive_seed
    from curriculum.trainer import SelfPlayTrainer

    dev = "cpu" if SMOKE else "cuda"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        n_params = write_model(Path(tmp) / "model", torch.float32 if SMOKE else torch.bfloat16)
        g, prompts, new_tokens = (4, 4, 8) if SMOKE else (8, 64, 256)
        overrides = [
            f"model.path={tmp}/model", f"run.dir={tmp}/run", f"run.device={dev}", "run.deterministic=false",
            f"model.dtype={'float32' if SMOKE else 'bfloat16'}", f"model.lora.enabled={str(args.lora).lower()}",
            f"challenger.batch_prompts={prompts}", f"challenger.group_size={g}", f"solver.batch_prompts={prompts}",
            f"solver.group_size={g}", f"challenger.sampling.max_new_tokens={new_tokens}",
            f"solver.sampling.max_new_tokens={new_tokens}", "challenger.sampling.batch_size=512",
            "solver.sampling.batch_size=512", f"challenger.loss.minibatch_size={prompts * g // 4}",
            f"solver.loss.minibatch_size={prompts * g // 4}", "curriculum.probe_samples=4", "eval.per_level=2",
            "wandb.mode=disabled", "log.progress=false", "env.kwargs={num_levels: 6}", f"rollout.engine={args.engine}",
        ]
        cfg = load_config(None, overrides)
        trainer = SelfPlayTrainer(cfg)
        res = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu-smoke", "params_non_embedding": n_params,
               "lora": args.lora, "engine": args.engine, "group_size": g, "prompts": prompts,
               "max_new_tokens": new_tokens}
        rollout_tokens = rollout_s = train_tokens = train_s = 0.0

        def timed(fn):
            sync()
            t0 = time.perf_counter()
            out = fn()
            sync()
            return out, time.perf_counter() - t0

        # challenger: propose (+ probe) -> GRPO step
        props, dt = timed(lambda: trainer.propose(1, "challenger", 0, prompts * g))
        rollout_tokens += sum(len(p.completion.completion_ids) for p in props)
        rollout_s += dt
        _, dt = timed(lambda: trainer.probe(props, 1, "probe", 0))
        rollout_s += dt  # a random model proposes (almost) nothing valid: little to probe
        rewards = [random.random() for _ in props]
        batch = pack([p.completion for p in props], rewards, [i // g for i in range(len(props))], trainer.tokenizer.pad_token_id)
        _, dt = timed(lambda: trainer.updates("challenger", [p.completion for p in props], rewards, [p.kind for p in props],
                                              1, 0))
        train_tokens += float(batch.attention_mask.sum())
        train_s += dt
        # solver: answers to generator tasks -> GRPO step
        rng = random.Random(derive_seed(0, "gpu_check"))
        tasks = [trainer.env.sample_task(rng.randint(1, trainer.env.num_levels), rng) for _ in range(prompts)]
        answers, dt = timed(lambda: trainer.rollouts.attempt(tasks, g, (1, "solver", 0), desc="solve"))
        rollout_tokens += sum(len(a.completion.completion_ids) for a in answers)
        rollout_s += dt
        rewards = [random.random() for _ in answers]
        batch = pack([a.completion for a in answers], rewards, [i // g for i in range(len(answers))],
                     trainer.tokenizer.pad_token_id)
        _, dt = timed(lambda: trainer.updates("solver", [a.completion for a in answers], rewards,
                                              [a.task.kind for a in answers], 1, 0))
        train_tokens += float(batch.attention_mask.sum())
        train_s += dt
        if args.engine == "vllm":  # the engine samples the updated weights
            from curriculum.engine.rollout import generate

            solver = trainer.roles["solver"]
            asks = [trainer.solver.prompt(t) for t in tasks]
            theirs = trainer.rollouts.engine.generate(solver, trainer.tokenizer, asks, max_new_tokens=32, greedy=True)
            ours = generate(solver.activate().model, trainer.tokenizer, asks, max_new_tokens=32, greedy=True)
            res["greedy_match"] = sum(a.completion_ids == b.completion_ids for a, b in zip(theirs, ours)) / len(asks)
        peak = peak_tflops()
        res.update(rollout_tokens=rollout_tokens, rollout_s=rollout_s, rollout_tokens_per_s=rollout_tokens / rollout_s,
                   train_tokens=train_tokens, train_s=train_s, train_tokens_per_s=train_tokens / train_s,
                   rollout_tflops=2 * n_params * rollout_tokens / rollout_s / 1e12,
                   train_tflops=8 * n_params * train_tokens / train_s / 1e12, peak_tflops=peak)
        res["rollout_mfu"] = res["rollout_tflops"] / peak
        res["train_mfu"] = res["train_tflops"] / peak
        if dev == "cuda":
            res["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        trainer.monitor.close()
        trainer.close()
    print(json.dumps(res, indent=1))
    for k in ("rollout_tokens_per_s", "train_tokens_per_s", "rollout_mfu", "train_mfu"):
        print(f"{k:>22}: {res[k]:,.3f}")
    Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
