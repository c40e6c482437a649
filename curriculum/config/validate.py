"""The checks of a loaded config: every value against its type and range, then the names that must be
registered, the combinations, the files, the device and the environment's constructor.

The only part of the config that reads the registries (environments, frontier rewards, samplers,
estimators, tools, alarms); it imports them inside the checks, so importing the config (as the
engine does, for the schema) loads none of them. Only model.lora.target_modules waits for the
model (curriculum/engine/policy.py checks them).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from curriculum.config.paths import TOKENIZER_FILES, has_tokenizer, local_model_dir
from curriculum.config.schema import MODES, Config, LossConfig, RoleConfig, ToolUseConfig, flatten, key_specs
from curriculum.errors import ConfigError

# Checkpoint names hold the stage inside a round in three digits (round_0002+003).
MAX_STAGES = 999


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise ConfigError(msg)


def validate(cfg: Config) -> None:
    """Every value, then the combinations; each message names the keys and the numbers."""
    _check_values(cfg)
    _check_choices(cfg)
    _check_combinations(cfg)
    _check_distributed(cfg)
    _check_rollout(cfg)
    _check_paths(cfg)
    _check_device(cfg)
    _check_env(cfg)


def _check_values(cfg: Config) -> None:
    """Types and ranges, key by key: numbers finite and in their Range, strings without NUL (no path holds one)."""
    specs = key_specs()
    for key, value in flatten(dataclasses.asdict(cfg)).items():
        kind, allowed = specs[key].type, specs[key].range
        if kind == "int":
            _need(isinstance(value, int) and not isinstance(value, bool), f"{key} ({value!r}) must be an integer")
        elif kind == "float":
            _need(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
                  f"{key} ({value!r}) must be a finite number")
        elif kind == "str":
            _need("\0" not in value, f"{key} ({value!r}) contains a NUL character")
        if allowed is not None:
            _need(value in allowed, f"{key} ({value}) must be {allowed}")


def _check_choices(cfg: Config) -> None:
    """Names that must be one of a list (registries, modes, devices)."""
    from challenger.rewards import FRONTIER_REWARDS
    from curriculum.engine.rl import AGGREGATIONS, ESTIMATORS
    from curriculum.envs import ENVIRONMENTS
    from curriculum.health import ALARMS
    from curriculum.pool import SAMPLERS
    from solver.tools import TOOLS

    _need(cfg.env.name in ENVIRONMENTS, f"env.name {cfg.env.name!r} is not registered; choose from {sorted(ENVIRONMENTS)}")
    _need(cfg.reward.frontier in FRONTIER_REWARDS, f"reward.frontier {cfg.reward.frontier!r}; choose from {sorted(FRONTIER_REWARDS)}")
    _need(cfg.curriculum.mode in MODES, f"curriculum.mode {cfg.curriculum.mode!r}; choose from {', '.join(MODES)}")
    _need(cfg.curriculum.sampler in SAMPLERS, f"curriculum.sampler {cfg.curriculum.sampler!r}; choose from {sorted(SAMPLERS)}")
    _need(cfg.curriculum.reference_sampler in SAMPLERS,
          f"curriculum.reference_sampler {cfg.curriculum.reference_sampler!r}; choose from {sorted(SAMPLERS)}")
    _need(cfg.prompt.style in ("auto", "chat", "plain"), f"prompt.style {cfg.prompt.style!r}; choose auto, chat or plain")
    _need(cfg.run.device in ("auto", "cpu", "cuda"), f"run.device {cfg.run.device!r}; choose auto, cpu or cuda")
    _need(cfg.model.tiny.position in ("rope", "nope"), f"model.tiny.position {cfg.model.tiny.position!r}; choose rope or nope")
    _need(cfg.model.dtype in ("float32", "bfloat16", "float16"), f"model.dtype {cfg.model.dtype!r}; choose float32, bfloat16 or float16")
    if cfg.model.attn_implementation:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        kernels = ["eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()]
        _need(cfg.model.attn_implementation in kernels,
              f"model.attn_implementation {cfg.model.attn_implementation!r}; choose from {', '.join(kernels)}, or empty")
    _need(cfg.rl.backend in ("auto", "torch", "triton"), f"rl.backend {cfg.rl.backend!r}; choose auto, torch or triton")
    _need(cfg.wandb.mode in ("offline", "online", "disabled"), f"wandb.mode {cfg.wandb.mode!r}; choose offline, online or disabled")
    for name in cfg.health.stop_on:
        _need(name in ALARMS, f"health.stop_on: {name!r} is not an alarm; choose from {', '.join(ALARMS)}")
    for role in ("challenger", "solver"):
        tc: ToolUseConfig = getattr(cfg, role)
        for name in tc.tools:
            _need(name in TOOLS, f"{role}.tools: {name!r} is not a tool; choose from {sorted(TOOLS)}")
        _need(len(set(tc.tools)) == len(tc.tools), f"{role}.tools ({tc.tools}) names a tool twice")
        _need(not tc.tools or tc.max_turns >= 2, f"{role}.tools ({tc.tools}) needs {role}.max_turns >= 2 (got "
              f"{tc.max_turns}): a tool's output is read in the next turn")
    for role in ("challenger", "solver"):
        lc: LossConfig = getattr(cfg, role).loss
        _need(lc.estimator in ESTIMATORS, f"{role}.loss.estimator {lc.estimator!r}; choose from {sorted(ESTIMATORS)}")
        _need(lc.aggregation in AGGREGATIONS, f"{role}.loss.aggregation {lc.aggregation!r}; choose from {list(AGGREGATIONS)}")


def _check_combinations(cfg: Config) -> None:
    """Values that are fine alone but not together, and the few that no range can say."""
    _need(bool(cfg.run.dir.strip()), "run.dir is empty; name the run directory (the run would write into the current one)")
    lora = cfg.model.lora
    _need(bool(lora.target_modules) and all(name.strip() for name in lora.target_modules),
          f"model.lora.target_modules ({lora.target_modules}) must list module names, none empty")
    t = cfg.model.tiny
    _need(t.hidden_size % (2 * t.heads) == 0,
          f"model.tiny.hidden_size ({t.hidden_size}) must be a multiple of 2 x model.tiny.heads ({t.heads}): "
          "each head's width must be even (rotary position embeddings)")
    lo, hi = cfg.curriculum.band_low, cfg.curriculum.band_high
    _need(lo <= hi, f"curriculum.band_low ({lo}) <= curriculum.band_high ({hi}) must lie in [0, 1]")
    cc = cfg.curriculum
    _need(cc.probe_samples_max == 0 or cc.probe_samples_max > cc.probe_samples,
          f"curriculum.probe_samples_max ({cc.probe_samples_max}) must be 0 or more than curriculum.probe_samples ({cc.probe_samples})")
    _need(cfg.prompt.style != "chat" or bool(cfg.model.path),
          "prompt.style=chat needs a model.path model with a chat template; the embedded tiny model reads plain prompts")
    _need(not cc.pseudo_labels or cc.mode == "selfplay",
          f"curriculum.pseudo_labels labels the challenger's proposals; curriculum.mode={cc.mode} has none")
    ec = cfg.eval
    _need(ec.greedy or ec.samples > 0, "eval.greedy=false and eval.samples=0 leave nothing to evaluate")
    _need(ec.samples == 0 or ec.temperature > 0,
          f"eval.samples ({ec.samples}) > 0 needs eval.temperature > 0 (got {ec.temperature}): greedy samples are all the same")
    stages = cfg.challenger.steps + 1 + cfg.solver.steps
    _need(stages <= MAX_STAGES, f"challenger.steps ({cfg.challenger.steps}) + 1 + solver.steps ({cfg.solver.steps}) must "
                                f"be <= {MAX_STAGES} (checkpoint names hold the stage of a round in three digits)")
    for role in ("challenger", "solver"):
        rc: RoleConfig = getattr(cfg, role)
        lc = rc.loss
        _need(lc.clip_ratio_c == 0 or lc.clip_ratio_c > 1, f"{role}.loss.clip_ratio_c ({lc.clip_ratio_c}) must be > 1, or 0 (off)")
        _need(lc.delta == 0 or lc.delta > 1 + lc.clip_high,
              f"{role}.loss.delta ({lc.delta}) must be > 1 + {role}.loss.clip_high ({1 + lc.clip_high}), or 0 (off)")
        batch = rc.batch_prompts * rc.group_size
        mb = lc.minibatch_size
        _need(mb == 0 or (batch % mb == 0 and mb % rc.group_size == 0),
              f"{role}.loss.minibatch_size ({mb}) must divide batch_prompts*group_size ({batch}) and be a multiple of group_size ({rc.group_size})")


def _check_paths(cfg: Config) -> None:
    """Files the run reads: the model and tokenizer directories, a DeepSpeed JSON."""
    import json

    m = cfg.model
    if not m.path:
        for key in ("tokenizer_path", "revision", "trust_remote_code", "attn_implementation"):
            _need(not getattr(m, key), f"model.{key} ({getattr(m, key)!r}) applies to a model.path model; "
                                       "model.path is empty (the embedded tiny model)")
    else:
        where = local_model_dir(m.path, m.revision)
        at = f" at revision {m.revision!r}" if m.revision else ""
        _need(where is not None, f"model.path {m.path!r} is not a local directory, nor a model id in the local "
                                 f"Hugging Face cache{at} (nothing is downloaded)")
        _need(not m.revision or not Path(m.path).expanduser().is_dir(),
              f"model.revision ({m.revision!r}) picks a version of a model id in the Hugging Face cache; "
              f"model.path {m.path!r} is a directory, which holds one version: leave model.revision empty")
        _need((where / "config.json").is_file(), f"model.path {m.path!r} has no config.json: not a Hugging Face model directory")
        # transformers builds an empty tokenizer from a directory without one, rather than failing
        _need(bool(m.tokenizer_path) or has_tokenizer(where), f"model.path {m.path!r} holds no tokenizer "
              f"({', '.join(TOKENIZER_FILES)}); name its directory in model.tokenizer_path")
    if m.tokenizer_path:
        where = local_model_dir(m.tokenizer_path)
        _need(where is not None, f"model.tokenizer_path {m.tokenizer_path!r} is not a local directory, nor a model id "
                                 "in the local Hugging Face cache (nothing is downloaded)")
        _need(has_tokenizer(where), f"model.tokenizer_path {m.tokenizer_path!r} holds no tokenizer ({', '.join(TOKENIZER_FILES)})")
    ds = cfg.distributed.deepspeed_config
    if cfg.distributed.engine == "deepspeed" and ds:
        path = Path(ds).expanduser()
        _need(path.is_file(), f"distributed.deepspeed_config {ds!r} is not a file")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"distributed.deepspeed_config {ds!r} is not readable JSON: {exc}") from exc
        _need(isinstance(data, dict), f"distributed.deepspeed_config {ds!r} must hold a JSON object, not {data!r}")


def _check_device(cfg: Config) -> None:
    """What the config asks of the hardware: a CUDA device must exist to be asked for."""
    import torch

    cuda = torch.cuda.is_available()
    _need(cfg.run.device != "cuda" or cuda, "run.device=cuda but torch sees no CUDA device; use run.device=auto or cpu")
    _need(cfg.rl.backend != "triton" or (cuda and cfg.run.device != "cpu"),
          "rl.backend=triton needs a CUDA device (on a CPU use rl.backend=auto or torch)")


def _check_env(cfg: Config) -> None:
    """Build the environment once: its constructor checks env.kwargs (a failure names them)."""
    from curriculum.envs import make_env

    kwargs = cfg.env.kwargs
    _need(all(isinstance(k, str) for k in kwargs), f"env.kwargs ({kwargs}) must be keyword names")
    env = make_env(cfg.env.name, **kwargs)
    _need(bool(cfg.model.path) or not getattr(env, "needs_pretrained_model", False),
          f"env.name={cfg.env.name} needs a pretrained model (its prompts are natural language); set model.path "
          "to a local instruct model (the embedded tiny model reads only the toy environments)")
    _need(not cfg.curriculum.pseudo_labels or (hasattr(env, "extract_answer") and hasattr(env, "same_answer")),
          f"curriculum.pseudo_labels needs an environment that extracts answers (extract_answer and same_answer); "
          f"env.name={cfg.env.name} has none")


def _check_distributed(cfg: Config) -> None:
    dc = cfg.distributed
    _need(dc.engine in ("torch", "deepspeed"), f"distributed.engine {dc.engine!r}; choose torch or deepspeed")
    _need(dc.offload in ("none", "optimizer", "all"), f"distributed.offload {dc.offload!r}; choose none, optimizer or all")
    _need(dc.offload != "all" or dc.zero_stage == 3,
          f"distributed.offload=all offloads parameters, which needs distributed.zero_stage=3 (got {dc.zero_stage})")
    _need(dc.rollout_seed in ("batch", "group"), f"distributed.rollout_seed {dc.rollout_seed!r}; choose batch or group")
    if dc.engine == "deepspeed":
        _need(cfg.model.dtype != "float16", "distributed.engine=deepspeed trains in float32 or bfloat16 (with fp32 master "
                                            "weights); set model.dtype=bfloat16 instead of float16")
        _need(not (cfg.model.lora.enabled and cfg.model.share_base and dc.zero_stage == 3),
              "model.share_base=true with distributed.zero_stage=3: two engines cannot partition one shared base; "
              "use zero_stage 0-2 (the frozen base is replicated, adapters and their optimizer states are sharded) "
              "or model.share_base=false")


def _check_rollout(cfg: Config) -> None:
    rc = cfg.rollout
    _need(rc.engine in ("hf", "vllm"), f"rollout.engine {rc.engine!r}; choose hf or vllm")
    _need(rc.tis_cap == 0 or rc.tis_cap >= 1, f"rollout.tis_cap ({rc.tis_cap}) must be >= 1, or 0 (off)")
    if rc.engine == "vllm":
        import importlib.util

        _need(importlib.util.find_spec("vllm") is not None,
              "rollout.engine=vllm but the vllm package is not installed in this environment: pip install vllm "
              "(CUDA; see docs/vllm.md), or use rollout.engine=hf")
