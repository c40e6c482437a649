"""The two roles' models: built from the embedded tiny model or a local path, full or LoRA.

Sharing modes:
- full fine-tuning: each role owns a copy of the model;
- LoRA with ``model.share_base``: one frozen base holds two peft adapters,
  ``challenger`` and ``solver`` (one copy of the weights); the base with
  adapters disabled is the KL reference, so no third copy exists.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from curriculum.config import Config, ModelConfig, OptimConfig, local_model_dir
from curriculum.engine.rl import sequence_logprobs
from curriculum.errors import ConfigError, DamagedCheckpoint

ROLES = ("challenger", "solver")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Role:
    """One trainable role: the module it runs, its adapter (if LoRA), optimizer and schedule."""

    name: str
    model: torch.nn.Module
    adapter: str | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    reference: torch.nn.Module | None = None
    params: list[torch.nn.Parameter] = field(default_factory=list)
    # DeepSpeed engine stepping ``params`` (distributed.engine=deepspeed); None: plain optimizer.
    engine: Any = None
    # Keeps transformers aware of ZeRO-3 (generate() then steps ranks in sync) while alive.
    hf_ds_config: Any = None
    # Updates applied so far (a rollout engine with its own copy of the weights re-syncs when it changes).
    version: int = 0

    def activate(self) -> "Role":
        """Make this role's adapter the active one (no-op for full models)."""
        if self.adapter is not None:
            self.model.set_adapter(self.adapter)
        return self

    @torch.no_grad()
    def reference_logprobs(self, input_ids, attention_mask, backend: str = "auto", temperature: float = 1.0):
        """Log-probs under the reference policy at the sampling ``temperature``: base with adapters off, or the
        frozen copy."""
        if self.adapter is not None:
            with self.model.disable_adapter():
                return sequence_logprobs(self.model, input_ids, attention_mask, backend=backend,
                                         temperature=temperature)[0]
        if self.reference is None:
            raise RuntimeError(f"{self.name}: kl_coef > 0 but no reference model was built")
        return sequence_logprobs(self.reference, input_ids, attention_mask, backend=backend, temperature=temperature)[0]

    def trainer_state(self) -> dict:
        """A torch optimizer state dict over ``params`` either way (collective under DeepSpeed)."""
        if self.engine is not None:
            from curriculum.engine.distributed import export_trainer_state

            return export_trainer_state(self)
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_trainer_state(self, state: dict) -> None:
        if self.engine is not None:
            from curriculum.engine.distributed import import_trainer_state

            import_trainer_state(self, state)
            return
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def make_optimizer(params, cfg: OptimConfig):
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    warm = cfg.warmup_steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if warm > 0 else 1.0)
    return opt, sched


def model_dir(m: ModelConfig) -> Path:
    """The local directory of ``model.path`` (at ``model.revision`` for a model id in the HF cache)."""
    path = local_model_dir(m.path, m.revision)
    if path is None:  # validated at load_config; the cache or directory changed since
        raise FileNotFoundError(f"model.path {m.path!r} is no longer a local directory or cached model")
    return path


def hf_kwargs(m: ModelConfig) -> dict:
    """``from_pretrained`` arguments of a model.path model (and of checkpoints trained from it)."""
    kwargs = {"dtype": DTYPES[m.dtype], "trust_remote_code": m.trust_remote_code}
    if m.attn_implementation:  # otherwise transformers picks (sdpa where it can)
        kwargs["attn_implementation"] = m.attn_implementation
    return kwargs


