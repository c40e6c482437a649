"""Several processes: ranks and collectives, sharding of rollouts, DeepSpeed engines, portable state.

A run on N processes is launched by ``torchrun`` or the ``deepspeed`` launcher, which set
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``. ``init_dist`` turns them into a ``Dist``
(gloo on CPU, nccl on CUDA); without them it returns ``SingleProcess``, the trivial twin,
so the trainer calls the same few methods either way.

Rollouts are data-parallel by *units* (a GRPO group, a probed task's samples, a block of
proposals): each rank generates and scores a contiguous share of the units, and the
results are gathered in unit order, so every rank holds the same global batch, the
same rewards and the same task pool. Training splits every minibatch across the ranks
and normalises the loss by the minibatch's global token (or sequence) count, so
N ranks x B/N sequences give the gradient of 1 rank x B.

Checkpoints are portable: weights in Hugging Face / peft format, and each role's
optimizer state as a torch ``AdamW.state_dict()`` over the role's full parameters
(DeepSpeed partitions are gathered on save and scattered on load), so a run saved on
N ranks resumes on M ranks, with either engine.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import random
import socket
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from curriculum.config import Config, ConfigError

# ----------------------------------------------------------------------------- ranks


class SingleProcess:
    """One process: every collective is the identity."""

    rank = 0
    world = 1
    local_rank = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        pass

    def all_gather_object(self, obj: Any) -> list:
        return [obj]

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        return obj

    def close(self) -> None:
        pass


class Dist(SingleProcess):
    """A process of a torch.distributed group (already initialised)."""

    def __init__(self, rank: int, world: int, local_rank: int):
        self.rank, self.world, self.local_rank = rank, world, local_rank

    def barrier(self) -> None:
        torch.distributed.barrier()

    def all_gather_object(self, obj: Any) -> list:
        out: list = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=src)
        return box[0]

    def close(self) -> None:
        if torch.distributed.is_initialized():
            # every rank done before any tears down: a rank leaving while another still talks to it
            # aborted now and then at exit ("terminate called without an active exception"). Not while
            # an exception unwinds (called from a finally): the other ranks may never reach the barrier.
            if sys.exc_info()[0] is None:
                torch.distributed.barrier()
            torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_dist(cfg: Config, device: torch.device) -> SingleProcess:
    """The process group the launcher describes (``RANK``/``WORLD_SIZE``/``LOCAL_RANK``).

    engine=torch runs one process only; engine=deepspeed needs a process group even on
    one process, so a group of one is made up when no launcher set the variables.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    engine = cfg.distributed.engine
    if world > 1 and engine != "deepspeed":
        raise ConfigError(f"{world} processes (WORLD_SIZE={world}) need distributed.engine=deepspeed "
                          f"(distributed.engine={engine} runs one process)")
    if engine == "torch":
        return SingleProcess()
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:  # one process per machine, before any rank builds
        clear_stale_build_locks(extensions_dir())
    deepspeed = import_deepspeed()
    if world == 1:
        for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                           ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(_free_port()))):
            os.environ.setdefault(key, value)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        torch.cuda.set_device(local_rank)
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if device.type == "cuda" else "gloo", auto_mpi_discovery=False,
                                   timeout=datetime.timedelta(seconds=cfg.distributed.timeout_s))
    return Dist(rank, world, local_rank)


# A build of DeepSpeed's CPU communication extension takes about a minute; a lock this much older,
# with no build running in its directory, was left by a run killed mid-build.
STALE_LOCK_S = 600


