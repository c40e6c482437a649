"""One round of `configs/math_single_gpu.yaml` on a random-init Qwen2-0.5B-architecture model.

    python scripts/gpu_check_math.py --out OUT/math                       # on a GPU (bf16, LoRA, chat prompts)
    GPU_CHECK_SMOKE=1 python scripts/gpu_check_math.py --out /tmp/m       # CPU dry run: tiny model, smoke config

The model is written offline with a Qwen-format byte-level BPE tokenizer and chat template
(tests/hf_models.py), then `selfplay train` runs one short round through the real CLI. A
random model writes garbage, so this checks the plumbing at a real model's size (chat
prompts, long completions, majority labels, label checks, LoRA checkpoints, memory), not
learning. Checked: the run ends cleanly, round 1's task file holds chat-templated prompts,
and `curriculum/label_accuracy` is logged. Writes OUT/math.json (timings, peak memory).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curriculum.monitor import read_jsonl  # noqa: E402
from tests.hf_models import qwen_tokenizer  # noqa: E402

SMOKE = os.environ.get("GPU_CHECK_SMOKE") == "1"
# Qwen2-0.5B's shape (config.json of Qwen/Qwen2-0.5B) with the test tokenizer's vocabulary.
QWEN2_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, max_position_embeddings=4096, rope_theta=1e6, rms_norm_eps=1e-6,
                 tie_word_embeddings=True)
TINY = dict(QWEN2_05B, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1)


def write_model(path: Path) -> int:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = qwen_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         bos_token_id=None, **(TINY if SMOKE else QWEN2_05B))
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_dir, run = out / "model", out / "run"
    params = write_model(model_dir)
    if SMOKE:
        cmd = ["train", "configs/math_cpu_smoke.yaml", f"model.path={model_dir}"]
    else:  # the shipped config, shortened to one round of small batches
        cmd = ["train", "configs/math_single_gpu.yaml", f"model.path={model_dir}", "challenger.batch_prompts=4",
               "solver.batch_prompts=4", "challenger.steps=1", "solver.steps=1", "curriculum.fill_proposals=8",
               "solver.sampling.max_new_tokens=512", "eval.per_level=4", "eval.max_new_tokens=512"]
    cmd += [f"run.dir={run}", "train.rounds=1", "wandb.mode=disabled", "log.progress=false"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "curriculum.cli", *cmd], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - start
    print(proc.stderr[-3000:] if proc.returncode else proc.stderr[-800:])
    problems = [] if proc.returncode == 0 else [f"selfplay train exited {proc.returncode}"]
    tasks = run / "tasks" / "round_0001.jsonl"
    records = read_jsonl(tasks)
    if not any("<|im_start|>" in json.dumps(r) for r in records):
        problems.append(f"{tasks}: no chat-templated prompt recorded")
    metrics = read_jsonl(run / "metrics.jsonl")
    if not any("curriculum/label_accuracy" in m for m in metrics):
        problems.append("curriculum/label_accuracy was not logged")
    result = {"params": params, "smoke": SMOKE, "seconds": round(seconds, 1), "task_records": len(records),
              "problems": problems, "last_metrics": metrics[-1] if metrics else None}
    (out / "math.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "last_metrics"}))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