def load_pretrained(m: ModelConfig):
    """The model.path model, in model.dtype."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir(m), **hf_kwargs(m))


def load_tokenizer(cfg: Config):
    """The tokenizer of the run: the embedded one, or the local model's (pad filled in with eos if it has none).

    Nothing else is added: prompts are encoded as the tokenizer itself or its chat template
    encodes them (``curriculum.engine.prompts``), with no stray bos.
    """
    if not cfg.model.path:
        from curriculum.engine import tiny

        return tiny.build_tokenizer()
    from transformers import AutoTokenizer

    m = cfg.model
    where = local_model_dir(m.tokenizer_path) if m.tokenizer_path else model_dir(m)
    if where is None:
        raise FileNotFoundError(f"model.tokenizer_path {m.tokenizer_path!r} is no longer a local directory or cached model")
    tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=m.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_checkpoint_role(cfg: Config, checkpoint: Path, name: str, base=None) -> tuple["Role", Any]:
    """Role ``name`` of a checkpoint with its tokenizer: one role, no optimizer, on the CPU, in eval mode.

    A LoRA role's base is the checkpoint's ``base/`` (the embedded model), model.path, or, for checkpoints
    older than ``base/``, ``base()``'s model and tokenizer (the warmed-up embedded model rebuilt or taken from
    its cache: ``curriculum.warmup.load_role``).
    """
    from transformers import AutoModelForCausalLM

    if cfg.model.lora.enabled:  # adapters need their base
        from peft import get_peft_model

        if (checkpoint / "base").is_dir():
            base_model, tokenizer = AutoModelForCausalLM.from_pretrained(checkpoint / "base", **hf_kwargs(cfg.model)), load_tokenizer(cfg)
        elif cfg.model.path:
            base_model, tokenizer = load_pretrained(cfg.model), load_tokenizer(cfg)
        elif base is not None:
            base_model, tokenizer = base()
        else:
            raise DamagedCheckpoint(f"{checkpoint}: a LoRA checkpoint without base/ needs its warmed-up base rebuilt")
        role = Role(name, get_peft_model(base_model, _lora_config(cfg, base_model), adapter_name=name), name, None, None)
        try:
            load_role_weights(role, checkpoint / name)
        except ValueError as exc:
            raise DamagedCheckpoint(str(exc)) from exc
    else:
        for f in sorted((checkpoint / name).glob("*.safetensors")):  # names the file, refuses non-finite weights
            check_weight_file(f)
        try:
            model = AutoModelForCausalLM.from_pretrained(checkpoint / name, **hf_kwargs(cfg.model))
        except (OSError, ValueError, RuntimeError) as exc:  # a size mismatch, a config that is not JSON
            raise DamagedCheckpoint(f"{checkpoint / name}: cannot load ({type(exc).__name__}: {exc})") from exc
        role, tokenizer = Role(name, model, None, None, None), load_tokenizer(cfg)
    role.model.eval()
    return role, tokenizer


def build_roles(cfg: Config, base, device: torch.device) -> dict[str, Role]:
    """Wrap ``base`` into the two roles according to the sharing mode."""
    needs_ref = any(getattr(cfg, r).loss.kl_coef > 0 for r in ROLES)
    if cfg.model.gradient_checkpointing:
        # Non-reentrant: gradients reach LoRA weights behind a frozen embedding, and ZeRO-3 hooks work.
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    base.to(device)
    if cfg.model.lora.enabled:
        return _lora_roles(cfg, base)
    reference = None
    if needs_ref:
        reference = copy.deepcopy(base).eval().requires_grad_(False)
    roles = {}
    for i, name in enumerate(ROLES):
        model = base if i == len(ROLES) - 1 else copy.deepcopy(base)
        params = [p for p in model.parameters() if p.requires_grad]
        opt, sched = make_optimizer(params, getattr(cfg, name).optim)
        roles[name] = Role(name, model, None, opt, sched, reference, params)
    return roles


def _lora_config(cfg: Config, model: torch.nn.Module):
    """peft's LoraConfig for ``model``, whose modules must include every ``model.lora.target_modules``."""
    from peft import LoraConfig

    lc = cfg.model.lora
    _check_lora_targets(list(lc.target_modules), model)
    return LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout,
                      target_modules=list(lc.target_modules), task_type="CAUSAL_LM")


def _check_lora_targets(targets: list[str], model: torch.nn.Module) -> None:
    """Each target must name modules of ``model`` as peft matches them (the full name, or its last
    parts): peft ignores a misspelt name as long as another one matches, training less than asked."""
    names = [name for name, _ in model.named_modules() if name]
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ConfigError(f"model.lora.target_modules: {', '.join(missing)} not in the model; "
                          f"its linear layers are {', '.join(linear[:10])}")


def _lora_roles(cfg: Config, base) -> dict[str, Role]:
    from peft import get_peft_model

    bases = [base] if cfg.model.share_base else [base, copy.deepcopy(base)]
    models = {}
    for i, name in enumerate(ROLES):
        b = bases[min(i, len(bases) - 1)]
        if cfg.model.share_base and i > 0:
            models[ROLES[0]].add_adapter(name, _lora_config(cfg, b))
            models[name] = models[ROLES[0]]
        else:
            models[name] = get_peft_model(b, _lora_config(cfg, b), adapter_name=name)
    roles = {}
    for name in ROLES:
        model = models[name]
        params = [p for n, p in model.named_parameters() if f".{name}." in n and "lora_" in n]
        for p in params:
            p.requires_grad_(True)
        opt, sched = make_optimizer(params, getattr(cfg, name).optim)
        roles[name] = Role(name, model, name, opt, sched, None, params)
    return roles


