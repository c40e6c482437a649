"""Typed run configuration: one dataclass per component, YAML files, ``key=value`` overrides.

Every field's docstring is the comment line above it; ``selfplay config-keys``
prints them and the README's table is checked against them by a test.
Everything a config can get wrong fails here, before any model is built, as a one-line
ConfigError naming the key and the value: the file (size, UTF-8, YAML nesting and aliases),
unknown keys, every value's type and range (NaN and inf refused), impossible combinations,
paths, the device, and env.kwargs (the environment's constructor checks them). Only
model.lora.target_modules waits for the model (curriculum/engine/policy.py checks them).
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from curriculum.errors import ConfigError
from solver.tools import DEFAULT_TOOL_PROMPT, TOOLS


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
    # Position scheme: rope (Llama's rotary embeddings) or nope (none: attention is told positions only by
    # the causal mask, which extrapolates to lengths never trained on; Kazemnejad et al. 2023).
    position: str = "rope"


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
    # With solver.tools: share of solver examples written as one tool call (prompt with solver.tool_prompt,
    # the call, its output, the answer copied from it); the environment must offer tool_code(task).
    tool_fraction: float = 0.5
    # torch threads of the warm-up, whatever run.threads says: the warmed-up model (and the cache
    # entry) depends on the thread count, so one seed gives one starting model on machines whose
    # CPU kernels match (torch.backends.cpu.get_cpu_capability(); AVX2 and AVX-512 differ).
    threads: int = 1
    # Directory caching warmed-up models by a hash of the config, seed, thread count, CPU kernels and model, library versions and warm-up/generator code; empty string disables the cache.
    cache_dir: str = "~/.cache/selfplay"


@dataclass
class ModelConfig:
    # Hugging Face model: a local directory, or a model id (org/name) already in the local Hugging Face
    # cache (nothing is downloaded); empty means the embedded tiny model.
    path: str = ""
    # Tokenizer directory (or cached model id) when it is not model.path's; empty = model.path's.
    tokenizer_path: str = ""
    # Branch, tag or commit of a model.path taken from the Hugging Face cache; empty = its main branch.
    revision: str = ""
    # Run the Python code a model directory ships (modeling_*.py): models transformers does not include need it.
    trust_remote_code: bool = False
    # Attention kernel of a model.path model: eager, sdpa, flash_attention_2, ...; empty = transformers' default.
    attn_implementation: str = ""
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
class PromptConfig:
    # How prompts reach the model: chat (the tokenizer's chat template over the environment's messages,
    # exactly as apply_chat_template(messages, add_generation_prompt=True)), plain (the text as the tokenizer
    # encodes it; the embedded model, base models) or auto (chat when the tokenizer has a template).
    style: str = "auto"


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
    # Baselines per task type instead of per GRPO group: the estimator's groups are the batch's task types
    # (Absolute Zero's task-relative REINFORCE++ with estimator=grpo); a batch without types is one group.
    task_relative: bool = False
    # Lower clip range of the ratio (1 - clip_low).
    clip_low: float = 0.2
    # Upper clip range (1 + clip_high); > clip_low is DAPO's clip-higher.
    clip_high: float = 0.28
    # Dual-clip (verl): with a negative advantage A a token's loss is at most -A * clip_ratio_c, so one huge ratio cannot swamp a step; > 1, or 0 = off.
    clip_ratio_c: float = 3.0
    # Cap on the unclipped ratio (TRL's delta, two-sided clipping); > 1 + clip_high, or 0 = off.
    delta: float = 0.0
    # Weight of the k3 KL penalty to the reference (initial) model; 0 = no reference.
    kl_coef: float = 0.0
    # token-mean, seq-mean-token-mean or seq-mean-token-sum-norm (Dr. GRPO: token sums / sampling.max_new_tokens).
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
class ToolUseConfig:
    """Multi-turn tool use, the same keys in each role (solver.tools, challenger.tools, ...)."""

    # Tools the role may call while it writes, over several turns: [python] runs <python>...</python> blocks
    # in the sandbox and appends <output>...</output> (masked out of the loss); [] = one completion.
    tools: list[str] = field(default_factory=list)
    # Most turns of one completion with tools (a turn ends at a tool call or the final text); a call in the
    # last turn leaves the completion unfinished (a solver's answer scores 0, a challenger's proposal is rejected).
    max_turns: int = 3
    # Put before the role's prompt when tools are on (chat prompts: at the start of the system message).
    tool_prompt: str = DEFAULT_TOOL_PROMPT
    # Characters of a tool's output shown in an observation (longer output is cut, marked ...[cut]).
    tool_output_chars: int = 256
    # Wall-clock seconds one tool call may run in the sandbox.
    tool_timeout_s: float = 2.0
    # Sandbox worker processes that run the tool calls of a batch in parallel.
    tool_workers: int = 2


@dataclass
class ChallengerConfig(ToolUseConfig, RoleConfig):
    """The challenger: a role that may run tools before it proposes (its proposal is its last turn's text)."""


@dataclass
class SolverConfig(ToolUseConfig, RoleConfig):
    """The solver: a role that may run tools before it answers (its answer is its last turn's text)."""


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
    # Absolute Zero's reward tiers: reward.invalid for a format error and, for a proposal that is
    # well-formed but fails when run (code_output, code_triplets: an error, a timeout, nondeterminism) reward.failing;
    # off = reward.invalid for both.
    tiers: bool = False
    # Reward of a well-formed but failing proposal with reward.tiers (Absolute Zero: -0.5).
    failing: float = -0.5


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
    # Reference tasks in each challenger prompt (drawn per group from the pool; while it is empty, the
    # newest retired tasks, then the generator's level-1 tasks); 0 = the environment's plain prompt.
    references: int = 0
    # How references are drawn from the pool: uniform, frontier (p near 1/2) or hard (weight 1 - p).
    # A small model copies its references' shape, so this steers where proposals land.
    reference_sampler: str = "uniform"
    # Fresh proposals generated to fill the pool each round (one fill batch).
    fill_proposals: int = 128
    # More fill batches, up to this many in all, while the pool holds fewer tasks than a solver batch
    # (solver.batch_prompts): a pool smaller than a batch trains the same few tasks step after step.
    fill_max_batches: int = 4
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
    # selfplay: share of each solver batch replayed from the challenger's past tasks that left the pool
    # (aged out or mastered), so training on the frontier alone does not forget what lies below it. The count
    # is rounded half up; a pool short of fresh tasks shrinks the batch, not the share.
    replay_fraction: float = 0.0
    # selfplay: keep and replay past tasks level by level (a full store drops the oldest task of its most-held
    # level; each replay cycles through the levels), so levels mastered early are not forgotten; false = newest
    # pool_capacity retired tasks, drawn uniformly.
    replay_by_level: bool = False
    # Highest level the generator arms (uniform, uniform_filtered, adaptive) draw; 0 = every level.
    max_level: int = 0
    # uniform_filtered: most batches of tasks drawn per solver step before training on what was kept.
    filter_max_batches: int = 4
    # adaptive: weight every level keeps on top of p(1-p), so closed levels are revisited.
    adaptive_floor: float = 0.02
    # Environments without reference answers (math): share of probed proposals matched by labelled
    # generator tasks, probed with their answers hidden, to measure how often the solver's majority
    # pseudo-label is right (curriculum/label_accuracy); at least one per probe when > 0; 0 = none.
    label_check_rate: float = 0.0
    # selfplay: grade probes and train the solver on the majority answer of its own samples, never the
    # environment's answer (R-Zero; Lee et al. 2025); needs an environment that extracts answers. The share
    # of accepted tasks whose majority is right is logged as curriculum/pseudo_label_accuracy.
    pseudo_labels: bool = False


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
    # With solver.tools: also score greedy answers of the same solver with its tools off (no tool prompt, one
    # completion): eval/no_tools/accuracy and eval/no_tools/accuracy/tier_L, what the tools add.
    without_tools: bool = False


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
class RolloutConfig:
    # What samples every rollout (proposals, probes, solver attempts, eval): hf (transformers generate; the path
    # bit-exact resume covers) or vllm (a vLLM engine beside the trainer, weights pushed after each update).
    engine: str = "hf"
    # vllm: share of the accelerator's memory the engine may take (it shares the device with training).
    gpu_memory_utilization: float = 0.3
    # vllm: release the engine's weights and KV cache while the roles train (CUDA only; ignored on a CPU).
    sleep: bool = True
    # vllm: truncated importance sampling: each token's policy loss weighted by min(exp(trainer - engine
    # log-prob), tis_cap), for the gap between the engine's and the trainer's numerics; 0 = off.
    tis_cap: float = 2.0
    # vllm: longest prompt + completion in tokens; 0 = the model's max_position_embeddings.
    max_model_len: int = 0


@dataclass
class HealthConfig:
    """Curriculum health alarms (curriculum/health.py, docs/health.md): thresholds, and which alarms stop the run."""

    # Alarms that end the run cleanly (final checkpoint, reason logged) when they fire, e.g. [plateau, solver_collapse];
    # [] = alarms only warn. Names: see docs/health.md.
    stop_on: list[str] = field(default_factory=list)
    # solver_collapse: a held-out score (mean@k, else greedy accuracy) or solver reward at or below this counts as collapsed.
    collapse_score: float = 0.05
    # solver_collapse: evaluations (held-out) or rounds (reward, entropy) in a row at or below the threshold.
    collapse_rounds: int = 2
    # solver_collapse: solver entropy (nats per token) at or below this counts as collapsed; 0 = off.
    entropy_floor: float = 0.01
    # forgetting: held-out accuracy at which a level counts as mastered.
    master_score: float = 0.8
    # forgetting: a mastered level whose accuracy falls more than this below its best.
    forget_margin: float = 0.3
    # stalled: rounds without a new high of the frontier level and of the accepted task level.
    stall_rounds: int = 10
    # plateau: evaluations without a held-out gain of at least plateau_gain over the best before them.
    plateau_evals: int = 10
    # plateau: the smallest held-out gain that counts.
    plateau_gain: float = 0.01
    # pool_starved: rounds in a row with the pool smaller than a solver batch (solver.batch_prompts).
    pool_rounds: int = 3
    # challenger_invalid: the challenger's valid share at or below this.
    valid_floor: float = 0.05
    # challenger_collapse: share of distinct proposals at or below this.
    unique_floor: float = 0.2
    # challenger_collapse: mean repetition penalty of valid proposals at or above this.
    repetition_ceiling: float = 0.8
    # label_accuracy: pseudo-label accuracy more than this below its best.
    label_drop: float = 0.15
    # no_signal: share of solver groups whose answers all score the same at or above this ...
    no_signal_ceiling: float = 0.9
    # no_signal: ... for this many rounds in a row.
    no_signal_rounds: int = 3
    # kl: a role's approx_kl or kl above this.
    kl_ceiling: float = 2.0
    # kl: a role's engine_logprob_gap (mean |trainer - engine| log-prob per token) above this.
    logprob_gap_ceiling: float = 0.5


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    challenger: ChallengerConfig = field(default_factory=ChallengerConfig)
    solver: SolverConfig = field(default_factory=SolverConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    log: LogConfig = field(default_factory=LogConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    health: HealthConfig = field(default_factory=HealthConfig)


# Where the solver's tasks come from (curriculum.mode).
MODES = ("selfplay", "uniform", "uniform_filtered", "adaptive")

# Keys whose values are free-form mappings (their sub-keys are not checked here).
_FREE_KEYS = {"env.kwargs"}

# Keys that may change when a run is resumed; every other change is refused.
# distributed.*: checkpoints are independent of the engine and the number of ranks; rollout.*: of the sampling engine;
# health.*: alarms only read the metrics (a run stopped by health.stop_on resumes with the alarm taken out).
RESUMABLE_KEYS = ("train.rounds", "run.dir", "run.threads", "log.", "wandb.", "checkpoint.", "distributed.", "rollout.",
                 "health.")


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


@functools.lru_cache(maxsize=None)  # reading the source parses the whole module: once per class
def _field_docs(cls) -> dict[str, str]:
    """Field name -> the ``#`` comment lines right above it in the class body (or a dataclass base's)."""
    import inspect

    docs: dict[str, str] = {}
    for base in cls.__mro__[1:]:
        if dataclasses.is_dataclass(base):
            docs.update(_field_docs(base))
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


def check_keys(values: dict[str, Any], source: str) -> None:
    """Fail on the first unknown dotted key, naming the nearest valid ones, or on a list or mapping
    key given something else (OmegaConf's own error would not name the key)."""
    known = key_specs()
    groups = {k.rsplit(".", 1)[0] for k in known}
    for key, value in values.items():
        kind = known[key].type if key in known else ""
        if kind.startswith("list[") and not isinstance(value, list):
            raise ConfigError(f"{source}: {key} must be a list ([a, b, ...]), got {value!r}")
        if kind.startswith("dict[") and not isinstance(value, dict):
            raise ConfigError(f"{source}: {key} must be a mapping ({{name: value, ...}}), got {value!r}")
        if key in known or any(key.startswith(free + ".") for free in _FREE_KEYS):
            continue
        if key in groups:
            raise ConfigError(f"{source}: {key!r} is a section, set one of its keys (e.g. {key}.<name>=...)")
        near = difflib.get_close_matches(key, list(known), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise ConfigError(f"{source}: unknown config key {key!r}{hint}")


# What no config needs, refused before it can cost memory or time: a config is a few kB with
# sections three keys deep (env.kwargs may nest further).
MAX_CONFIG_BYTES = 1 << 20
MAX_YAML_DEPTH = 32
# Values once aliases are expanded: a "billion laughs" bomb is a few lines whose aliases
# (*name) expand to billions of values, which OmegaConf would copy one by one.
MAX_YAML_VALUES = 10_000


class _YamlLimit(yaml.MarkedYAMLError):
    """Well-formed YAML beyond the limits above."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses documents nested deeper than MAX_YAML_DEPTH or holding more
    than MAX_YAML_VALUES values with every alias counted as the whole value it stands for."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._values = 0
        self._anchored: dict[str, int] = {}  # anchor -> values of the node it names

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)  # raises for an undefined alias
            if event.anchor not in self._anchored:  # the anchored value is not complete: it holds itself
                raise _YamlLimit(None, None, f"alias *{event.anchor} lies inside the value it names", event.start_mark)
            self._count(self._anchored[event.anchor], event)
            return node
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise _YamlLimit(None, None, f"nests deeper than {MAX_YAML_DEPTH} levels", event.start_mark)
        before = self._values
        self._count(1, event)
        node = super().compose_node(parent, index)
        self._depth -= 1
        if event.anchor is not None:
            self._anchored[event.anchor] = self._values - before
        return node

    def _count(self, n: int, event) -> None:
        self._values += n
        if self._values > MAX_YAML_VALUES:
            raise _YamlLimit(None, None, f"holds more than {MAX_YAML_VALUES} values once aliases (*name) are expanded",
                             event.start_mark)


def _load_yaml(text: str, source: str) -> Any:
    """``yaml.safe_load`` within the limits above; a failure is a one-line ConfigError naming ``source``."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        what = "YAML" if isinstance(exc, _YamlLimit) else "not valid YAML:"
        raise ConfigError(f"{source}: {what} {_yaml_message(exc)}") from exc


def _yaml_message(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line: the problem and where it is."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem and exc.problem_mark:
        mark = exc.problem_mark
        return f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def _read_config_file(path: Path) -> str:
    """The file's text: at most MAX_CONFIG_BYTES of UTF-8."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror}") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; a config is a few kB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}") from exc


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> ``{"a.b": 1, "c": "x"}`` with YAML typing of values."""
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = _load_yaml(value, f"override {key.strip()}") if value.strip() else ""
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults <- YAML file <- overrides, validated. Raises ConfigError."""
    base = OmegaConf.structured(Config)
    layers = []
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        data = _load_yaml(_read_config_file(path), str(path)) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
        check_keys(_flatten(data), str(path))
        layers.append(data)
    ov = parse_overrides(overrides or [])
    check_keys(ov, "override")
    try:
        layers = [OmegaConf.create(data) for data in layers]
        for key, value in ov.items():
            layer = OmegaConf.create()
            OmegaConf.update(layer, key, value, force_add=True)
            layers.append(layer)
        merged = OmegaConf.merge(base, *layers)
        for key in _FREE_KEYS & ov.keys():  # given whole, a free mapping replaces the file's (kwargs of another env)
            OmegaConf.update(merged, key, ov[key], merge=False)
        cfg: Config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(_omegaconf_message(exc)) from exc
    for p in cfg.run.plugins:
        _need("\0" not in p, f"run.plugins ({p!r}) contains a NUL character")
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


@dataclass(frozen=True)
class Range:
    """The values a numeric key may take: lo..hi, None = unbounded; ``open_*`` excludes the bound itself."""

    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False
    open_hi: bool = False

    def __contains__(self, v) -> bool:
        above = self.lo is None or (v > self.lo if self.open_lo else v >= self.lo)
        below = self.hi is None or (v < self.hi if self.open_hi else v <= self.hi)
        return above and below

    def __str__(self) -> str:
        if self.hi is None:
            return f"{'>' if self.open_lo else '>='} {self.lo}"
        if self.lo is None:
            return f"{'<' if self.open_hi else '<='} {self.hi}"
        return f"in {'(' if self.open_lo else '['}{self.lo}, {self.hi}{')' if self.open_hi else ']'}"


_POSITIVE = Range(0, None, open_lo=True)
_NON_NEGATIVE = Range(0, None)
_FRACTION = Range(0, 1)
_SEED = Range(0, 2**63 - 1)
# Upper bounds are far beyond any sane run; they catch typos (1e9 for 1e3) before they cost memory or time.
_TOOL_RANGES = {
    "max_turns": Range(1, 64),
    "tool_output_chars": Range(1, 1 << 16),
    "tool_timeout_s": Range(0, 60, open_lo=True),
    "tool_workers": Range(1, 64),
}

_ROLE_RANGES = {
    "batch_prompts": Range(1, 1 << 16),
    "group_size": Range(2, 1 << 12),  # group-relative advantages need two samples
    "steps": Range(0, 1 << 16),
    "sampling.temperature": _POSITIVE,
    "sampling.top_p": Range(0, 1, open_lo=True),
    "sampling.max_new_tokens": Range(1, 1 << 16),
    "sampling.batch_size": Range(1, 1 << 16),
    "optim.lr": _POSITIVE,
    "optim.weight_decay": _NON_NEGATIVE,
    "optim.grad_clip": _NON_NEGATIVE,
    "optim.warmup_steps": Range(0, 10**7),
    "loss.clip_low": _FRACTION,
    "loss.clip_high": _NON_NEGATIVE,
    "loss.clip_ratio_c": _NON_NEGATIVE,  # and 0 or > 1: _check_combinations
    "loss.delta": _NON_NEGATIVE,  # and 0 or > 1 + clip_high: _check_combinations
    "loss.kl_coef": _NON_NEGATIVE,
    "loss.epochs": Range(1, 1000),
    "loss.minibatch_size": _NON_NEGATIVE,
}
RANGES: dict[str, Range] = {
    "run.seed": _SEED,
    "run.threads": Range(0, 4096),
    "model.lora.r": Range(1, 4096),
    "model.lora.alpha": Range(1, 1 << 16),
    "model.lora.dropout": Range(0, 1, open_hi=True),
    "model.tiny.hidden_size": Range(2, 8192),
    "model.tiny.layers": Range(1, 128),
    "model.tiny.heads": Range(1, 256),
    "model.tiny.max_positions": Range(8, 1 << 16),
    "model.warmup.steps": Range(0, 10**7),
    "model.warmup.batch_size": Range(1, 1 << 16),
    "model.warmup.lr": _POSITIVE,
    "model.warmup.solver_max_level": Range(1, None),
    "model.warmup.level_decay": Range(0, 1, open_lo=True),
    "model.warmup.challenger_fraction": _FRACTION,
    "model.warmup.tool_fraction": _FRACTION,
    "model.warmup.threads": Range(1, 4096),
    **{f"{role}.{key}": r for role in ("challenger", "solver") for key, r in _ROLE_RANGES.items()},
    "reward.repetition_coef": _NON_NEGATIVE,
    "reward.repetition_threshold": _FRACTION,  # a BLEU distance
    "reward.invalid": Range(),
    "reward.failing": Range(),
    "curriculum.probe_samples": Range(2, 1 << 12),  # a solve rate needs two samples
    "curriculum.probe_samples_max": Range(0, 1 << 14),
    "curriculum.probe_temperature": _NON_NEGATIVE,
    "curriculum.references": Range(0, 64),
    "curriculum.fill_proposals": Range(1, 1 << 20),
    "curriculum.fill_max_batches": Range(1, 1000),
    "curriculum.replay_fraction": _FRACTION,
    "curriculum.band_low": _FRACTION,
    "curriculum.band_high": _FRACTION,
    "curriculum.pool_capacity": Range(1, 1 << 24),
    "curriculum.max_age": Range(1, None),
    "curriculum.max_level": _NON_NEGATIVE,
    "curriculum.filter_max_batches": Range(1, 1000),
    "curriculum.adaptive_floor": _NON_NEGATIVE,
    "curriculum.label_check_rate": _FRACTION,
    **{f"{role}.{key}": r for role in ("challenger", "solver") for key, r in _TOOL_RANGES.items()},
    "train.rounds": Range(1, 9999),  # checkpoint names hold the round in four digits
    "eval.seed": _SEED,
    "eval.per_level": Range(1, 1000),  # the benchmark draws up to 50x this many tasks per level
    "eval.max_new_tokens": Range(1, 1 << 16),
    "eval.samples": Range(0, 1024),
    "eval.temperature": _NON_NEGATIVE,
    "eval.every": Range(1, None),
    "checkpoint.keep_last": Range(1, 1000),
    "checkpoint.every_steps": _NON_NEGATIVE,
    "log.samples": _NON_NEGATIVE,
    "distributed.zero_stage": Range(0, 3),
    "distributed.micro_batch_size": _NON_NEGATIVE,
    "distributed.timeout_s": Range(1, 10**7),
    "rollout.gpu_memory_utilization": Range(0, 1, open_lo=True),
    "rollout.tis_cap": _NON_NEGATIVE,  # and 0 or >= 1: _check_rollout
    "rollout.max_model_len": Range(0, 1 << 24),
    "health.collapse_score": Range(),
    "health.collapse_rounds": Range(1, 10**4),
    "health.entropy_floor": _NON_NEGATIVE,
    "health.master_score": _FRACTION,
    "health.forget_margin": _FRACTION,
    "health.stall_rounds": Range(1, 10**4),
    "health.plateau_evals": Range(1, 10**4),
    "health.plateau_gain": _NON_NEGATIVE,
    "health.pool_rounds": Range(1, 10**4),
    "health.valid_floor": _FRACTION,
    "health.unique_floor": _FRACTION,
    "health.repetition_ceiling": _NON_NEGATIVE,
    "health.label_drop": _FRACTION,
    "health.no_signal_ceiling": _FRACTION,
    "health.no_signal_rounds": Range(1, 10**4),
    "health.kl_ceiling": _POSITIVE,
    "health.logprob_gap_ceiling": _POSITIVE,
}
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
    """Types and ranges, key by key: numbers finite and in RANGES, strings without NUL (no path holds one)."""
    specs = key_specs()
    for key, value in _flatten(dataclasses.asdict(cfg)).items():
        kind = specs[key].type
        if kind == "int":
            _need(isinstance(value, int) and not isinstance(value, bool), f"{key} ({value!r}) must be an integer")
        elif kind == "float":
            _need(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
                  f"{key} ({value!r}) must be a finite number")
        elif kind == "str":
            _need("\0" not in value, f"{key} ({value!r}) contains a NUL character")
        if key in RANGES:
            _need(value in RANGES[key], f"{key} ({value}) must be {RANGES[key]}")


def _check_choices(cfg: Config) -> None:
    """Names that must be one of a list (registries, modes, devices)."""
    from challenger.rewards import FRONTIER_REWARDS
    from curriculum.envs import ENVIRONMENTS
    from curriculum.pool import SAMPLERS
    from curriculum.engine.rl import AGGREGATIONS, ESTIMATORS

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
    from curriculum.health import ALARMS

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


def local_model_dir(name: str, revision: str = "") -> Path | None:
    """The directory holding Hugging Face model ``name``: ``name`` itself, or the snapshot of model id
    ``name`` (org/model) at ``revision`` in the local Hugging Face cache; None if neither. Never downloads."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.is_absolute() or name.count("/") != 1:  # a path that is not there, not a model id
        return None
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, revision=revision or None, local_files_only=True))
    except (OSError, ValueError):  # not cached at that revision (LocalEntryNotFoundError), not a valid id
        return None


# Any of these makes a directory a tokenizer's (fast, its config, sentencepiece, BPE vocabulary).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _has_tokenizer(path: Path) -> bool:
    return any((path / f).is_file() for f in TOKENIZER_FILES)


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
        _need(bool(m.tokenizer_path) or _has_tokenizer(where), f"model.path {m.path!r} holds no tokenizer "
              f"({', '.join(TOKENIZER_FILES)}); name its directory in model.tokenizer_path")
    if m.tokenizer_path:
        where = local_model_dir(m.tokenizer_path)
        _need(where is not None, f"model.tokenizer_path {m.tokenizer_path!r} is not a local directory, nor a model id "
                                 "in the local Hugging Face cache (nothing is downloaded)")
        _need(_has_tokenizer(where), f"model.tokenizer_path {m.tokenizer_path!r} holds no tokenizer ({', '.join(TOKENIZER_FILES)})")
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
              "(CUDA; see the README's 'vLLM rollouts'), or use rollout.engine=hf")


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def diff_keys(old: Config, new: Config) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between two configs."""
    a = _flatten(dataclasses.asdict(old))
    b = _flatten(dataclasses.asdict(new))
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
