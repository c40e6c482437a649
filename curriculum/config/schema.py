"""The run configuration's schema: one dataclass per component, each key with its default, range and doc.

Imports nothing of the project, so the engine and the roles can read a typed config without
loading a registry. ``key(default, range, doc=...)`` declares a key; ``key_specs()`` lists them
all (``selfplay config-keys`` and docs/configuration.md print it). Loading, overrides and checks
live beside this module: ``loader`` (YAML and key=value), ``plugins``, ``validate``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


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


def key(default: Any, range: Range | None = None, *, doc: str) -> Any:
    """A config key: its default (a list or mapping is copied for each config), the values it may
    take (every int and float key has a Range; test_config holds it so) and its one-line doc."""
    metadata = {"doc": doc, "range": range}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


_POSITIVE = Range(0, None, open_lo=True)
_NON_NEGATIVE = Range(0, None)
_FRACTION = Range(0, 1)
_SEED = Range(0, 2**63 - 1)
# Upper bounds are far beyond any sane run; they catch typos (1e9 for 1e3) before they cost memory or time.

# The default tool prompt: how solver.tools' python tool is called and answers (solver/tools.py's tags).
TOOL_PROMPT = ("You can run Python: write code between <python> and </python>; what it prints (and the value "
               "of a last bare expression) comes back between <output> and </output>. Then answer.\n\n")


@dataclass
class RunConfig:
    dir: str = key("runs/demo", doc="Run directory: config.yaml, metrics.jsonl, tasks/, checkpoints/ go here.")
    seed: int = key(0, _SEED, doc="Seed of every random stream in the run (per-rank offsets are added).")
    device: str = key("auto", doc='"auto" (cuda if available, else cpu), "cpu" or "cuda".')
    threads: int = key(0, Range(0, 4096), doc="torch intra-op threads; 0 leaves torch's default.")
    deterministic: bool = key(True, doc="Deterministic algorithms (bitwise-reproducible runs; a bit slower on GPU).")
    plugins: list[str] = key([],
                             doc="Your code, imported before the config is checked: modules (my_pkg.envs) or .py files; "
                                 "their @register_env / @register_frontier_reward / ... then count, on every rank and "
                                 "resume.")


@dataclass
class LoraConfig:
    enabled: bool = key(False, doc="Train LoRA adapters through peft instead of full weights.")
    r: int = key(8, Range(1, 4096), doc="LoRA rank.")
    alpha: int = key(16, Range(1, 1 << 16), doc="LoRA alpha (scale = alpha / r).")
    dropout: float = key(0.0, Range(0, 1, open_hi=True), doc="Dropout on the LoRA path.")
    target_modules: list[str] = key(["q_proj", "k_proj", "v_proj", "o_proj"], doc="Module names that get adapters.")


@dataclass
class TinyModelConfig:
    hidden_size: int = key(128, Range(2, 8192), doc="Hidden size of the embedded model.")
    layers: int = key(2, Range(1, 128), doc="Transformer layers of the embedded model.")
    heads: int = key(4, Range(1, 256), doc="Attention heads of the embedded model.")
    max_positions: int = key(64, Range(8, 1 << 16), doc="Longest sequence (prompt + completion) in tokens.")
    position: str = key("rope",
                        doc="Position scheme: rope (Llama's rotary embeddings) or nope (none: attention is told "
                            "positions only by the causal mask, which extrapolates to lengths never trained on; "
                            "Kazemnejad et al. 2023).")


@dataclass
class WarmupConfig:
    steps: int = key(600, Range(0, 10**7),
                     doc="Supervised steps on the environment's generator before round 1 (embedded model only).")
    batch_size: int = key(128, Range(1, 1 << 16), doc="Sequences per warm-up step.")
    lr: float = key(3e-3, _POSITIVE, doc="Warm-up learning rate.")
    solver_max_level: int = key(3, Range(1, None),
                                doc="Solver examples come from levels 1..solver_max_level (the rest must be learned by "
                                    "RL).")
    level_decay: float = key(1.0, Range(0, 1, open_lo=True),
                             doc="Weight of solver examples of level L: level_decay ** (L - 1); below 1 the top levels "
                                 "are seen less (learned in part, a frontier for RL to push); 1 = uniform.")
    challenger_fraction: float = key(0.5, _FRACTION,
                                     doc="Share of warm-up examples that teach the challenger's proposal format.")
    tool_fraction: float = key(0.5, _FRACTION,
                               doc="With solver.tools: share of solver examples written as one tool call (prompt with "
                                   "solver.tool_prompt, the call, its output, the answer copied from it); the "
                                   "environment must offer tool_code(task).")
    threads: int = key(1, Range(1, 4096),
                       doc="torch threads of the warm-up, whatever run.threads says: the warmed-up model (and the cache "
                           "entry) depends on the thread count, so one seed gives one starting model on machines whose "
                           "CPU kernels match (torch.backends.cpu.get_cpu_capability(); AVX2 and AVX-512 differ).")
    cache_dir: str = key("~/.cache/selfplay",
                         doc="Directory caching warmed-up models by a hash of the config, seed, thread count, CPU "
                             "kernels and model, library versions and warm-up/generator code; empty string disables the "
                             "cache.")


@dataclass
class ModelConfig:
    path: str = key("",
                    doc="Hugging Face model: a local directory, or a model id (org/name) already in the local Hugging "
                        "Face cache (nothing is downloaded); empty means the embedded tiny model.")
    tokenizer_path: str = key("",
                              doc="Tokenizer directory (or cached model id) when it is not model.path's; empty = "
                                  "model.path's.")
    revision: str = key("",
                        doc="Branch, tag or commit of a model.path taken from the Hugging Face cache; empty = its main "
                            "branch.")
    trust_remote_code: bool = key(False,
                                  doc="Run the Python code a model directory ships (modeling_*.py): models transformers "
                                      "does not include need it.")
    attn_implementation: str = key("",
                                   doc="Attention kernel of a model.path model: eager, sdpa, flash_attention_2, ...; "
                                       "empty = transformers' default.")
    dtype: str = key("float32", doc="Parameter dtype: float32, bfloat16 or float16.")
    share_base: bool = key(True,
                           doc="With LoRA: both roles share one frozen base with two adapters (one copy of weights).")
    gradient_checkpointing: bool = key(False, doc="Gradient checkpointing in the policy forward.")
    lora: LoraConfig = field(default_factory=LoraConfig)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)


@dataclass
class EnvConfig:
    name: str = key("arithmetic", doc="Registered environment name (see curriculum/envs).")
    kwargs: dict[str, Any] = key({}, doc="Keyword arguments of the environment's constructor.")


@dataclass
class PromptConfig:
    style: str = key("auto",
                     doc="How prompts reach the model: chat (the tokenizer's chat template over the environment's "
                         "messages, exactly as apply_chat_template(messages, add_generation_prompt=True)), plain (the "
                         "text as the tokenizer encodes it; the embedded model, base models) or auto (chat when the "
                         "tokenizer has a template).")


@dataclass
class SamplingConfig:
    temperature: float = key(1.0, _POSITIVE, doc="Sampling temperature.")
    top_p: float = key(1.0, Range(0, 1, open_lo=True), doc="Nucleus sampling threshold (1.0 = off).")
    max_new_tokens: int = key(16, Range(1, 1 << 16), doc="Longest completion in tokens.")
    batch_size: int = key(256, Range(1, 1 << 16), doc="Sequences per generate() call.")


@dataclass
class OptimConfig:
    lr: float = key(1e-4, _POSITIVE, doc="AdamW learning rate.")
    weight_decay: float = key(0.0, _NON_NEGATIVE, doc="AdamW weight decay.")
    grad_clip: float = key(1.0, _NON_NEGATIVE, doc="Global gradient-norm clip (0 = off).")
    warmup_steps: int = key(0, Range(0, 10**7), doc="Linear learning-rate warm-up in optimizer steps.")


@dataclass
class LossConfig:
    estimator: str = key("grpo", doc="Advantage estimator: grpo, dr_grpo, rloo or reinforce_pp.")
    task_relative: bool = key(False,
                              doc="Baselines per task type instead of per GRPO group: the estimator's groups are the "
                                  "batch's task types (Absolute Zero's task-relative REINFORCE++ with estimator=grpo); "
                                  "a batch without types is one group.")
    clip_low: float = key(0.2, _FRACTION, doc="Lower clip range of the ratio (1 - clip_low).")
    clip_high: float = key(0.28, _NON_NEGATIVE,
                           doc="Upper clip range (1 + clip_high); > clip_low is DAPO's clip-higher.")
    # and 0 or > 1: _check_combinations
    clip_ratio_c: float = key(3.0, _NON_NEGATIVE,
                              doc="Dual-clip (verl): with a negative advantage A a token's loss is at most -A * "
                                  "clip_ratio_c, so one huge ratio cannot swamp a step; > 1, or 0 = off.")
    # and 0 or > 1 + clip_high: _check_combinations
    delta: float = key(0.0, _NON_NEGATIVE,
                       doc="Cap on the unclipped ratio (TRL's delta, two-sided clipping); > 1 + clip_high, or 0 = off.")
    kl_coef: float = key(0.0, _NON_NEGATIVE,
                         doc="Weight of the k3 KL penalty to the reference (initial) model; 0 = no reference.")
    aggregation: str = key("token-mean",
                           doc="token-mean, seq-mean-token-mean or seq-mean-token-sum-norm (Dr. GRPO: token sums / "
                               "sampling.max_new_tokens).")
    epochs: int = key(1, Range(1, 1000), doc="Passes over each rollout batch (PPO epochs).")
    minibatch_size: int = key(0, _NON_NEGATIVE, doc="Sequences per optimizer step; 0 = the whole rollout batch.")


@dataclass
class RoleConfig:
    batch_prompts: int = key(16, Range(1, 1 << 16), doc="Prompts (GRPO groups) per update step.")
    # group-relative advantages need two samples
    group_size: int = key(8, Range(2, 1 << 12), doc="Samples per prompt (GRPO group size G).")
    steps: int = key(2, Range(0, 1 << 16), doc="GRPO update steps per round.")
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)


@dataclass
class ToolUseConfig:
    """Multi-turn tool use, the same keys in each role (solver.tools, challenger.tools, ...)."""

    tools: list[str] = key([],
                           doc="Tools the role may call while it writes, over several turns: [python] runs "
                               "<python>...</python> blocks in the sandbox and appends <output>...</output> (masked out "
                               "of the loss); [] = one completion.")
    max_turns: int = key(3, Range(1, 64),
                         doc="Most turns of one completion with tools (a turn ends at a tool call or the final text); a "
                             "call in the last turn leaves the completion unfinished (a solver's answer scores 0, a "
                             "challenger's proposal is rejected).")
    tool_prompt: str = key(TOOL_PROMPT,
                           doc="Put before the role's prompt when tools are on (chat prompts: at the start of the "
                               "system message).")
    tool_output_chars: int = key(256, Range(1, 1 << 16),
                                 doc="Characters of a tool's output shown in an observation (longer output is cut, "
                                     "marked ...[cut]).")
    tool_timeout_s: float = key(2.0, Range(0, 60, open_lo=True),
                                doc="Wall-clock seconds one tool call may run in the sandbox.")
    tool_workers: int = key(2, Range(1, 64),
                            doc="Sandbox worker processes that run the tool calls of a batch in parallel.")


@dataclass
class ChallengerConfig(ToolUseConfig, RoleConfig):
    """The challenger: a role that may run tools before it proposes (its proposal is its last turn's text)."""


@dataclass
class SolverConfig(ToolUseConfig, RoleConfig):
    """The solver: a role that may run tools before it answers (its answer is its last turn's text)."""


@dataclass
class RewardConfig:
    frontier: str = key("uncertainty",
                        doc="Frontier reward of the challenger: uncertainty (R-Zero) or learnability (Absolute Zero).")
    repetition_coef: float = key(1.0, _NON_NEGATIVE, doc="Weight lambda of the repetition penalty.")
    # a BLEU distance
    repetition_threshold: float = key(0.5, _FRACTION,
                                      doc="BLEU distance under which two proposals are near-duplicates.")
    invalid: float = key(-1.0, Range(), doc="Reward of a proposal the environment rejects (the format gate).")
    tiers: bool = key(False, doc="Absolute Zero's reward tiers: reward.invalid for a format error and, for a proposal "
                                 "that is well-formed but fails when run (code_output, code_triplets: an error, a timeout, "
                                 "nondeterminism) reward.failing; off = reward.invalid for both.")
    failing: float = key(-0.5, Range(),
                         doc="Reward of a well-formed but failing proposal with reward.tiers (Absolute Zero: -0.5).")


@dataclass
class CurriculumConfig:
    mode: str = key("selfplay",
                    doc="Where the solver's tasks come from: selfplay (the challenger's proposals, probed into a pool), "
                        "uniform (the generator, levels drawn uniformly), uniform_filtered (uniform, oversampled; "
                        "groups whose answers all score the same are dropped and refilled, as DAPO) or adaptive (no "
                        "challenger: levels drawn with weight p(1-p) from a running per-level solve rate).")
    # a solve rate needs two samples
    probe_samples: int = key(8, Range(2, 1 << 12), doc="Solver samples per task when probing (m).")
    probe_samples_max: int = key(0, Range(0, 1 << 14),
                                 doc="Up to this many samples for a task whose band decision is uncertain after "
                                     "probe_samples (p within 1.5 standard errors of band_low or band_high); 0 = never "
                                     "more.")
    probe_temperature: float = key(0.0, _NON_NEGATIVE,
                                   doc="Sampling temperature of probing; 0 = the solver's training temperature "
                                       "(solver.sampling.temperature).")
    references: int = key(0, Range(0, 64),
                          doc="Reference tasks in each challenger prompt (drawn per group from the pool; while it is "
                              "empty, the newest retired tasks, then the generator's level-1 tasks); 0 = the "
                              "environment's plain prompt.")
    reference_sampler: str = key("uniform",
                                 doc="How references are drawn from the pool: uniform, frontier (p near 1/2) or hard "
                                     "(weight 1 - p). A small model copies its references' shape, so this steers where "
                                     "proposals land.")
    fill_proposals: int = key(128, Range(1, 1 << 20),
                              doc="Fresh proposals generated to fill the pool each round (one fill batch).")
    fill_max_batches: int = key(4, Range(1, 1000),
                                doc="More fill batches, up to this many in all, while the pool holds fewer tasks than a "
                                    "solver batch (solver.batch_prompts): a pool smaller than a batch trains the same "
                                    "few tasks step after step.")
    band_low: float = key(0.2, _FRACTION, doc="Lowest solve rate admitted to the pool.")
    band_high: float = key(0.8, _FRACTION, doc="Highest solve rate admitted to the pool.")
    pool_capacity: int = key(512, Range(1, 1 << 24), doc="Most tasks the pool holds (oldest leave first).")
    max_age: int = key(3, Range(1, None), doc="Rounds a task stays in the pool.")
    sampler: str = key("frontier", doc="How the solver's batches are drawn from the pool: frontier or uniform.")
    replay_fraction: float = key(0.0, _FRACTION,
                                 doc="selfplay: share of each solver batch replayed from the challenger's past tasks "
                                     "that left the pool (aged out or mastered) or were probed above the band (kept, "
                                     "never pooled), so training on the frontier alone does "
                                     "not forget what lies below it. The count is rounded half up; a pool short of fresh tasks "
                                     "shrinks the batch, not the share; an empty pool replays the whole batch.")
    replay_by_level: bool = key(False,
                                doc="selfplay: keep and replay past tasks level by level (a full store drops the oldest "
                                    "task of its most-held level; each replay cycles through the levels), so levels "
                                    "mastered early are not forgotten; false = newest pool_capacity retired tasks, "
                                    "drawn uniformly.")
    max_level: int = key(0, _NON_NEGATIVE,
                         doc="Highest level the generator arms (uniform, uniform_filtered, adaptive) draw; 0 = every "
                             "level.")
    filter_max_batches: int = key(4, Range(1, 1000),
                                  doc="uniform_filtered: most batches of tasks drawn per solver step before training on "
                                      "what was kept.")
    adaptive_floor: float = key(0.02, _NON_NEGATIVE,
                                doc="adaptive: weight every level keeps on top of p(1-p), so closed levels are "
                                    "revisited.")
    label_check_rate: float = key(0.0, _FRACTION,
                                  doc="Environments without reference answers (math): share of probed proposals matched "
                                      "by labelled generator tasks, probed with their answers hidden, to measure how "
                                      "often the solver's majority pseudo-label is right (curriculum/label_accuracy); "
                                      "at least one per probe when > 0; 0 = none.")
    pseudo_labels: bool = key(False,
                              doc="selfplay: grade probes and train the solver on the majority answer of its own "
                                  "samples, never the environment's answer (R-Zero; Lee et al. 2025); needs an "
                                  "environment that extracts answers. The share of accepted tasks whose majority is "
                                  "right is logged as curriculum/pseudo_label_accuracy.")


@dataclass
class TrainConfig:
    # checkpoint names hold the round in four digits
    rounds: int = key(6, Range(1, 9999), doc="Number of rounds.")


@dataclass
class EvalConfig:
    seed: int = key(987654321, _SEED, doc="Seed of the held-out benchmark; training never draws from it.")
    # the benchmark draws up to 50x this many tasks per level
    per_level: int = key(40, Range(1, 1000), doc="Held-out tasks per difficulty level.")
    max_new_tokens: int = key(16, Range(1, 1 << 16), doc="Longest answer in tokens.")
    greedy: bool = key(True, doc="Score greedy answers: eval/accuracy and eval/accuracy/tier_L.")
    samples: int = key(0, Range(0, 1024),
                       doc="Sampled answers per held-out task: mean@k in eval/mean_at_k and eval/mean_at_k/tier_L; 0 = "
                           "none.")
    temperature: float = key(1.0, _NON_NEGATIVE,
                             doc="Sampling temperature of those answers (set it to solver.sampling.temperature to "
                                 "measure what GRPO trains).")
    every: int = key(1, Range(1, None), doc="Score every N rounds (round 0 and the last round always).")
    without_tools: bool = key(False,
                              doc="With solver.tools: also score greedy answers of the same solver with its tools off "
                                  "(no tool prompt, one completion): eval/no_tools/accuracy and "
                                  "eval/no_tools/accuracy/tier_L, what the tools add.")


@dataclass
class CheckpointConfig:
    keep_last: int = key(3, Range(1, 1000), doc="Complete checkpoints kept (older ones are deleted).")
    every_steps: int = key(0, _NON_NEGATIVE,
                           doc="Also checkpoint inside a round every K steps (challenger/fill/solver stages); 0 = round "
                               "ends only.")


@dataclass
class WandbConfig:
    mode: str = key("offline", doc="offline (default, no network), online or disabled.")
    project: str = key("selfplay", doc="wandb project.")
    entity: str = key("", doc="wandb entity (team); empty = default.")
    name: str = key("", doc="Run name; empty = the run directory's name.")


@dataclass
class LogConfig:
    progress: bool = key(True, doc="Show progress bars.")
    samples: int = key(8, _NON_NEGATIVE,
                       doc="Sample proposals and answers logged per round (wandb table, tasks file has all).")
    dashboard: bool = key(True, doc="Rewrite RUN_DIR/dashboard.html (the local dashboard) after every round.")


@dataclass
class RLConfig:
    backend: str = key("auto", doc="Kernel backend for advantages, loss and log-probs: auto, torch or triton.")


@dataclass
class DistributedConfig:
    engine: str = key("torch",
                      doc="torch (one process, plain optimizer) or deepspeed (ZeRO; required for more than one "
                          "process).")
    zero_stage: int = key(2, Range(0, 3),
                          doc="ZeRO stage with engine=deepspeed: 0 (replicated), 1 (optimizer states sharded), 2 (+ "
                              "gradients), 3 (+ parameters).")
    offload: str = key("none",
                       doc="ZeRO offload to host memory: none, optimizer (optimizer states) or all (optimizer states "
                           "and parameters; stage 3).")
    micro_batch_size: int = key(0, _NON_NEGATIVE,
                                doc="Sequences per rank per forward/backward; 0 = a rank's whole share of a minibatch "
                                    "(gradient accumulation otherwise).")
    rollout_seed: str = key("batch",
                            doc="Rollout seeding: batch (one stream per phase step and rank; rank 0 of 1 = the "
                                "single-process run) or group (one stream per GRPO group: samples independent of the "
                                "number of ranks).")
    deepspeed_config: str = key("",
                                doc="Optional DeepSpeed JSON whose keys override the generated DeepSpeed config (e.g. "
                                    "configs/deepspeed/zero3_offload.json).")
    timeout_s: int = key(1800, Range(1, 10**7),
                         doc="Seconds a collective waits for the other ranks before the run fails.")


@dataclass
class RolloutConfig:
    engine: str = key("hf",
                      doc="What samples every rollout (proposals, probes, solver attempts, eval): hf (transformers "
                          "generate; the path bit-exact resume covers) or vllm (a vLLM engine beside the trainer, "
                          "weights pushed after each update).")
    gpu_memory_utilization: float = key(0.3, Range(0, 1, open_lo=True),
                                        doc="vllm: share of the accelerator's memory the engine may take (it shares the "
                                            "device with training).")
    sleep: bool = key(True,
                      doc="vllm: release the engine's weights and KV cache while the roles train (CUDA only; ignored on "
                          "a CPU).")
    # and 0 or >= 1: _check_rollout
    tis_cap: float = key(2.0, _NON_NEGATIVE,
                         doc="vllm: truncated importance sampling: each token's policy loss weighted by min(exp(trainer "
                             "- engine log-prob), tis_cap), for the gap between the engine's and the trainer's "
                             "numerics; 0 = off.")
    max_model_len: int = key(0, Range(0, 1 << 24),
                             doc="vllm: longest prompt + completion in tokens; 0 = the model's max_position_embeddings.")


@dataclass
class HealthConfig:
    """Curriculum health alarms (curriculum/health.py, docs/health.md): thresholds, and which alarms stop the run."""

    stop_on: list[str] = key([],
                             doc="Alarms that end the run cleanly (final checkpoint, reason logged) when they fire, "
                                 "e.g. [plateau, solver_collapse]; [] = alarms only warn. Names: see docs/health.md.")
    collapse_score: float = key(0.05, Range(),
                                doc="solver_collapse: a held-out score (mean@k, else greedy accuracy) or solver reward "
                                    "at or below this counts as collapsed.")
    collapse_rounds: int = key(2, Range(1, 10**4),
                               doc="solver_collapse: evaluations (held-out) or rounds (reward, entropy) in a row at or "
                                   "below the threshold.")
    entropy_floor: float = key(0.01, _NON_NEGATIVE,
                               doc="solver_collapse: solver entropy (nats per token) at or below this counts as "
                                   "collapsed; 0 = off.")
    master_score: float = key(0.8, _FRACTION, doc="forgetting: held-out accuracy at which a level counts as mastered.")
    forget_margin: float = key(0.3, _FRACTION,
                               doc="forgetting: a mastered level whose accuracy falls more than this below its best.")
    stall_rounds: int = key(10, Range(1, 10**4),
                            doc="stalled: rounds without a new high of the frontier level and of the accepted task "
                                "level.")
    plateau_evals: int = key(10, Range(1, 10**4),
                             doc="plateau: evaluations without a held-out gain of at least plateau_gain over the best "
                                 "before them.")
    plateau_gain: float = key(0.01, _NON_NEGATIVE, doc="plateau: the smallest held-out gain that counts.")
    pool_rounds: int = key(3, Range(1, 10**4),
                           doc="pool_starved: rounds in a row with the pool smaller than a solver batch "
                               "(solver.batch_prompts).")
    valid_floor: float = key(0.05, _FRACTION, doc="challenger_invalid: the challenger's valid share at or below this.")
    unique_floor: float = key(0.2, _FRACTION, doc="challenger_collapse: share of distinct proposals at or below this.")
    repetition_ceiling: float = key(0.8, _NON_NEGATIVE,
                                    doc="challenger_collapse: mean repetition penalty of valid proposals at or above "
                                        "this.")
    label_drop: float = key(0.15, _FRACTION, doc="label_accuracy: pseudo-label accuracy more than this below its best.")
    no_signal_ceiling: float = key(0.9, _FRACTION,
                                   doc="no_signal: share of solver groups whose answers all score the same at or above "
                                       "this ...")
    no_signal_rounds: int = key(3, Range(1, 10**4), doc="no_signal: ... for this many rounds in a row.")
    kl_ceiling: float = key(2.0, _POSITIVE, doc="kl: a role's approx_kl or kl above this.")
    logprob_gap_ceiling: float = key(0.5, _POSITIVE,
                                     doc="kl: a role's engine_logprob_gap (mean |trainer - engine| log-prob per token) "
                                         "above this.")


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
FREE_KEYS = {"env.kwargs"}

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
    """One dotted config key: its type as annotated, its default, its doc and the values it may take."""

    type: str
    default: Any
    doc: str
    range: Range | None = None


def key_specs(cls=Config, prefix: str = "") -> dict[str, KeySpec]:
    """Every dotted key of ``cls`` with its type, default, doc and range, in declaration order."""
    out: dict[str, KeySpec] = {}
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            out.update(key_specs(type(default), name + "."))
        else:
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            out[name] = KeySpec(kind, default, f.metadata.get("doc", ""), f.metadata.get("range"))
    return out


def valid_keys(cls=Config, prefix: str = "") -> dict[str, str]:
    """Every dotted key of ``cls`` mapped to its doc."""
    return {k: spec.doc for k, spec in key_specs(cls, prefix).items()}


# Every numeric key's range, by dotted key.
RANGES: dict[str, Range] = {k: spec.range for k, spec in key_specs().items() if spec.range is not None}


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted keys (a FREE_KEYS mapping stays one value)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and name not in FREE_KEYS:
            out.update(flatten(v, name + "."))
        else:
            out[name] = v
    return out


def diff_keys(old: Config, new: Config) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between two configs."""
    a = flatten(dataclasses.asdict(old))
    b = flatten(dataclasses.asdict(new))
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
