"""The starting model of a run: a local Hugging Face model, or the embedded tiny model warmed up on
the environment's generator (cached by everything it depends on).

The warm-up is curriculum logic: it reads curriculum.references, solver.tools and the benchmark's
seed, and teaches the challenger's prompt format. The engine only gets the ready model.
"""
from __future__ import annotations

import hashlib
import inspect
import platform
from pathlib import Path

import torch

from curriculum.config import Config
from curriculum.engine import tiny
from curriculum.engine.distributed import resolve_device
from curriculum.engine.policy import DTYPES, load_checkpoint_role, load_pretrained, load_tokenizer

ROOT = Path(__file__).resolve().parent.parent  # the repository: curriculum/, solver/, ...


def warmup_sources(env, tools: bool) -> list[Path]:
    """The source files whose code shapes a warmed-up model: the warm-up and prompt code, the environment's
    module (its generator and formats; every built-in environment module, since they share helpers) and,
    with tools, the tool demonstrations'."""
    engine = ROOT / "curriculum" / "engine"
    module = Path(inspect.getfile(type(env))).resolve()
    files = {engine / "tiny.py", engine / "prompts.py", module}
    envs = ROOT / "curriculum" / "envs"
    if envs in module.parents:
        files |= set(envs.glob("*.py"))
    if tools:
        files |= {ROOT / "solver" / "tools.py", ROOT / "solver" / "role.py"}
    return sorted(files)


def warmup_code_digest(env, tools: bool) -> str:
    """SHA-256 over ``warmup_sources``: a changed generator or warm-up never reuses a stale cached model."""
    digest = hashlib.sha256()
    for path in warmup_sources(env, tools):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo, else ``platform.processor()``): BLAS libraries pick
    kernels by vendor and model, not only by instruction set."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def warmup_key(cfg: Config, env, challenger_prompt=None) -> dict:
    """Everything the warmed-up embedded model depends on: its cache entry is named by this dict's hash.

    The config parts that shape it, the seed, the warm-up's thread count, the CPU kernels torch
    dispatches to (AVX2, AVX-512, ...) and the CPU model (its arithmetic depends on all three),
    the torch and transformers versions and the code that generates and trains on its examples
    (``warmup_code_digest``).
    """
    import transformers

    t, w = cfg.model.tiny, cfg.model.warmup
    references = cfg.curriculum.references
    tools = cfg.solver.tools
    extra = {"tools": [tools, cfg.solver.tool_prompt, cfg.solver.tool_output_chars]} if tools else {}
    # Without tools the key is what it was before they existed: cached models stay valid.
    skip = {"cache_dir"} | (set() if tools else {"tool_fraction"})
    tiny_key = {k: v for k, v in vars(t).items() if k != "position" or v != "rope"}  # rope: the key it had before
    return {**extra, "tiny": tiny_key, "warmup": {k: v for k, v in vars(w).items() if k not in skip},
            "env": cfg.env.name, "env_kwargs": dict(cfg.env.kwargs), "seed": cfg.run.seed,
            "eval": [cfg.eval.seed, cfg.eval.per_level], "references": references,
            "example_prompt": challenger_prompt([]) if references else env.challenger_prompt(),
            "torch": torch.__version__, "transformers": transformers.__version__, "version": 4,
            "cpu_kernels": torch.backends.cpu.get_cpu_capability(), "cpu": cpu_model(),
            "code": warmup_code_digest(env, bool(tools))}


def load_base(cfg: Config, env, exclude: set[str], progress: bool, challenger_prompt=None, tool_demo=None):
    """The starting model and tokenizer: a local HF model, or the warmed-up embedded one.

    The warm-up runs on ``model.warmup.threads`` threads and its cache key names everything
    that changes the result (config, seed, thread count, CPU kernels and model, torch and transformers versions).
    ``exclude`` holds the held-out tasks' texts, never taught.
    ``challenger_prompt(references)`` renders reference-conditioned challenger prompts
    (``curriculum.references`` > 0); ``tool_demo(task)`` writes a solved task as a tool call
    (``solver.tools``; ``Solver.demonstration``).
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per shard per checkpoint is noise in training logs
    tokenizer = load_tokenizer(cfg)
    if cfg.model.path:
        return load_pretrained(cfg.model), tokenizer
    t, w = cfg.model.tiny, cfg.model.warmup

    def build():
        threads = torch.get_num_threads()
        torch.set_num_threads(w.threads)
        try:
            torch.manual_seed(cfg.run.seed)
            model = tiny.build_model(tokenizer, t.hidden_size, t.layers, t.heads, t.max_positions, t.position)
            tiny.warm_up(model, tokenizer, env, steps=w.steps, batch_size=w.batch_size, lr=w.lr,
                         solver_max_level=min(w.solver_max_level, env.num_levels), seed=cfg.run.seed,
                         exclude=exclude, challenger_fraction=w.challenger_fraction, references=cfg.curriculum.references,
                         challenger_prompt=challenger_prompt, level_decay=w.level_decay,
                         tool_demo=tool_demo if cfg.solver.tools else None, tool_fraction=w.tool_fraction,
                         progress=progress)
        finally:
            torch.set_num_threads(threads)
        return model

    model = tiny.load_or_build(w.cache_dir, warmup_key(cfg, env, challenger_prompt), build, progress=progress)
    return model.to(DTYPES[cfg.model.dtype]), tokenizer


def load_role(cfg: Config, checkpoint: Path, name: str, env, exclude: set[str], challenger_prompt=None,
              tool_demo=None):
    """Role ``name`` of a checkpoint (``policy.load_checkpoint_role``); a LoRA checkpoint older than its
    ``base/`` gets the warmed-up embedded model back (rebuilt, or taken from its cache)."""
    return load_checkpoint_role(cfg, checkpoint, name, lambda: load_base(cfg, env, exclude, False, challenger_prompt,
                                                                          tool_demo))


def load_solver(cfg: Config, checkpoint: Path, env, exclude: set[str], challenger_prompt=None, tool_demo=None):
    """The solver of a checkpoint, for evaluation: one role, no optimizer, on ``run.device``."""
    role, tokenizer = load_role(cfg, checkpoint, "solver", env, exclude, challenger_prompt, tool_demo)
    role.model.to(resolve_device(cfg.run.device))
    return role, tokenizer
