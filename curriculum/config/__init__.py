"""Typed run configuration: the schema (``schema``: one dataclass per component, each key with its
default, range and doc), YAML files and ``key=value`` overrides (``loader``), the user's plugins
(``plugins``) and the checks that run before any model is built (``validate``).

``from curriculum.config import X`` reaches every name below. Importing the package loads neither
``validate`` nor a registry (the engine imports the schema through it): ``load_config`` imports
``validate``, which reads the registries while it checks a config.
"""
from curriculum.config.loader import (MAX_CONFIG_BYTES, MAX_YAML_DEPTH, MAX_YAML_VALUES, check_keys, load_config,
                                      parse_overrides, to_yaml)
from curriculum.config.paths import TOKENIZER_FILES, local_model_dir
from curriculum.config.plugins import import_plugins
from curriculum.config.schema import (FREE_KEYS, MODES, RANGES, RESUMABLE_KEYS, TOOL_PROMPT, ChallengerConfig,
                                      CheckpointConfig, Config, CurriculumConfig, DistributedConfig, EnvConfig,
                                      EvalConfig, HealthConfig, KeySpec, LogConfig, LoraConfig, LossConfig, ModelConfig,
                                      OptimConfig, PromptConfig, Range, RewardConfig, RLConfig, RoleConfig,
                                      RolloutConfig, RunConfig, SamplingConfig, SolverConfig, TinyModelConfig,
                                      ToolUseConfig, TrainConfig, WandbConfig, WarmupConfig, diff_keys, is_resumable,
                                      key, key_specs, valid_keys)
from curriculum.errors import ConfigError


def __getattr__(name: str):
    if name == "MAX_STAGES":  # kept lazy: importing validate here would load it with the schema
        from curriculum.config.validate import MAX_STAGES

        return MAX_STAGES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
