"""The warm-up cache: its key covers what changes the model, and a damaged entry is rebuilt, never used."""
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from curriculum.config import load_config
from curriculum.engine import tiny
from curriculum.engine.tiny import cache_key
from curriculum.envs import make_env
from curriculum.warmup import load_base, warmup_key

SMALL = ["run.device=cpu", "model.tiny.hidden_size=16", "model.tiny.layers=1", "model.tiny.heads=2",
         "model.warmup.steps=3", "model.warmup.batch_size=4", "env.kwargs={num_levels: 2}"]


def key(*overrides):
    cfg = load_config(None, SMALL + list(overrides))
    return cache_key(warmup_key(cfg, make_env(cfg.env.name, **cfg.env.kwargs)))


def test_key_changes_with_what_changes_the_model(monkeypatch):
    base = key()
    assert key("model.warmup.threads=2") != base
    assert key("run.seed=1") != base
    assert key("model.warmup.steps=4") != base
    assert key("run.threads=2") == base  # the warm-up runs on model.warmup.threads whatever the run uses
    assert key("train.rounds=9") == base
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    assert key() != base


def test_key_changes_with_the_cpu_kernels_and_model(monkeypatch):
    # The same seed warms up to different weights under AVX2 and AVX-512 kernels (BENCHMARKS.md).
    import curriculum.warmup as policy

    base = key()
    assert policy.cpu_model()  # this machine's name, whatever it is
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2-other")
    kernels = key()
    assert kernels != base
    monkeypatch.setattr(policy, "cpu_model", lambda: "Other CPU")
    assert key() != kernels


def test_key_changes_with_the_code_that_generates_the_examples(tmp_path, monkeypatch):
    from pathlib import Path

    import curriculum.warmup as policy

    env = make_env("arithmetic", num_levels=2)
    sources = {p.name for p in policy.warmup_sources(env, tools=False)}
    assert {"tiny.py", "prompts.py", "arithmetic.py", "ladder.py"} <= sources  # warm-up, prompts, generators
    assert "tools.py" not in sources and "tools.py" in {p.name for p in policy.warmup_sources(env, tools=True)}
    generator = tmp_path / "generator.py"
    generator.write_text("def sample_task(level): return level\n")
    monkeypatch.setattr(policy, "warmup_sources", lambda env, tools: [generator, Path(tiny.__file__)])
    before = key()
    assert key() == before  # the same code: the same entry
    generator.write_text("def sample_task(level): return level + 1\n")
    assert key() != before


def test_key_is_the_payload_it_had_in_the_engine():
    """Moving the warm-up out of the engine keeps every cached model valid: the key of
    configs/demo_cpu.yaml is the hash of the payload as curriculum/engine/policy.py built it."""
    import platform

    import transformers

    from challenger.role import Challenger
    from curriculum.warmup import cpu_model, warmup_code_digest

    for overrides in ([], ["curriculum.references=2"], ["solver.tools=[python]", "solver.max_turns=2"]):
        cfg = load_config("configs/demo_cpu.yaml", overrides)
        env = make_env(cfg.env.name, **cfg.env.kwargs)
        prompt = Challenger(env).prompt
        w, tools = vars(cfg.model.warmup), cfg.solver.tools
        payload = {"tiny": {k: v for k, v in vars(cfg.model.tiny).items() if k != "position"},
                   "warmup": {k: v for k, v in w.items() if k != "cache_dir" and (tools or k != "tool_fraction")},
                   "env": cfg.env.name, "env_kwargs": cfg.env.kwargs, "seed": cfg.run.seed,
                   "eval": [cfg.eval.seed, cfg.eval.per_level], "references": cfg.curriculum.references,
                   "example_prompt": prompt([]) if cfg.curriculum.references else env.challenger_prompt(),
                   "torch": torch.__version__, "transformers": transformers.__version__, "version": 4,
                   "cpu_kernels": torch.backends.cpu.get_cpu_capability(), "cpu": cpu_model() or platform.processor(),
                   "code": warmup_code_digest(env, bool(tools))}
        if tools:
            payload["tools"] = [tools, cfg.solver.tool_prompt, cfg.solver.tool_output_chars]
        assert cfg.model.tiny.position == "rope"  # rope is left out of the key, as before the key had it
        assert cache_key(warmup_key(cfg, env, prompt)) == cache_key(payload), overrides


def test_warmup_runs_on_its_own_thread_count(tmp_path, monkeypatch):
    seen = []
    real = tiny.warm_up
    monkeypatch.setattr(tiny, "warm_up", lambda *a, **k: (seen.append(torch.get_num_threads()), real(*a, **k))[1])
    cfg = load_config(None, SMALL + ["model.warmup.threads=1", f"model.warmup.cache_dir={tmp_path}"])
    before = torch.get_num_threads()
    load_base(cfg, make_env("arithmetic", num_levels=2), set(), progress=False)
    assert seen == [1] and torch.get_num_threads() == before


def test_damaged_entry_is_rebuilt(tmp_path, caplog):
    cfg = load_config(None, SMALL + [f"model.warmup.cache_dir={tmp_path}"])
    env = make_env("arithmetic", num_levels=2)
    first, _ = load_base(cfg, env, set(), progress=False)
    (entry,) = [p for p in tmp_path.iterdir() if p.name.startswith("tiny-") and p.is_dir()]
    weights = next(entry.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one flipped bit in the last weight
    weights.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        again, _ = load_base(cfg, env, set(), progress=False)
    assert "does not match its recorded checksum" in caplog.text
    for a, b in zip(first.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)  # rebuilt, deterministically, not the flipped copy
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_base(cfg, env, set(), progress=False)
    assert "checksum" not in caplog.text  # the rebuilt entry is intact


def test_bucketed_warmup_loss_and_gradient_equal_one_padded_batch():
    from curriculum.engine.tiny import batch_loss, build_model, build_tokenizer, encode_pairs, length_buckets

    assert length_buckets([10, 3, 4, 30, 11, 5]) == [[1, 2], [5], [0, 4], [3]]
    tok = build_tokenizer()
    torch.manual_seed(0)
    model = build_model(tok, 16, 1, 2, 64)
    pairs = [("7394=", "363"), ("L:12\nL:345\nL:", "6789"), ("12=", "3"), ("L:1234567\nL:7654321\nL:", "99999")]
    loss = batch_loss(model, tok, pairs)
    bucketed = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    ids, attn, mask = encode_pairs(tok, pairs)
    whole = model(input_ids=ids, attention_mask=attn, labels=ids.masked_fill(mask == 0, -100)).loss
    whole.backward()
    assert float(loss) == pytest.approx(float(whole), rel=1e-5)
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, bucketed[n], atol=1e-6), n


def test_concurrent_builders_of_one_entry_build_it_once(tmp_path):
    tok = tiny.build_tokenizer()
    builds = []

    def build():
        builds.append(1)
        time.sleep(0.3)  # long enough for the other caller to arrive while this one builds
        torch.manual_seed(0)
        return tiny.build_model(tok, 16, 1, 2, 32)

    with ThreadPoolExecutor(3) as pool:
        models = list(pool.map(lambda _: tiny.load_or_build(str(tmp_path), {"k": 1}, build), range(3)))
    assert len(builds) == 1
    for m in models[1:]:
        for a, b in zip(models[0].state_dict().values(), m.state_dict().values()):
            assert torch.equal(a, b)
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
