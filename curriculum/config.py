"""Typed run configuration: one dataclass per component, YAML files, ``key=value`` overrides.

Every field's docstring is the comment line above it; ``selfplay config-keys``
prints them and the README's table is checked against them by a test.
Unknown keys and impossible combinations fail here, before any model is built.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from curriculum.errors import ConfigError


@dataclass
class RunConfig:
    # Run directory: config.yaml, metrics.jsonl, tasks/, checkpoints/ go here.
    dir: str = "runs/demo"
    # Seed of every random stream in the run (per-rank offsets are added).
    seed: int = 0
    # "auto" (cuda if available, else cpu), "cpu" or "cuda".
    device: str = "auto"
    # torch intra-op threads; 0 leaves torch's default.
    threads: int = 0
    # Deterministic algorithms (bitwise-reproducible runs; a bit slower on GPU).
    deterministic: bool = True
    # Your code, imported before the config is checked: modules (my_pkg.envs) or .py files;
    # their @register_env / @register_frontier_reward / ... then count, on every rank and resume.
    plugins: list[str] = field(default_factory=list)


@dataclass
class LoraConfig:
    # Train LoRA adapters through peft instead of full weights.
    enabled: bool = False
    # LoRA rank.
    r: int = 8
    # LoRA alpha (scale = alpha / r).
    alpha: int = 16
    # Dropout on the LoRA path.
    dropout: float = 0.0
    # Module names that get adapters.
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class TinyModelConfig:
    # Hidden size of the embedded model.
    hidden_size: int = 128
    # Transformer layers of the embedded model.
    layers: int = 2
    # Attention heads of the embedded model.
    heads: int = 4
    # Longest sequence (prompt + completion) in tokens.
    max_positions: int = 64


@dataclass
class WarmupConfig:
    # Supervised steps on the environment's generator before round 1 (embedded model only).
    steps: int = 600
    # Sequences per warm-up step.
    batch_size: int = 128
    # Warm-up learning rate.
    lr: float = 3e-3
    # Solver examples come from levels 1..solver_max_level (the rest must be learned by RL).
    solver_max_level: int = 3
    # Weight of solver examples of level L: level_decay ** (L - 1); below 1 the top levels are seen
    # less (learned in part, a frontier for RL to push); 1 = uniform.
    level_decay: float = 1.0
    # Share of warm-up examples that teach the challenger's proposal format.
    challenger_fraction: float = 0.5
    # torch threads of the warm-up, whatever run.threads says: the warmed-up model (and the cache
    # entry) depends on the thread count, so one seed gives one starting model on any machine.
    threads: int = 1
    # Directory caching warmed-up models by config hash; empty string disables the cache.
    cache_dir: str = "~/.cache/selfplay"


@dataclass
class ModelConfig:
    # Local Hugging Face model directory; empty means the embedded tiny model.
    path: str = ""
    # Parameter dtype: float32, bfloat16 or float16.
    dtype: str = "float32"
    # With LoRA: both roles share one frozen base with two adapters (one copy of weights).
    share_base: bool = True
    # Gradient checkpointing in the policy forward.
    gradient_checkpointing: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)


@dataclass
class EnvConfig:
    # Registered environment name (see curriculum/envs).
    name: str = "arithmetic"
    # Keyword arguments of the environment's constructor.
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class SamplingConfig:
    # Sampling temperature.
    temperature: float = 1.0
    # Nucleus sampling threshold (1.0 = off).
    top_p: float = 1.0
    # Longest completion in tokens.
    max_new_tokens: int = 16
    # Sequences per generate() call.
    batch_size: int = 256


@dataclass
class OptimConfig:
    # AdamW learning rate.
    lr: float = 1e-4
    # AdamW weight decay.
    weight_decay: float = 0.0
    # Global gradient-norm clip (0 = off).
    grad_clip: float = 1.0
    # Linear learning-rate warm-up in optimizer steps.
    warmup_steps: int = 0


@dataclass
class LossConfig:
    # Advantage estimator: grpo, dr_grpo, rloo or reinforce_pp.
    estimator: str = "grpo"
    # Lower clip range of the ratio (1 - clip_low).
    clip_low: float = 0.2
    # Upper clip range (1 + clip_high); > clip_low is DAPO's clip-higher.
    clip_high: float = 0.28
    # Weight of the k3 KL penalty to the reference (initial) model; 0 = no reference.
    kl_coef: float = 0.0
    # token-mean, seq-mean-token-mean or seq-mean-token-sum-norm.
    aggregation: str = "token-mean"
    # Passes over each rollout batch (PPO epochs).
    epochs: int = 1
    # Sequences per optimizer step; 0 = the whole rollout batch.
    minibatch_size: int = 0


@dataclass
class RoleConfig:
    # Prompts (GRPO groups) per update step.
    batch_prompts: int = 16
    # Samples per prompt (GRPO group size G).
    group_size: int = 8
    # GRPO update steps per round.
    steps: int = 2
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)


@dataclass
class RewardConfig:
    # Frontier reward of the challenger: uncertainty (R-Zero) or learnability (Absolute Zero).
    frontier: str = "uncertainty"
    # Weight lambda of the repetition penalty.
    repetition_coef: float = 1.0
    # BLEU distance under which two proposals are near-duplicates.
    repetition_threshold: float = 0.5
    # Reward of a proposal the environment rejects (the format gate).
    invalid: float = -1.0


@dataclass
class CurriculumConfig:
    # Where the solver's tasks come from: selfplay (the challenger's proposals, probed into a pool),
    # uniform (the generator, levels drawn uniformly), uniform_filtered (uniform, oversampled; groups whose
    # answers all score the same are dropped and refilled, as DAPO) or adaptive (no challenger: levels drawn
    # with weight p(1-p) from a running per-level solve rate).
    mode: str = "selfplay"
    # Solver samples per task when probing (m).
    probe_samples: int = 8
    # Up to this many samples for a task whose band decision is uncertain after probe_samples
    # (p within 1.5 standard errors of band_low or band_high); 0 = never more.
    probe_samples_max: int = 0
    # Sampling temperature of probing; 0 = the solver's training temperature (solver.sampling.temperature).
    probe_temperature: float = 0.0
    # Reference tasks in each challenger prompt (drawn per group from the pool; the generator's level-1
    # tasks while the pool is empty); 0 = the environment's plain prompt.
    references: int = 0
    # Fresh proposals generated to fill the pool each round.
    fill_proposals: int = 128
    # Lowest solve rate admitted to the pool.
    band_low: float = 0.2
    # Highest solve rate admitted to the pool.
    band_high: float = 0.8
    # Most tasks the pool holds (oldest leave first).
    pool_capacity: int = 512
    # Rounds a task stays in the pool.
    max_age: int = 3
    # How the solver's batches are drawn from the pool: frontier or uniform.
    sampler: str = "frontier"
    # Highest level the generator arms (uniform, uniform_filtered, adaptive) draw; 0 = every level.
    max_level: int = 0
    # uniform_filtered: most batches of tasks drawn per solver step before training on what was kept.
    filter_max_batches: int = 4
    # adaptive: weight every level keeps on top of p(1-p), so closed levels are revisited.
    adaptive_floor: float = 0.02


@dataclass
class TrainConfig:
    # Number of rounds.
    rounds: int = 6


@dataclass
class EvalConfig:
    # Seed of the held-out benchmark; training never draws from it.
    seed: int = 987654321
    # Held-out tasks per difficulty level.
    per_level: int = 40
    # Longest answer in tokens.
    max_new_tokens: int = 16
    # Score greedy answers: eval/accuracy and eval/accuracy/tier_L.
    greedy: bool = True
    # Sampled answers per held-out task: mean@k in eval/mean_at_k and eval/mean_at_k/tier_L; 0 = none.
    samples: int = 0
    # Sampling temperature of those answers (set it to solver.sampling.temperature to measure what GRPO trains).
    temperature: float = 1.0
    # Score every N rounds (round 0 and the last round always).
    every: int = 1


@dataclass
class CheckpointConfig:
    # Complete checkpoints kept (older ones are deleted).
    keep_last: int = 3
    # Also checkpoint inside a round every K steps (challenger/fill/solver stages); 0 = round ends only.
    every_steps: int = 0


@dataclass
class WandbConfig:
    # offline (default, no network), online or disabled.
    mode: str = "offline"
    # wandb project.
    project: str = "selfplay"
    # wandb entity (team); empty = default.
    entity: str = ""
    # Run name; empty = the run directory's name.
    name: str = ""


@dataclass
class LogConfig:
    # Show progress bars.
    progress: bool = True
    # Sample proposals and answers logged per round (wandb table, tasks file has all).
    samples: int = 8
    # Rewrite RUN_DIR/dashboard.html (the local dashboard) after every round.
    dashboard: bool = True


@dataclass
class RLConfig:
    # Kernel backend for advantages, loss and log-probs: auto, torch or triton.
    backend: str = "auto"


@dataclass
class DistributedConfig:
    # torch (one process, plain optimizer) or deepspeed (ZeRO; required for more than one process).
    engine: str = "torch"
    # ZeRO stage with engine=deepspeed: 0 (replicated), 1 (optimizer states sharded), 2 (+ gradients), 3 (+ parameters).
    zero_stage: int = 2
    # ZeRO offload to host memory: none, optimizer (optimizer states) or all (optimizer states and parameters; stage 3).
    offload: str = "none"
    # Sequences per rank per forward/backward; 0 = a rank's whole share of a minibatch (gradient accumulation otherwise).
    micro_batch_size: int = 0
    # Rollout seeding: batch (one stream per phase step and rank; rank 0 of 1 = the single-process run) or group (one stream per GRPO group: samples independent of the number of ranks).
    rollout_seed: str = "batch"
    # Optional DeepSpeed JSON whose keys override the generated DeepSpeed config (e.g. configs/deepspeed/zero3_offload.json).
    deepspeed_config: str = ""
    # Seconds a collective waits for the other ranks before the run fails.
    timeout_s: int = 1800


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    challenger: RoleConfig = field(default_factory=RoleConfig)
    solver: RoleConfig = field(default_factory=RoleConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    log: LogConfig = field(default_factory=LogConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)


# Where the solver's tasks come from (curriculum.mode).
MODES = ("selfplay", "uniform", "uniform_filtered", "adaptive")

# Keys whose values are free-form mappings (their sub-keys are not checked here).
_FREE_KEYS = {"env.kwargs"}

# Keys that may change when a run is resumed; every other change is refused.
# distributed.*: checkpoints are independent of the engine and the number of ranks.
RESUMABLE_KEYS = ("train.rounds", "run.dir", "run.threads", "log.", "wandb.", "checkpoint.", "distributed.")


def is_resumable(key: str) -> bool:
    """True for keys that may differ between a run and its resumption."""
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in RESUMABLE_KEYS)


@dataclass(frozen=True)
class KeySpec:
    """One dotted config key: its type as annotated, its default, and its doc comment."""

    type: str
    default: Any
    doc: str


def key_specs(cls=Config, prefix: str = "") -> dict[str, KeySpec]:
    """Every dotted key of ``cls`` with its type, default and doc, in declaration order."""
    docs = _field_docs(cls)
    out: dict[str, KeySpec] = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        sub = _dataclass_type(f)
        if sub is not None:
            out.update(key_specs(sub, key + "."))
        else:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            out[key] = KeySpec(kind, default, docs.get(f.name, ""))
    return out


def valid_keys(cls=Config, prefix: str = "") -> dict[str, str]:
    """Every dotted key of ``cls`` mapped to its comment (the field's doc)."""
    return {k: spec.doc for k, spec in key_specs(cls, prefix).items()}


def _dataclass_type(f: dataclasses.Field):
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return type(default) if dataclasses.is_dataclass(default) else None


def _field_docs(cls) -> dict[str, str]:
    """Field name -> the ``#`` comment lines right above it in the class body."""
    import inspect

    docs: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines()[1:]:
        s = line.strip()
        if s.startswith("#"):
            pending.append(s.lstrip("# "))
        elif ":" in s and not s.startswith(("def ", "@", '"')):
            docs[s.split(":", 1)[0].strip()] = " ".join(pending)
            pending = []
        else:
            pending = []
    return docs


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in _FREE_KEYS:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def check_keys(keys, source: str) -> None:
    """Fail on the first unknown dotted key, naming the nearest valid ones."""
    known = valid_keys()
    groups = {k.rsplit(".", 1)[0] for k in known}
    for key in keys:
        if key in known or any(key.startswith(free + ".") for free in _FREE_KEYS):
            continue
        if key in groups:
            raise ConfigError(f"{source}: {key!r} is a section, set one of its keys (e.g. {key}.<name>=...)")
        near = difflib.get_close_matches(key, list(known), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise ConfigError(f"{source}: unknown config key {key!r}{hint}")


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> ``{"a.b": 1, "c": "x"}`` with YAML typing of values."""
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults <- YAML file <- overrides, validated. Raises ConfigError."""
    base = OmegaConf.structured(Config)
    layers = []
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
        check_keys(_flatten(data), str(path))
        layers.append(OmegaConf.create(data))
    ov = parse_overrides(overrides or [])
    check_keys(ov, "override")
    for key, value in ov.items():
        layer = OmegaConf.create()
        OmegaConf.update(layer, key, value, force_add=True)
        layers.append(layer)
    try:
        merged = OmegaConf.merge(base, *layers)
        for key in _FREE_KEYS & ov.keys():  # given whole, a free mapping replaces the file's (kwargs of another env)
            OmegaConf.update(merged, key, ov[key], merge=False)
        cfg: Config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(_omegaconf_message(exc)) from exc
    # Files are kept as absolute paths, so config.yaml finds them from any directory on resume.
    cfg.run.plugins = [str(Path(p).resolve()) if _is_file_plugin(p) else p for p in cfg.run.plugins]
    import_plugins(cfg.run.plugins)
    validate(cfg)
    return cfg


def _is_file_plugin(entry: str) -> bool:
    return entry.endswith(".py") or "/" in entry


def import_plugins(plugins: list[str]) -> None:
    """Import each ``run.plugins`` entry once: a dotted module name, or a path to a .py file
    (relative to the working directory). An entry that fails is a ConfigError naming it."""
    import importlib
    import importlib.util
    import sys

    for entry in plugins:
        try:
            if _is_file_plugin(entry):
                path = Path(entry).resolve()
                name = "selfplay_plugin_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
                if name in sys.modules:
                    continue
                if not path.is_file():
                    raise FileNotFoundError(f"no such file {str(path)!r}")
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[name]
                    raise
            else:
                importlib.import_module(entry)
        except Exception as exc:  # noqa: BLE001 - any failure is the plugin's, named as such
            raise ConfigError(f"run.plugins: cannot import {entry!r}: {type(exc).__name__}: {exc}") from exc


def _omegaconf_message(exc: OmegaConfBaseException) -> str:
    key = getattr(exc, "full_key", None)
    first = str(exc).splitlines()[0]
    return f"config key {key!r}: {first}" if key else first


def validate(cfg: Config) -> None:
    """Cross-field checks; each message names the keys and the numbers."""
    from challenger.rewards import FRONTIER_REWARDS
    from curriculum.envs import ENVIRONMENTS
    from curriculum.pool import SAMPLERS
    from curriculum.engine.rl import AGGREGATIONS, ESTIMATORS

    def need(ok: bool, msg: str):
        if not ok:
            raise ConfigError(msg)

    need(cfg.train.rounds >= 1, f"train.rounds ({cfg.train.rounds}) must be >= 1")
    need(cfg.env.name in ENVIRONMENTS, f"env.name {cfg.env.name!r} is not registered; choose from {sorted(ENVIRONMENTS)}")
    need(cfg.reward.frontier in FRONTIER_REWARDS, f"reward.frontier {cfg.reward.frontier!r}; choose from {sorted(FRONTIER_REWARDS)}")
    need(cfg.curriculum.mode in MODES, f"curriculum.mode {cfg.curriculum.mode!r}; choose from {', '.join(MODES)}")
    need(cfg.curriculum.sampler in SAMPLERS, f"curriculum.sampler {cfg.curriculum.sampler!r}; choose from {sorted(SAMPLERS)}")
    lo, hi = cfg.curriculum.band_low, cfg.curriculum.band_high
    need(0.0 <= lo <= hi <= 1.0, f"curriculum.band_low ({lo}) <= curriculum.band_high ({hi}) must lie in [0, 1]")
    need(cfg.curriculum.probe_samples >= 2, f"curriculum.probe_samples ({cfg.curriculum.probe_samples}) must be >= 2 to estimate a solve rate")
    need(cfg.curriculum.pool_capacity >= 1, f"curriculum.pool_capacity ({cfg.curriculum.pool_capacity}) must be >= 1")
    need(cfg.run.device in ("auto", "cpu", "cuda"), f"run.device {cfg.run.device!r}; choose auto, cpu or cuda")
    need(cfg.model.dtype in ("float32", "bfloat16", "float16"), f"model.dtype {cfg.model.dtype!r}; choose float32, bfloat16 or float16")
    need(cfg.rl.backend in ("auto", "torch", "triton"), f"rl.backend {cfg.rl.backend!r}; choose auto, torch or triton")
    need(not (cfg.rl.backend == "triton" and cfg.run.device == "cpu"),
         "rl.backend=triton needs run.device=cuda (on a CPU use rl.backend=auto or torch)")
    need(cfg.wandb.mode in ("offline", "online", "disabled"), f"wandb.mode {cfg.wandb.mode!r}; choose offline, online or disabled")
    ec = cfg.eval
    need(ec.samples >= 0 and ec.every >= 1, f"eval.samples ({ec.samples}) must be >= 0 and eval.every ({ec.every}) >= 1")
    need(ec.greedy or ec.samples > 0, "eval.greedy=false and eval.samples=0 leave nothing to evaluate")
    need(ec.samples == 0 or ec.temperature > 0,
         f"eval.samples ({ec.samples}) > 0 needs eval.temperature > 0 (got {ec.temperature}): greedy samples are all the same")
    cc = cfg.curriculum
    need(cc.probe_samples_max == 0 or cc.probe_samples_max > cc.probe_samples,
         f"curriculum.probe_samples_max ({cc.probe_samples_max}) must be 0 or more than curriculum.probe_samples ({cc.probe_samples})")
    need(cc.probe_temperature >= 0, f"curriculum.probe_temperature ({cc.probe_temperature}) must be >= 0 (0 = solver.sampling.temperature)")
    need(cc.references >= 0 and cc.max_level >= 0 and cc.filter_max_batches >= 1 and cc.adaptive_floor >= 0,
         f"curriculum.references ({cc.references}), max_level ({cc.max_level}) and adaptive_floor ({cc.adaptive_floor}) "
         f"must be >= 0 and filter_max_batches ({cc.filter_max_batches}) >= 1")
    need(cfg.checkpoint.every_steps >= 0, f"checkpoint.every_steps ({cfg.checkpoint.every_steps}) must be >= 0")
    need(cfg.checkpoint.keep_last >= 1, f"checkpoint.keep_last ({cfg.checkpoint.keep_last}) must be >= 1")
    for role in ("challenger", "solver"):
        rc: RoleConfig = getattr(cfg, role)
        need(rc.group_size >= 2, f"{role}.group_size ({rc.group_size}) must be >= 2 for group-relative advantages")
        need(rc.batch_prompts >= 1, f"{role}.batch_prompts ({rc.batch_prompts}) must be >= 1")
        need(rc.steps >= 0, f"{role}.steps ({rc.steps}) must be >= 0")
        need(rc.loss.estimator in ESTIMATORS, f"{role}.loss.estimator {rc.loss.estimator!r}; choose from {sorted(ESTIMATORS)}")
        need(rc.loss.aggregation in AGGREGATIONS, f"{role}.loss.aggregation {rc.loss.aggregation!r}; choose from {list(AGGREGATIONS)}")
        need(rc.loss.clip_low >= 0 and rc.loss.clip_high >= 0, f"{role}.loss.clip_low ({rc.loss.clip_low}) and clip_high ({rc.loss.clip_high}) must be >= 0")
        need(rc.loss.epochs >= 1, f"{role}.loss.epochs ({rc.loss.epochs}) must be >= 1")
        need(rc.optim.lr > 0, f"{role}.optim.lr ({rc.optim.lr}) must be > 0")
        need(rc.sampling.temperature > 0, f"{role}.sampling.temperature ({rc.sampling.temperature}) must be > 0")
        need(0 < rc.sampling.top_p <= 1, f"{role}.sampling.top_p ({rc.sampling.top_p}) must be in (0, 1]")
        batch = rc.batch_prompts * rc.group_size
        mb = rc.loss.minibatch_size
        need(mb == 0 or (batch % mb == 0 and mb % rc.group_size == 0),
             f"{role}.loss.minibatch_size ({mb}) must divide batch_prompts*group_size ({batch}) and be a multiple of group_size ({rc.group_size})")
    _validate_distributed(cfg, need)
    if cfg.model.path:
        need(Path(cfg.model.path).expanduser().is_dir(), f"model.path {cfg.model.path!r} is not a local directory (nothing is downloaded)")
    need(0.0 <= cfg.model.warmup.challenger_fraction <= 1.0,
         f"model.warmup.challenger_fraction ({cfg.model.warmup.challenger_fraction}) must be in [0, 1]")
    need(0 < cfg.model.warmup.level_decay <= 1, f"model.warmup.level_decay ({cfg.model.warmup.level_decay}) must be in (0, 1]")
    need(cfg.model.warmup.threads >= 1, f"model.warmup.threads ({cfg.model.warmup.threads}) must be >= 1")
    need(cfg.model.warmup.solver_max_level >= 1, f"model.warmup.solver_max_level ({cfg.model.warmup.solver_max_level}) must be >= 1")


def _validate_distributed(cfg: Config, need) -> None:
    dc = cfg.distributed
    need(dc.engine in ("torch", "deepspeed"), f"distributed.engine {dc.engine!r}; choose torch or deepspeed")
    need(dc.zero_stage in (0, 1, 2, 3), f"distributed.zero_stage ({dc.zero_stage}) must be 0, 1, 2 or 3")
    need(dc.offload in ("none", "optimizer", "all"), f"distributed.offload {dc.offload!r}; choose none, optimizer or all")
    need(dc.offload != "all" or dc.zero_stage == 3,
         f"distributed.offload=all offloads parameters, which needs distributed.zero_stage=3 (got {dc.zero_stage})")
    need(dc.micro_batch_size >= 0, f"distributed.micro_batch_size ({dc.micro_batch_size}) must be >= 0")
    need(dc.rollout_seed in ("batch", "group"), f"distributed.rollout_seed {dc.rollout_seed!r}; choose batch or group")
    need(dc.timeout_s > 0, f"distributed.timeout_s ({dc.timeout_s}) must be > 0")
    if dc.engine == "deepspeed":
        need(cfg.model.dtype != "float16", "distributed.engine=deepspeed trains in float32 or bfloat16 (with fp32 master "
                                           "weights); set model.dtype=bfloat16 instead of float16")
        need(not (cfg.model.lora.enabled and cfg.model.share_base and dc.zero_stage == 3),
             "model.share_base=true with distributed.zero_stage=3: two engines cannot partition one shared base; "
             "use zero_stage 0-2 (the frozen base is replicated, adapters and their optimizer states are sharded) "
             "or model.share_base=false")
        if dc.deepspeed_config:
            need(Path(dc.deepspeed_config).expanduser().is_file(),
                 f"distributed.deepspeed_config {dc.deepspeed_config!r} is not a file")


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def diff_keys(old: Config, new: Config) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between two configs."""
    a = _flatten(dataclasses.asdict(old))
    b = _flatten(dataclasses.asdict(new))
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