def extensions_dir() -> Path:
    """Where torch builds C++ extensions (and leaves their build locks)."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")


def _build_running_in(directory: Path) -> bool:
    """Whether a process (ninja, the compiler) works in ``directory``: the build that holds its lock."""
    directory = directory.resolve()
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            cwd = Path(os.readlink(proc / "cwd"))
            if cwd == directory or directory in cwd.parents:
                return True
    return False


def clear_stale_build_locks(root: Path, stale_s: float = STALE_LOCK_S, now: float | None = None) -> list[Path]:
    """Remove extension build locks under ``root`` left by a killed build, which make every later
    build wait forever (torch's file baton): older than ``stale_s`` with no build running in their
    directory. A lock that cannot be removed is a ConfigError naming the file to delete. Returns
    the locks removed."""
    import logging
    import time

    log = logging.getLogger(__name__)
    now = time.time() if now is None else now
    removed = []
    for lock in sorted(root.glob("**/lock")) if root.is_dir() else []:
        with contextlib.suppress(FileNotFoundError):  # a build that just finished
            age = now - lock.stat().st_mtime
            if _build_running_in(lock.parent):
                continue
            if age < stale_s:
                log.warning("%s exists (%.0f s old) with no build running; if the run waits here, a run killed "
                            "while building left it: delete that file", lock, age)
                continue
            try:
                lock.unlink()
            except OSError as exc:
                raise ConfigError(f"{lock} is a build lock left by a killed run ({age:.0f} s old, no build running); "
                                  f"every DeepSpeed start would wait on it forever. Delete it ({exc.strerror})") from exc
            log.warning("removed %s: a build lock %.0f s old with no build running, left by a run killed while it "
                        "built the extension", lock, age)
            removed.append(lock)
    return removed


def import_deepspeed():
    try:
        import deepspeed
    except Exception as exc:  # ImportError, or a broken build raising anything else
        raise ConfigError(f"distributed.engine=deepspeed but deepspeed cannot be imported ({type(exc).__name__}: "
                          f"{exc}); install it with `pip install deepspeed` or use distributed.engine=torch") from exc
    return deepspeed


def check_world(cfg: Config, world: int) -> None:
    """Shapes that must divide by the number of ranks; the message names the numbers."""
    problems = []
    for role in ("challenger", "solver"):
        rc = getattr(cfg, role)
        if rc.batch_prompts % world:
            problems.append(f"{role}.batch_prompts ({rc.batch_prompts}) is not a multiple of the {world} ranks "
                            f"(each rank keeps whole GRPO groups)")
        mb = rc.loss.minibatch_size or rc.batch_prompts * rc.group_size
        micro = cfg.distributed.micro_batch_size
        if mb % world:
            problems.append(f"{role}: a minibatch of {mb} sequences does not split over {world} ranks")
        elif micro and (mb // world) % micro:
            problems.append(f"{role}: a rank's share of a minibatch ({mb} / {world} = {mb // world} sequences) is "
                            f"not a multiple of distributed.micro_batch_size ({micro})")
    if problems:
        raise ConfigError("; ".join(problems))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("run.device=cuda but torch sees no CUDA device")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def start_process(cfg: Config) -> tuple[torch.device, SingleProcess]:
    """This process's torch settings (``run.threads``, ``run.deterministic``, every seed), its device and
    its process group; the batch shapes checked against the number of ranks. Returns (device, dist)."""
    if cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)
    torch.use_deterministic_algorithms(cfg.run.deterministic, warn_only=True)
    seed_everything(cfg.run.seed)
    device = resolve_device(cfg.run.device)
    dist = init_dist(cfg, device)
    check_world(cfg, dist.world)
    if device.type == "cuda" and dist.world > 1:
        device = torch.device("cuda", dist.local_rank)
    return device, dist


# ----------------------------------------------------------------------------- sharding


def shard_units(n_units: int, rank: int, world: int) -> list[tuple[int, bool]]:
    """This rank's contiguous share of ``n_units`` units as ``(unit, real)`` pairs.

    Every rank gets ceil(n / world) entries, padded by repeating its last unit (or unit 0)
    with ``real=False``: ranks then run the same number of forward passes, which
    ZeRO-3 needs (its layers are gathered collectively).
    """
    per = -(-n_units // world) if n_units else 0
    lo, hi = min(rank * per, n_units), min((rank + 1) * per, n_units)
    out = [(u, True) for u in range(lo, hi)]
    pad = out[-1][0] if out else 0
    return out + [(pad, False)] * (per - len(out))


def run_sharded(dist: SingleProcess, units: list[list], fn: Callable[[list, int], list],
                seed_of: Callable[[int | None], int], per_unit: bool) -> list:
    """Apply ``fn(items, seed) -> one result per item`` to this rank's units; gather in unit order.

    per_unit=False: a rank's units go through one call seeded ``seed_of(None)``;
    per_unit=True: each unit u is its own call seeded ``seed_of(u)`` (samples then do not
    depend on the number of ranks). Returns the results of all units, on every rank.
    """
    mine = shard_units(len(units), dist.rank, dist.world)
    results: list[tuple[int, bool, list]] = []
    if per_unit:
        results = [(u, real, fn(units[u], seed_of(u))) for u, real in mine]
    elif mine:
        out = fn([x for u, _ in mine for x in units[u]], seed_of(None))
        k = 0
        for u, real in mine:
            results.append((u, real, out[k : k + len(units[u])]))
            k += len(units[u])
    gathered = dist.all_gather_object([(u, res) for u, real, res in results if real])
    by_unit = dict(pair for part in gathered for pair in part)
    return [x for u in range(len(units)) for x in by_unit[u]]


# ----------------------------------------------------------------------------- DeepSpeed


def deepspeed_config(cfg: Config, role: str, world: int) -> dict:
    """The DeepSpeed config of one role's engine; ``distributed.deepspeed_config`` overrides keys."""
    dc, rc = cfg.distributed, getattr(cfg, role)
    minibatch = rc.loss.minibatch_size or rc.batch_prompts * rc.group_size
    share = max(1, minibatch // world)
    micro = dc.micro_batch_size or share
    gas = max(1, share // micro)
    zero: dict[str, Any] = {"stage": dc.zero_stage}
    if dc.offload in ("optimizer", "all"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    if dc.offload == "all":
        zero["offload_param"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    if dc.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    out = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": gas,
        "train_batch_size": micro * gas * world,
        "gradient_clipping": rc.optim.grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": cfg.model.dtype == "bfloat16"},
        # The optimizer is our torch AdamW (the same update as the single-process run).
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    if dc.deepspeed_config:
        _merge(out, json.loads(Path(dc.deepspeed_config).expanduser().read_text()))
    return out


def _merge(into: dict, extra: dict) -> None:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def wrap_deepspeed(roles: dict, cfg: Config, world: int) -> None:
    """Give each role its own engine over only its trainable parameters (one per LoRA adapter).

    One engine per adapter: an engine over both adapters of a shared base would step the
    inactive adapter too. The role keeps its module (``role.model``); the engine owns
    gradient reduction, accumulation, clipping and the (sharded) optimizer step.
    """
    deepspeed = import_deepspeed()
    for name, role in roles.items():
        engine, optimizer, _, scheduler = deepspeed.initialize(
            model=role.model, model_parameters=role.params, optimizer=role.optimizer,
            lr_scheduler=role.scheduler, config=deepspeed_config(cfg, name, world))
        role.engine, role.optimizer, role.scheduler = engine, optimizer, scheduler
    if cfg.distributed.zero_stage == 3:
        # transformers' generate() then keeps all ranks stepping together (synced_gpus) until
        # every rank's sequences are done: ZeRO-3 gathers each layer collectively.
        from transformers.integrations import HfDeepSpeedConfig

        name, first = next(iter(roles.items()))
        first.hf_ds_config = HfDeepSpeedConfig(deepspeed_config(cfg, name, world))


def _inner(role):
    """The torch optimizer inside DeepSpeed's ZeRO wrapper (it steps the flat fp32 partitions)."""
    return getattr(role.optimizer, "optimizer", role.optimizer)


def _zero_stage(role) -> int:
    return role.engine.zero_optimization_stage() if role.engine is not None else 0


@contextlib.contextmanager
def full_parameters(role, modifier_rank: int | None = None):
    """Whole parameters inside the block under ZeRO-3 (a collective: every rank enters)."""
    if role.engine is None or _zero_stage(role) != 3:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(role.model.parameters()), modifier_rank=modifier_rank):
        yield


def _partitioned(p) -> bool:
    """True if DeepSpeed keeps ``p``'s optimizer state in flat partitions (ZeRO-1/2/3, bf16)."""
    return hasattr(p, "ds_id") or hasattr(p, "_hp_mapping")  # a None mapping: not on this rank


def _get_state(p, key: str, inner) -> torch.Tensor:
    from deepspeed.utils import safe_get_full_optimizer_state

    return safe_get_full_optimizer_state(p, key) if _partitioned(p) else inner.state[p][key]


def _set_state(p, value: torch.Tensor, key: str, inner) -> None:
    from deepspeed.utils import safe_set_full_optimizer_state

    if _partitioned(p):
        safe_set_full_optimizer_state(p, value.float(), key)
    else:  # ZeRO stage 0 in fp32: the torch optimizer steps the parameters themselves
        inner.state[p][key].copy_(value.reshape(p.shape))


def export_trainer_state(role) -> dict:
    """Optimizer and scheduler state as a torch ``AdamW.state_dict()`` over ``role.params``.

    Collective under ZeRO (every rank calls it); each tensor is the full one.
    Also ``master``: the fp32 weights when the module runs in a lower precision.
    """
    from deepspeed.utils import safe_get_full_fp32_param

    inner = _inner(role)
    states = [s for s in inner.state.values() if "exp_avg" in s]
    state: dict[int, dict] = {}
    if states:  # no step yet: AdamW's state is empty
        step = states[0]["step"]
        for i, p in enumerate(role.params):
            shape = getattr(p, "ds_shape", p.shape)  # ZeRO-3 parameters are empty outside a gather
            state[i] = {"step": step.detach().clone().cpu(),
                        **{k: _get_state(p, k, inner).detach().cpu().reshape(shape) for k in ("exp_avg", "exp_avg_sq")}}
    group = {k: v for k, v in inner.param_groups[0].items() if k != "params"}
    group["params"] = list(range(len(role.params)))
    master = None
    if role.params and role.params[0].dtype != torch.float32:
        master = [safe_get_full_fp32_param(p).detach().cpu() for p in role.params]
    return {"optimizer": {"state": state, "param_groups": [group]}, "scheduler": role.scheduler.state_dict(),
            "master": master}


def import_trainer_state(role, saved: dict) -> None:
    """Load ``export_trainer_state`` (or a torch optimizer's) state into a DeepSpeed role.

    Also re-seeds DeepSpeed's fp32 master partitions from the module weights just loaded
    (or the saved master), which a plain load of the module would leave stale.
    """
    from deepspeed.utils import safe_set_full_fp32_param

    inner = _inner(role)
    opt = saved["optimizer"]
    with full_parameters(role):
        whole = [p.detach().float().clone() for p in role.params]
    master = saved.get("master")
    for i, p in enumerate(role.params):
        safe_set_full_fp32_param(p, master[i] if master is not None else whole[i])
    if opt["state"]:
        step = next(iter(opt["state"].values()))["step"]
        # ZeRO-3 lists its flat fp32 partitions in the optimizer only during a step.
        flats = getattr(role.optimizer, "fp32_partitioned_groups_flat", None) or [
            q for g in inner.param_groups for q in g["params"]]
        for flat in flats:
            # AdamW creates its state lazily at the first step; create it so it can be filled.
            inner.state[flat] = {"step": torch.as_tensor(step, dtype=torch.float32).clone(),
                                 "exp_avg": torch.zeros_like(flat), "exp_avg_sq": torch.zeros_like(flat)}
        if hasattr(role.optimizer, "_lazy_init_hp_params_optimizer_state"):
            # ZeRO-1/2 and bf16: point each parameter's fragments at the new state (DeepSpeed
            # otherwise links them once, at the first step).
            role.optimizer._link_all_hp_params()
            role.optimizer._hp_optimizer_states_linked = False
            role.optimizer._lazy_init_hp_params_optimizer_state()
        for i, p in enumerate(role.params):
            s = opt["state"][i] if i in opt["state"] else opt["state"][str(i)]
            for key in ("exp_avg", "exp_avg_sq"):
                _set_state(p, s[key], key, inner)
    for g in inner.param_groups:
        for k, v in opt["param_groups"][0].items():
            if k not in ("params", "foreach", "fused", "capturable", "differentiable"):
                g[k] = v
    role.scheduler.load_state_dict(saved["scheduler"])