def save_role(role: Role, path: Path, tokenizer, base_model: str | None = None) -> None:
    """Hugging Face / peft format, with the tokenizer: ``from_pretrained(path)`` loads it directly.

    A LoRA role is a peft adapter directory (adapter_config.json at its top, whatever the
    adapter's name): ``AutoPeftModelForCausalLM.from_pretrained(path)`` loads it onto the base
    its config names (``base_model`` if given), ``PeftModel.from_pretrained(base, path)`` onto any.
    """
    path.mkdir(parents=True, exist_ok=True)
    if role.adapter is not None:
        role.model.save_pretrained(path, selected_adapters=[role.adapter])
        nested = path / role.adapter  # where peft puts an adapter not named "default"
        if nested.is_dir():
            for f in nested.iterdir():
                f.replace(path / f.name)
            nested.rmdir()
        if base_model is not None:
            config_file = path / "adapter_config.json"
            config = json.loads(config_file.read_text())
            config["base_model_name_or_path"] = base_model
            config_file.write_text(json.dumps(config, indent=2, sort_keys=True))
    else:
        role.model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def save_base(role: Role, path: Path, tokenizer) -> None:
    """The frozen base under a LoRA role's adapters, as a plain model directory (with the tokenizer)."""
    base = role.model.get_base_model()
    # peft wraps each targeted layer: its own weights become <name>.base_layer.*, beside lora_*
    state = {k.replace(".base_layer.", "."): v for k, v in base.state_dict().items() if "lora_" not in k}
    base.save_pretrained(path, state_dict=state)
    tokenizer.save_pretrained(path)


def check_weight_file(f: Path) -> dict:
    """The tensors of safetensors file ``f``; a ``DamagedCheckpoint`` naming it if unreadable or not all finite."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        part = load_file(f)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise DamagedCheckpoint(f"{f}: unreadable weights ({type(exc).__name__}: {exc})") from exc
    for k, v in part.items():
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise DamagedCheckpoint(f"{f}: {k} holds {int((~torch.isfinite(v)).sum())} non-finite values")
    return part


def read_role_weights(role: Role, path: Path) -> dict:
    """The weights ``save_role`` wrote under ``path``, checked against ``role`` (names, shapes, all
    finite) without touching it; a ``ValueError`` naming the file and what is wrong otherwise."""
    if role.adapter is not None:
        from peft import get_peft_model_state_dict

        # At the top of the role's directory; checkpoints of older versions have it one level down.
        files = [d / "adapter_model.safetensors" for d in (path, path / role.adapter)]
        files = [f for f in files if f.is_file()][:1]
        if not files:
            raise FileNotFoundError(f"no adapter_model.safetensors in {path}")
        expected = get_peft_model_state_dict(role.model, adapter_name=role.adapter)
    else:
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors under {path}")
        expected = role.model.state_dict()
    state, origin = {}, {}
    for f in files:
        part = check_weight_file(f)
        state.update(part)
        origin.update(dict.fromkeys(part, f))
    # Tied embeddings are saved once; anything else missing is a real mismatch.
    missing = [k for k in expected if k not in state and not k.endswith("lm_head.weight")]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise DamagedCheckpoint(f"{path}: weights of another model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    for k, v in state.items():
        want = tuple(getattr(expected[k], "ds_shape", expected[k].shape))
        if expected[k].numel() and tuple(v.shape) != want:  # partitioned (ZeRO-3) tensors are empty here
            raise DamagedCheckpoint(f"{origin[k]}: {k} has shape {tuple(v.shape)}, the model has {want}")
    return state


def load_role_weights(role: Role, path: Path, state: dict | None = None) -> None:
    """Restore a role's weights saved by ``save_role`` (exactly, in place); ``state``: as
    ``read_role_weights`` returned it, already checked."""
    if state is None:
        state = read_role_weights(role, path)
    if role.adapter is not None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(role.model, state, adapter_name=role.adapter)
        return
    missing, unexpected = role.model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"{path}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if getattr(role.model.config, "tie_word_embeddings", False):
        role.model.tie_weights()


def lr_of(role: Role) -> float:
    return float(role.optimizer.param_groups[0]["lr"])


def global_grad_norm(params) -> float:
    sq = sum(float(p.grad.detach().float().pow(2).sum()) for p in params if p.grad is not None)
    return math.sqrt(sq)
