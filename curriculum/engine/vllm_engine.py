"""Rollouts on a vLLM engine beside the trainer (``rollout.engine=vllm``).

One engine per process, colocated with the trainer on its device, tensor-parallel 1 (each
rank samples its share of the units, as with transformers). It is built from the model's
config alone (``load_format=dummy``): weights are pushed, never read from disk.

Weight sync is lazy. A role's ``version`` counts its updates; before a role samples, the
engine makes sure it holds that version:

- full fine-tuning: the engine holds one role's weights at a time; they are streamed into
  it (``reload_weights``) when another role samples or the role was updated, one tensor at
  a time (gathered one at a time under ZeRO-3);
- LoRA: the frozen base is pushed once; each role is a vLLM LoRA adapter, saved after each
  of its updates and loaded under a new adapter id (vLLM's multi-LoRA, one adapter per role).

vLLM's in-place reload refreshes the layers it loads; a tied output head is not loaded (it
shares the embedding) and on the CPU keeps the packed matrix of the old weights, so tied
heads are re-processed after each push (``_refresh_tied``).

Prompts go in as token ids, completions come out as token ids with the log-prob of each
sampled token (vLLM's processed log-probs: after temperature, as the trainer computes them, and
after top-p, which the trainer does not renormalise for: keep ``top_p`` 1 for exact TIS weights), for
truncated importance sampling (``grpo.truncated_is``). Each request is seeded from the
call's seed and its index, so a call's samples do not depend on how vLLM batches them; they
are not transformers' samples, and runs on this engine are reproducible on the same
hardware and vLLM version only (bit-exact resume is the hf engine's guarantee).

With ``rollout.sleep`` on a CUDA device, the engine's weights and KV cache are released
while the roles train (``release``) and restored before the next sampling.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from contextlib import nullcontext
from pathlib import Path

import torch

from curriculum.engine.prompts import Prompt, stop_ids
from curriculum.engine.distributed import full_parameters
from curriculum.engine.rollout import Completion, completion, encode_prompts

# vLLM's LoRA ranks (LoRAConfig.max_lora_rank); the engine takes the smallest one >= model.lora.r.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# KV cache of an engine on a CPU (there is no device memory share to size it from).
CPU_KV_CACHE_BYTES = 512 << 20


def request_seed(seed: int, i: int) -> int:
    """The seed of request ``i`` of a call seeded ``seed`` (32 bits, as vLLM's samplers take)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{i}".encode()).digest()[:4], "little")


def _gathered(param):
    """Context in which a ZeRO-3 partitioned parameter holds its full value (a no-op otherwise)."""
    if hasattr(param, "ds_id"):
        import deepspeed

        return deepspeed.zero.GatheredParameters([param])
    return nullcontext()


def base_weights(module: torch.nn.Module):
    """(name, tensor) of ``module``'s own weights as a Hugging Face checkpoint names them: LoRA weights
    left out, peft's ``.base_layer.`` dropped; one tensor at a time (a gathered one is copied out)."""
    for name, param in module.named_parameters():
        if "lora_" in name:
            continue
        with _gathered(param):
            tensor = param.detach()
            yield name.replace(".base_layer.", "."), tensor.clone() if hasattr(param, "ds_id") else tensor


def _refresh_tied(model: torch.nn.Module) -> int:
    """Re-process the unquantized embedding-type layers whose weight another layer shares (a tied output
    head): in-place reload skips them and, on a CPU, their packed matrix would keep the old weights."""
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    owners: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    refreshed = 0
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        shared = any(owners.get(id(p), 0) > 1 for p in module.parameters(recurse=False))
        if shared and isinstance(method, UnquantizedEmbeddingMethod):
            method.process_weights_after_loading(module)
            refreshed += 1
    return refreshed


class VLLMEngine:
    """Samples the roles' completions on one vLLM engine, pushing their weights lazily (module docstring)."""

    name = "vllm"

    def __init__(self, cfg, roles: dict, device: torch.device):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in this process: weights are handed over
        from vllm import LLM

        self.cfg = cfg
        self.lora = cfg.model.lora.enabled
        self.device = device
        self.sleeps = cfg.rollout.sleep and device.type == "cuda"
        self.asleep = False
        self.holder: str | None = None  # full weights: the role whose weights the engine holds
        self.synced: dict[str, int] = {}  # role -> the version the engine holds
        self.base_pushed = False
        self.adapters: dict[str, object] = {}  # role -> its current LoRARequest
        self._adapter_dirs: dict[str, Path] = {}  # role -> where that adapter was saved
        self._next_adapter_id = 1
        self._dir = tempfile.TemporaryDirectory(prefix="selfplay-vllm-")
        model = next(iter(roles.values())).model
        base = model.get_base_model() if self.lora else model
        base.config.save_pretrained(self._dir.name)  # the architecture only: weights are pushed
        kwargs = dict(model=self._dir.name, skip_tokenizer_init=True, load_format="dummy", dtype=cfg.model.dtype,
                      logprobs_mode="processed_logprobs",  # at the sampling temperature, as the update (verl)
                      seed=cfg.run.seed, enable_prefix_caching=True, tensor_parallel_size=1)
        if cfg.rollout.max_model_len:
            kwargs["max_model_len"] = cfg.rollout.max_model_len
        if device.type == "cuda":
            kwargs.update(gpu_memory_utilization=cfg.rollout.gpu_memory_utilization, enable_sleep_mode=self.sleeps)
        else:
            kwargs.update(enforce_eager=True, kv_cache_memory_bytes=CPU_KV_CACHE_BYTES)
        if self.lora:
            r = cfg.model.lora.r
            kwargs.update(enable_lora=True, max_loras=2, max_lora_rank=next((x for x in LORA_RANKS if x >= r), r))
        self.llm = LLM(**kwargs)

    # ------------------------------------------------------------------ sampling

    def generate(self, role, tokenizer, prompts: list[Prompt], *, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, greedy: bool = False, batch_size: int = 256, seed: int | None = None,
                 desc: str | None = None, progress: bool = False, style: str = "plain",
                 share_prompts: bool = True) -> list[Completion]:
        """``rollout.generate``'s contract on the engine: one completion per prompt, ending at its first stop
        token (kept), with the engine's log-prob of every token. ``batch_size`` and ``share_prompts`` are
        the engine's business (continuous batching, prefix caching)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        lora = self.sync(role)
        stops = stop_ids(tokenizer, role.model, style)
        encoded = encode_prompts(tokenizer, prompts, style)
        if not encoded:
            return []
        base = seed if seed is not None else int(torch.randint(0, 2**31, ()).item())
        params = [SamplingParams(max_tokens=max_new_tokens, temperature=0.0 if greedy else temperature, top_p=top_p,
                                 seed=None if greedy else request_seed(base, i), stop_token_ids=stops,
                                 ignore_eos=True, logprobs=0, detokenize=False)
                  for i in range(len(encoded))]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(ids)) for ids in encoded], params,
                                 use_tqdm=progress and len(encoded) > 1, lora_request=lora)
        completions = []
        for ids, out in zip(encoded, outs):
            sample = out.outputs[0]
            logprobs = [float(step[t].logprob) for step, t in zip(sample.logprobs, sample.token_ids)]
            completions.append(completion(ids, list(sample.token_ids), stops, tokenizer, logprobs=logprobs))
        return completions

    # ------------------------------------------------------------------ weights

    def sync(self, role):
        """Bring the engine to ``role``'s current weights; the LoRARequest to sample it with (None: full weights)."""
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
        if self.lora:
            if not self.base_pushed:
                self._push(base_weights(role.model.get_base_model()))
                self.base_pushed = True
            if self.synced.get(role.name) != role.version:
                self._load_adapter(role)
            return self.adapters[role.name]
        if self.holder != role.name or self.synced.get(role.name) != role.version:
            self._push(base_weights(role.model))
            self.holder, self.synced = role.name, {role.name: role.version}
        return None

    def _push(self, weights) -> None:
        """Stream (name, tensor) into the engine's model in place; tied heads re-processed."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.apply_model(_refresh_tied)
        self.llm.reset_prefix_cache()  # cached keys and values belong to the old weights

    def _load_adapter(self, role) -> None:
        """Save ``role``'s adapter and load it into the engine under a new id, dropping the old one."""
        from vllm.lora.request import LoRARequest

        path = Path(self._dir.name) / "adapters" / f"{role.name}-{role.version}"
        path.mkdir(parents=True, exist_ok=True)
        with full_parameters(role):
            role.model.save_pretrained(path, selected_adapters=[role.name])
        where = path / role.name if (path / role.name).is_dir() else path  # peft nests a non-default adapter
        old = self.adapters.get(role.name)
        request = LoRARequest(f"{role.name}-v{role.version}", self._next_adapter_id, str(where))
        self._next_adapter_id += 1
        self.llm.llm_engine.add_lora(request)  # read into the engine's memory now
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(self._adapter_dirs.pop(role.name), ignore_errors=True)  # one saved adapter per role
        self._adapter_dirs[role.name] = path
        self.adapters[role.name] = request
        self.synced[role.name] = role.version
        self.llm.reset_prefix_cache()

    # ------------------------------------------------------------------ memory

    def release(self) -> None:
        """Before an update: free the engine's device memory (``rollout.sleep`` on CUDA; a no-op otherwise)."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def close(self) -> None:
        """Shut the engine down and remove its files."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            del llm
        self._dir.cleanup()
