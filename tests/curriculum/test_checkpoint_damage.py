"""Damage the manifest cannot see (files corrupted before it was computed): each is found at load,
before anything live changes, and the resume falls back to the checkpoint before, naming the file."""
import json
import logging
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from curriculum import runstate
from curriculum.checkpoint import MANIFEST, _sha256
from curriculum.config import load_config
from curriculum.errors import ConfigError
from curriculum.trainer import SelfPlayTrainer
from tests.conftest import TINY_OVERRIDES

NAMES = ["pool.json", "round_tasks.json"]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    """One demo trainer with two checkpoints (round_0000, then round_0001 after one step changed it)."""
    tmp = tmp_path_factory.mktemp("damage")
    t = SelfPlayTrainer(load_config("configs/demo_cpu.yaml", [*TINY_OVERRIDES, f"run.dir={tmp / 'run'}",
                                                               f"model.warmup.cache_dir={tmp / 'cache'}"]))
    t.save_checkpoint(0)
    with torch.no_grad():
        for p in t.roles["solver"].params:
            p.add_(0.01)
    t.save_checkpoint(1)
    yield t
    t.close()


def reseal(path):
    """Rewrite the manifest to match the files: damage done before the manifest was computed."""
    files = {str(p.relative_to(path)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(path.rglob("*")) if p.is_file() and p.name != MANIFEST}
    (path / MANIFEST).write_text(json.dumps({"name": path.name, "files": files}))


def weights(path):
    return path / "solver" / "model.safetensors"


def truncate(path):
    weights(path).write_bytes(weights(path).read_bytes()[:300])
    return weights(path)


def wrong_shape(path):
    state = load_file(weights(path))
    k = next(k for k, v in state.items() if v.dim() == 2)
    state[k] = torch.zeros(state[k].shape[0] + 1, state[k].shape[1])
    save_file(state, weights(path), metadata={"format": "pt"})
    return weights(path)


def nan(path):
    state = load_file(weights(path))
    k = next(iter(state))
    state[k] = state[k].clone().fill_(float("nan"))
    save_file(state, weights(path), metadata={"format": "pt"})
    return weights(path)


def write(rel, data):
    def damage(path):
        f = path / rel
        f.write_bytes(data) if isinstance(data, bytes) else torch.save(data, f)
        return f
    return damage


def rng_wrong_size(path):
    rng = torch.load(path / "rng.pt", weights_only=False)
    rng["torch"] = rng["torch"][:100]
    torch.save(rng, path / "rng.pt")
    return path / "rng.pt"


def state_without_stage(path):
    state = json.loads((path / "state.json").read_text())
    del state["stage"]
    (path / "state.json").write_text(json.dumps(state))
    return path / "state.json"


DAMAGES = {
    "truncated weights": truncate,
    "weights of the wrong shape": wrong_shape,
    "non-finite weights": nan,
    "optimizer garbage": write("solver_optim.pt", b"\x80garbage" * 10),
    "optimizer {}": write("challenger_optim.pt", {}),
    "rng garbage": write("rng.pt", b"not a pickle"),
    "rng {}": write("rng.pt", {}),
    "rng wrong size": rng_wrong_size,
    "state.json not JSON": write("state.json", b"{not json"),
    "state.json without stage": state_without_stage,
    "round_tasks.json not UTF-8": write("round_tasks.json", b"\xff\xfe\x00garbage"),
    "pool.json not JSON": write("pool.json", b"[1, 2"),
}


@pytest.fixture
def damaged(trainer, request):
    """round_0001 damaged by ``request.param`` and resealed; restored afterwards."""
    newest = trainer.ckpt.dir / "round_0001"
    backup = newest.with_name("backup")
    shutil.copytree(newest, backup)
    f = DAMAGES[request.param](newest)
    reseal(newest)
    assert trainer.ckpt.verify(newest) is None  # the manifest cannot see it
    yield newest, f
    shutil.rmtree(newest)
    backup.rename(newest)


@pytest.mark.parametrize("damaged", list(DAMAGES), indirect=True)
def test_damage_is_found_before_anything_changes_and_the_resume_falls_back(trainer, damaged, caplog):
    newest, f = damaged
    with pytest.raises(runstate.DamagedCheckpoint) as exc:
        runstate.read(newest, trainer.roles, NAMES)
    assert str(f) in str(exc.value) and "\n" not in str(exc.value)
    expected = runstate.read(trainer.ckpt.dir / "round_0000", trainer.roles, NAMES)["weights"]["solver"]
    with caplog.at_level(logging.WARNING):
        trainer._restore()
    assert f"skipping checkpoint {newest}" in caplog.text and str(f) in caplog.text
    assert trainer.last_checkpoint == trainer.ckpt.dir / "round_0000"
    live = {k: v for k, v in trainer.roles["solver"].model.state_dict().items() if k in expected}
    assert all(torch.equal(live[k], v) for k, v in expected.items())  # exactly the older checkpoint


def test_every_checkpoint_damaged_is_one_error_naming_the_file(trainer):
    name = "round_0000"
    path = trainer.ckpt.dir / name
    backup = path.with_name("backup0")
    shutil.copytree(path, backup)
    newest = trainer.ckpt.dir / "round_0001"
    backup1 = newest.with_name("backup1")
    shutil.copytree(newest, backup1)
    try:
        for p in (path, newest):
            truncate(p)
            reseal(p)
        with pytest.raises(runstate.DamagedCheckpoint, match="round_0001/solver/model.safetensors"):
            trainer._restore()
    finally:
        for p, b in ((path, backup), (newest, backup1)):
            shutil.rmtree(p)
            b.rename(p)


@pytest.mark.parametrize("damaged", ["truncated weights", "non-finite weights", "state.json not JSON"], indirect=True)
def test_eval_falls_back_like_a_resume(trainer, damaged, caplog):
    from curriculum.evaluate import evaluate_run

    newest, f = damaged
    with caplog.at_level(logging.WARNING):
        results = evaluate_run(trainer.rundir.path)
    assert results["checkpoint"] == str(trainer.ckpt.dir / "round_0000") and results["round"] == 0
    assert f"skipping checkpoint {newest}" in caplog.text and str(f) in caplog.text


@pytest.mark.parametrize("damaged", ["truncated weights", "non-finite weights", "weights of the wrong shape"],
                         indirect=True)
def test_export_falls_back_or_names_the_file(trainer, damaged, tmp_path, caplog):
    from curriculum.export import export_role

    newest, f = damaged
    with caplog.at_level(logging.WARNING):
        said = export_role(trainer.rundir.path, "solver", tmp_path / "out")
    assert "round_0000" in said and f"skipping checkpoint {newest}: {newest / 'solver'}" in caplog.text
    with pytest.raises(runstate.DamagedCheckpoint, match=str(newest / "solver")):  # asked for by name: refused
        export_role(trainer.rundir.path, "solver", tmp_path / "out2", checkpoint="round_0001")


def test_refusals_come_before_any_model_is_built(tiny_overrides, monkeypatch):
    t = SelfPlayTrainer(load_config("configs/demo_cpu.yaml", tiny_overrides))
    t.save_checkpoint(0)
    t.close()

    def build(self):
        raise AssertionError("a model was built before the refusal")

    monkeypatch.setattr(SelfPlayTrainer, "_build_roles", build)
    edited = load_config("configs/demo_cpu.yaml", [*tiny_overrides, "model.tiny.hidden_size=64"])
    with pytest.raises(ConfigError, match="model.tiny.hidden_size"):
        SelfPlayTrainer(edited, resume=True)
    fresh = load_config("configs/demo_cpu.yaml", [*tiny_overrides[:-2], f"run.dir={t.rundir.path.parent / 'new'}",
                                                  tiny_overrides[-1]])
    (t.rundir.path.parent / "new").mkdir()
    (t.rundir.path.parent / "new" / "checkpoints").write_text("not a directory")
    with pytest.raises(ConfigError, match="cannot write checkpoints to .*new/checkpoints"):
        SelfPlayTrainer(fresh)
