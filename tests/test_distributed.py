"""Several processes on CPU (torchrun, gloo, DeepSpeed ZeRO): sharding, equivalence, N -> M resume.

The slow tests launch real 2-process runs; their one-process references and resumes run the CLI in
this process. DeepSpeed JIT-compiles a communication
extension on its first start (about a minute), cached under TORCH_EXTENSIONS_DIR
(default here: ~/.cache/selfplay/torch_extensions).

Run as a script under torchrun, this file is the worker of the shared-base LoRA test
and of the non-finite step test.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from curriculum.config import ConfigError, load_config
from curriculum.engine.distributed import SingleProcess, check_world, deepspeed_config, run_sharded, shard_units

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.cli_runner import in_process, real_process  # noqa: E402
from tests.conftest import TINY_OVERRIDES  # noqa: E402

os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path("~/.cache/selfplay/torch_extensions").expanduser()))

# A longer warm-up than TINY_OVERRIDES so both roles get a learning signal in round 1;
# group seeding so the samples do not depend on the number of ranks.
RUN = TINY_OVERRIDES + ["model.warmup.steps=200", "model.warmup.challenger_fraction=0.5",
                        "distributed.rollout_seed=group", "checkpoint.keep_last=10"]
DS = ["distributed.engine=deepspeed"]
TOL = 1e-5  # fp32: a different reduction order of the same sums


# ----------------------------------------------------------------------------- fast


def test_shard_units_are_contiguous_and_padded():
    shares = [shard_units(5, r, 2) for r in range(2)]
    assert shares == [[(0, True), (1, True), (2, True)], [(3, True), (4, True), (4, False)]]
    assert [u for s in shares for u, real in s if real] == list(range(5))
    assert shard_units(1, 1, 2) == [(0, False)]  # an idle rank still runs the same number of calls
    assert shard_units(0, 0, 2) == []


class FakeRanks(SingleProcess):
    """Rank ``rank`` of ``world`` whose gather returns what every rank would compute."""

    def __init__(self, rank, world, everyone):
        self.rank, self.world, self.everyone = rank, world, everyone

    def all_gather_object(self, obj):
        return [obj if r == self.rank else self.everyone(r) for r in range(self.world)]


def test_run_sharded_gathers_in_unit_order_whatever_the_world():
    units = [[f"u{u}-{i}" for i in range(3)] for u in range(5)]

    def fn(items, seed):
        return [f"{x}@{seed}" for x in items]

    single = run_sharded(SingleProcess(), units, fn, lambda u: u, per_unit=True)

    def on_rank(rank):
        mine = shard_units(len(units), rank, 2)
        return [(u, fn(units[u], u)) for u, real in mine if real]

    dist = FakeRanks(0, 2, on_rank)
    assert run_sharded(dist, units, fn, lambda u: u, per_unit=True) == single
    assert single[4] == "u1-1@1"


def test_world_size_must_divide_groups_and_minibatches():
    cfg = load_config(None, TINY_OVERRIDES + ["solver.batch_prompts=3"])
    with pytest.raises(ConfigError, match=r"solver.batch_prompts \(3\) is not a multiple of the 2 ranks"):
        check_world(cfg, 2)
    check_world(cfg, 1)
    cfg = load_config(None, TINY_OVERRIDES + ["distributed.micro_batch_size=3"])
    with pytest.raises(ConfigError, match=r"\(16 / 2 = 8 sequences\).*micro_batch_size \(3\)"):
        check_world(cfg, 2)


def test_config_refuses_what_cannot_run():
    with pytest.raises(ConfigError, match="two engines cannot partition one shared base"):
        load_config(None, DS + ["model.lora.enabled=true", "distributed.zero_stage=3"])
    with pytest.raises(ConfigError, match="model.dtype=bfloat16 instead of float16"):
        load_config(None, DS + ["model.dtype=float16"])
    with pytest.raises(ConfigError, match="needs distributed.zero_stage=3"):
        load_config(None, ["distributed.offload=all"])
    with pytest.raises(ConfigError, match="distributed.zero_stage \\(4\\)"):
        load_config(None, ["distributed.zero_stage=4"])


def test_several_processes_need_deepspeed(monkeypatch):
    from curriculum.engine.distributed import init_dist

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"2 processes \(WORLD_SIZE=2\) need distributed.engine=deepspeed"):
        init_dist(load_config(None, []), torch.device("cpu"))


def test_missing_deepspeed_is_named(monkeypatch):
    from curriculum.engine.distributed import import_deepspeed

    monkeypatch.setitem(sys.modules, "deepspeed", None)
    with pytest.raises(ConfigError, match="deepspeed cannot be imported.*pip install deepspeed"):
        import_deepspeed()


def test_deepspeed_config_from_run_config(tmp_path):
    extra = tmp_path / "ds.json"
    extra.write_text(json.dumps({"zero_optimization": {"reduce_bucket_size": 1000}, "steps_per_print": 7}))
    cfg = load_config(None, ["solver.batch_prompts=8", "solver.group_size=4", "solver.loss.minibatch_size=16",
                             "distributed.micro_batch_size=2", "distributed.zero_stage=3", "distributed.offload=all",
                             "model.dtype=bfloat16", "solver.optim.grad_clip=0.5", f"distributed.deepspeed_config={extra}"])
    ds = deepspeed_config(cfg, "solver", world=4)
    # A minibatch of 16 over 4 ranks: 4 sequences each, as 2 micro-batches of 2.
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"], ds["train_batch_size"]) == (2, 2, 16)
    assert ds["gradient_clipping"] == 0.5 and ds["bf16"]["enabled"] is True
    zero = ds["zero_optimization"]
    assert zero["stage"] == 3 and zero["offload_param"]["device"] == "cpu" and zero["offload_optimizer"]["device"] == "cpu"
    assert zero["reduce_bucket_size"] == 1000 and ds["steps_per_print"] == 7


# ----------------------------------------------------------------------------- 2 processes


def selfplay(*args, nproc: int = 0) -> subprocess.CompletedProcess:
    """The CLI in this process on one thread, or under ``torchrun --nproc_per_node nproc`` (one thread a rank)."""
    if not nproc:
        return in_process(*args, "run.threads=1")
    return real_process(*args, env={"OMP_NUM_THREADS": "1"},
                        launcher=("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)))


def weights(run: Path, name: str) -> dict[str, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    out = {}
    for role in ("challenger", "solver"):
        files = glob.glob(str(run / "checkpoints" / name / role / "**" / "*.safetensors"), recursive=True)
        out[role] = {k: v for f in files for k, v in load_file(f).items()}
    return out


def max_weight_diff(a: Path, b: Path, name: str) -> float:
    wa, wb = weights(a, name), weights(b, name)
    assert wa.keys() == wb.keys() and all(wa[r].keys() == wb[r].keys() for r in wa)
    return max(float((wa[r][k] - wb[r][k]).abs().max()) for r in wa for k in wa[r])


def metric_values(run: Path, upto_round: int) -> list[dict]:
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith("time/")} for r in recs
            if r["round"] <= upto_round]


def assert_same_run(a: Path, b: Path, name: str, upto_round: int) -> float:
    """Same pool and tasks, metrics within TOL, weights within TOL; returns the largest weight difference."""
    ckpt_a, ckpt_b = a / "checkpoints" / name, b / "checkpoints" / name
    assert (ckpt_a / "pool.json").read_text() == (ckpt_b / "pool.json").read_text()
    for r in range(1, upto_round + 1):
        assert (a / "tasks" / f"round_{r:04d}.jsonl").read_text() == (b / "tasks" / f"round_{r:04d}.jsonl").read_text()
    ma, mb = metric_values(a, upto_round), metric_values(b, upto_round)
    assert [(r["round"], r["phase"]) for r in ma] == [(r["round"], r["phase"]) for r in mb]
    for x, y in zip(ma, mb):
        assert x.keys() == y.keys(), (x["phase"], set(x) ^ set(y))
        for k in x:
            assert x[k] == pytest.approx(y[k], abs=TOL), (x["phase"], k, x[k], y[k])
    diff = max_weight_diff(a, b, name)
    assert diff < TOL, f"weights differ by {diff}"
    return diff


@pytest.fixture(scope="module")
def cache(warmup_cache):
    return warmup_cache


@pytest.fixture(scope="module")
def straight(tmp_path_factory, cache):
    """The single-process reference: plain torch optimizer, 2 rounds."""
    run = tmp_path_factory.mktemp("straight") / "run"
    selfplay("train", "configs/demo_cpu.yaml", *RUN, f"model.warmup.cache_dir={cache}", "train.rounds=2",
             "--run-dir", run)
    w0, w2 = weights(run, "round_0000"), weights(run, "round_0002")
    for role in w0:  # both roles learned something, so the comparisons below mean something
        assert max(float((w0[role][k] - w2[role][k]).abs().max()) for k in w0[role]) > 1e-6, role
    return run


@pytest.mark.slow
def test_zero2_on_two_ranks_matches_one_process_then_resumes_on_one(tmp_path, straight, cache):
    run = tmp_path / "zero2"
    selfplay("train", "configs/demo_cpu.yaml", *RUN, *DS, "distributed.zero_stage=2", f"model.warmup.cache_dir={cache}",
             "train.rounds=1", "--run-dir", run, nproc=2)
    diff = assert_same_run(run, straight, "round_0001", upto_round=1)
    print(f"zero2 2 ranks vs 1 process, round 1: max |dw| = {diff:.2e}")
    # N=2 -> M=1: the rest of the run in one process, on the plain torch optimizer and on ZeRO-1.
    ds_run = tmp_path / "zero2-then-zero1"
    shutil.copytree(run, ds_run)
    selfplay("train", "--resume", run, "train.rounds=2", "distributed.engine=torch")
    diff = assert_same_run(run, straight, "round_0002", upto_round=2)
    print(f"zero2 2 ranks -> resumed on 1 (torch), round 2: max |dw| = {diff:.2e}")
    selfplay("train", "--resume", ds_run, "train.rounds=2", "distributed.zero_stage=1")
    diff = assert_same_run(ds_run, straight, "round_0002", upto_round=2)
    print(f"zero2 2 ranks -> resumed on 1 (ZeRO-1), round 2: max |dw| = {diff:.2e}")


@pytest.mark.slow
def test_zero3_on_two_ranks_resumes_a_one_process_run(tmp_path, straight):
    # N=1 -> M=2: the reference's round-1 checkpoint, continued on 2 ranks with ZeRO-3.
    run = tmp_path / "zero3"
    shutil.copytree(straight, run)
    shutil.rmtree(run / "checkpoints" / "round_0002")
    selfplay("train", "--resume", run, "train.rounds=2", *DS, "distributed.zero_stage=3", nproc=2)
    diff = assert_same_run(run, straight, "round_0002", upto_round=2)
    print(f"zero3 1 process -> resumed on 2 ranks, round 2: max |dw| = {diff:.2e}")


@pytest.mark.slow
def test_shared_base_lora_trains_only_the_active_adapter(tmp_path, cache):
    out = tmp_path / "lora.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           __file__, str(tmp_path / "run"), str(cache), str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    result = json.loads(out.read_text())
    assert result["base_identical"], "the frozen base changed"
    assert result["inactive_untouched"] == {"challenger": True, "solver": True}
    assert result["active_moved"] == {"challenger": True, "solver": True}
    assert result["ranks_agree"], "the two ranks hold different adapters"


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_skips_a_nonfinite_step_on_two_ranks(tmp_path, stage):
    out = tmp_path / "nonfinite.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           __file__, "nonfinite", str(stage), str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    result = json.loads(out.read_text())
    assert result["poisoned"] == {"nonfinite_steps": 1.0, "changed": False, "nan": False}
    assert result["clean"] == {"nonfinite_steps": 0.0, "changed": True, "nan": False}


def _nonfinite_worker(stage: str, out: str) -> None:
    """A GRPO update whose loss is NaN, then a clean one, through the DeepSpeed engine."""
    import curriculum.engine.grpo as grpo
    from curriculum.engine.distributed import full_parameters, init_dist, wrap_deepspeed
    from curriculum.engine.policy import build_roles
    from curriculum.engine.rollout import generate, pack
    from curriculum.engine.tiny import build_model, build_tokenizer

    cfg = load_config(None, ["run.device=cpu", *DS, f"distributed.zero_stage={stage}", "solver.optim.lr=0.01"])
    dist = init_dist(cfg, torch.device("cpu"))
    tok = build_tokenizer()
    torch.manual_seed(0)
    roles = build_roles(cfg, build_model(tok, 32, 1, 2, 32), torch.device("cpu"))
    wrap_deepspeed(roles, cfg, dist.world)
    solver = roles["solver"].activate()
    comps = generate(solver.model, tok, ["Q:"] * 8, max_new_tokens=6, seed=1)
    rewards = [float(i % 2) for i in range(8)]
    rollout = pack(comps, rewards, [i // 4 for i in range(8)], tok.pad_token_id)

    def weights():
        with full_parameters(solver):
            return {k: v.detach().clone() for k, v in solver.model.state_dict().items()}

    real = grpo.policy_loss
    result = {}
    for name, loss_fn in (("poisoned", lambda *a, **k: (lambda l, s: (l * float("nan"), s))(*real(*a, **k))),
                          ("clean", real)):
        grpo.policy_loss = loss_fn
        before = weights()
        stats = grpo.grpo_update(solver, rollout, cfg.solver.loss, grad_clip=1.0, backend="torch", dist=dist)
        after = weights()
        result[name] = {"nonfinite_steps": stats["nonfinite_steps"],
                        "changed": any(not torch.equal(before[k], after[k]) for k in before),
                        "nan": any(bool(torch.isnan(v).any()) for v in after.values())}
    if dist.is_main:
        Path(out).write_text(json.dumps(result))
    dist.close()


def _lora_worker(run_dir: str, cache: str, out: str) -> None:
    """One round stage by stage on a shared base with two adapters, watching every parameter."""
    from curriculum.trainer import SelfPlayTrainer

    cfg = load_config(ROOT / "configs/demo_cpu.yaml", RUN + DS + [
        f"model.warmup.cache_dir={cache}", f"run.dir={run_dir}", "model.lora.enabled=true", "model.share_base=true",
        "challenger.optim.lr=0.01", "solver.optim.lr=0.01", "solver.steps=4", "train.rounds=1"])
    trainer = SelfPlayTrainer(cfg)
    model = trainer.roles["solver"].model
    assert trainer.roles["challenger"].model is model, "one base, two adapters"

    def snap(role=None):
        keep = (lambda n: "lora_" not in n) if role is None else (lambda n: "lora_" in n and f".{role}." in n)
        return {n: p.detach().clone() for n, p in model.named_parameters() if keep(n)}

    base = snap()
    inactive_ok = {"challenger": True, "solver": True}
    moved = {"challenger": False, "solver": False}
    for phase, step in trainer.stages():
        before = {r: snap(r) for r in moved}
        trainer.run_stage(1, phase, step)
        active = "solver" if phase == "solver" else "challenger"
        inactive = "challenger" if active == "solver" else "solver"
        after = {r: snap(r) for r in moved}
        inactive_ok[inactive] &= all(torch.equal(before[inactive][n], after[inactive][n]) for n in after[inactive])
        moved[active] |= any(not torch.equal(before[active][n], after[active][n]) for n in after[active])
    now = snap()
    prints = trainer.dist.all_gather_object(
        [float(p.double().sum()) for r in moved for p in snap(r).values()])
    result = {"base_identical": all(torch.equal(base[n], now[n]) for n in base), "inactive_untouched": inactive_ok,
              "active_moved": moved, "ranks_agree": prints[0] == prints[1]}
    if trainer.dist.is_main:
        Path(out).write_text(json.dumps(result))
    trainer.monitor.close()
    trainer.close()


if __name__ == "__main__":
    if sys.argv[1] == "nonfinite":
        _nonfinite_worker(*sys.argv[2:4])
    else:
        _lora_worker(*sys.argv[1:4])


def test_a_stale_extension_build_lock_is_removed_and_a_fresh_one_named(tmp_path, caplog):
    import logging
    import time

    from curriculum.engine.distributed import clear_stale_build_locks

    stale = tmp_path / "py311_cpu" / "deepspeed_shm_comm" / "lock"
    fresh = tmp_path / "other_ext" / "lock"
    for lock in (stale, fresh):
        lock.parent.mkdir(parents=True)
        lock.touch()
    old = time.time() - 3600
    os.utime(stale, (old, old))
    with caplog.at_level(logging.WARNING):
        assert clear_stale_build_locks(tmp_path) == [stale]
    assert not stale.exists() and fresh.exists()  # a lock another rank may hold right now is left alone
    assert f"removed {stale}" in caplog.text and f"{fresh} exists" in caplog.text


def test_a_lock_with_a_build_running_in_its_directory_is_kept(tmp_path):
    import time

    from curriculum.engine.distributed import clear_stale_build_locks

    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir()
    lock.touch()
    os.utime(lock, (time.time() - 3600,) * 2)
    build = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], cwd=lock.parent)
    try:
        time.sleep(0.2)
        assert clear_stale_build_locks(tmp_path) == [] and lock.exists()
    finally:
        build.kill()
        build.wait()
    assert clear_stale_build_locks(tmp_path) == [lock] and not lock.exists()
