"""The CLI end to end: a couple of tiny rounds, then resume, eval and status; and the commands that
train nothing (status, validate, config-keys, --help, --version) on their own. ``selfplay`` runs
``curriculum.cli.main`` in this process; a real process (``real_process``) where the process is the
point: import-time noise on a CPU run, a plugin found by a fresh interpreter, OMP_WAIT_POLICY before
torch loads."""
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from curriculum.checkpoint import CheckpointManager
from curriculum.config import load_config, to_yaml, valid_keys
from curriculum.rundir import RunDir, RunLock
from tests.cli_runner import in_process as selfplay
from tests.cli_runner import real_process
from tests.conftest import TINY_OVERRIDES

ROOT = Path(__file__).resolve().parents[1]


def assert_quiet(proc):
    """No library noise: no deprecation warnings, and deepspeed (which announces its accelerator
    when imported) stays unimported in a distributed.engine=torch run. In this process (``selfplay``)
    that is the warnings a fresh interpreter would show; import-time noise needs ``real_process``."""
    out = proc.stdout + proc.stderr
    for noise in ("Warning:", "is deprecated", "Setting accelerator to CPU"):
        assert noise not in out, f"{noise!r} in the output of a CPU run:\n{out[-3000:]}"


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def strip_times(records):
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith("time/")} for r in records]


@pytest.mark.slow
def test_train_resume_eval_status(tmp_path, warmup_cache_override):
    run = tmp_path / "run"
    common = TINY_OVERRIDES + [warmup_cache_override, "wandb.mode=offline"]
    first = selfplay("train", "configs/demo_cpu.yaml", *common, "train.rounds=2", "--run-dir", run)
    assert_quiet(first)

    assert (run / "config.yaml").is_file()
    recs = metrics(run)
    assert all("round" in r and "phase" in r for r in recs)
    phases = {(r["round"], r["phase"]) for r in recs}
    for r in (1, 2):
        assert {(r, "update_challenger"), (r, "fill_pool"), (r, "update_solver"), (r, "eval")} <= phases
    assert (0, "eval") in phases
    last_eval = [r for r in recs if r["phase"] == "eval"][-1]
    assert last_eval["round"] == 2 and any(k.startswith("eval/accuracy/tier_") for k in last_eval)
    tasks = [json.loads(line) for line in (run / "tasks" / "round_0001.jsonl").read_text().splitlines()]
    assert tasks and {"text", "task", "rejected", "solve_rate", "accepted"} <= set(tasks[0])
    assert (run / "checkpoints" / "round_0002" / "manifest.json").is_file()
    assert list((run / "wandb").glob("offline-run-*")), "wandb offline run missing"

    # A second `train` into the same directory is refused, not silently overwritten.
    again = selfplay("train", "configs/demo_cpu.yaml", *common, "--run-dir", run, check=False)
    assert again.returncode == 2 and "--resume" in again.stderr

    # Changing the group size on resume would break the run.
    bad = selfplay("train", "--resume", run, "solver.group_size=8", check=False)
    assert bad.returncode == 2 and "solver.group_size" in bad.stderr

    selfplay("train", "--resume", run, "train.rounds=3")
    recs = metrics(run)
    assert max(r["round"] for r in recs) == 3
    assert len([r for r in recs if r["phase"] == "eval"]) == 4  # rounds 0..3, none twice
    assert len(list((run / "wandb").glob("offline-run-*"))) >= 1
    state = json.loads((run / "checkpoints" / "round_0003" / "state.json").read_text())
    first = json.loads((run / "checkpoints" / "round_0002" / "state.json").read_text())
    assert state["wandb_id"] == first["wandb_id"]

    out = selfplay("eval", run)
    assert_quiet(out)
    result = json.loads(out.stdout[out.stdout.index("{"):])
    assert result["round"] == 3 and 0.0 <= result["eval/accuracy"] <= 1.0
    logged = [r for r in metrics(run) if r["phase"] == "eval" and r["round"] == 3][0]
    assert result["eval/accuracy"] == logged["eval/accuracy"]  # same checkpoint, same score

    status = selfplay("status", run, "--json")
    info = json.loads(status.stdout.strip().splitlines()[-1])
    assert info["round"] == 3 and info["finished"] is True
    assert info["rounds"] == 3  # config.yaml follows train.rounds=3 given on resume

    # The trainer refreshed the local dashboard after the last round; the CLI writes it anywhere.
    page = (run / "dashboard.html").read_text()
    assert "round 3 of 3, finished" in page and page.count("<svg") >= 4
    out = selfplay("dashboard", run, "--out", tmp_path / "copy.html")
    assert Path(out.stdout.strip()) == tmp_path / "copy.html" and (tmp_path / "copy.html").is_file()
    missing = selfplay("dashboard", tmp_path / "nope", check=False)
    assert missing.returncode == 2 and "run directory" in missing.stderr


@pytest.mark.slow
def test_resume_matches_uninterrupted_run(tmp_path, warmup_cache_override):
    common = TINY_OVERRIDES + [warmup_cache_override]
    straight, split = tmp_path / "straight", tmp_path / "split"
    selfplay("train", "configs/demo_cpu.yaml", *common, "train.rounds=3", "--run-dir", straight)
    selfplay("train", "configs/demo_cpu.yaml", *common, "train.rounds=1", "--run-dir", split)
    selfplay("train", "--resume", split, "train.rounds=3")
    assert strip_times(metrics(straight)) == strip_times(metrics(split))
    for role in ("challenger", "solver"):
        a = (straight / "checkpoints" / "round_0003" / role / "model.safetensors").read_bytes()
        b = (split / "checkpoints" / "round_0003" / role / "model.safetensors").read_bytes()
        assert a == b, f"{role} weights differ after resume"


def test_config_error_exit_code(tmp_path):
    proc = selfplay("train", "configs/demo_cpu.yaml", "train.round=2", "--run-dir", tmp_path / "r", check=False)
    assert proc.returncode == 2
    assert "train.rounds" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_sandboxed_environment_runs_in_the_loop(tmp_path, warmup_cache_override):
    run = tmp_path / "code"
    selfplay("train", "configs/code_output_cpu.yaml", *TINY_OVERRIDES, warmup_cache_override,
             "env.kwargs={num_levels: 3, max_chars: 60}", "model.tiny.max_positions=128",
             "challenger.sampling.max_new_tokens=64", "train.rounds=1", "--run-dir", run)
    recs = metrics(run)
    assert {(1, "update_challenger"), (1, "fill_pool"), (1, "eval")} <= {(r["round"], r["phase"]) for r in recs}
    tasks = [json.loads(line) for line in (run / "tasks" / "round_0001.jsonl").read_text().splitlines()]
    # Every proposal was either grounded by execution or rejected with a reason.
    assert tasks and all((t["task"] is None) != (t["rejected"] is None) for t in tasks)


@pytest.mark.slow
def test_the_solver_calls_its_tools_in_the_loop(tmp_path, warmup_cache_override):
    """configs/tools_cpu.yaml for a round, shrunk: the warmed-up solver calls Python, the sandbox answers,
    and the answers are scored with and without the tools; then `selfplay eval` scores the same."""
    run = tmp_path / "tools"
    proc = selfplay("train", "configs/tools_cpu.yaml", warmup_cache_override,
                    "model.warmup.steps=150", "model.warmup.batch_size=32", "solver.batch_prompts=4",
                    "solver.group_size=4", "solver.steps=1", "eval.per_level=4", "train.rounds=1", "--run-dir", run)
    assert_quiet(proc)
    recs = metrics(run)
    (step,) = [r for r in recs if r["phase"] == "update_solver"]
    assert step["solver/tool_calls_mean"] > 0 and step["solver/turns_mean"] > 1
    assert 0 <= step["solver/tool_error_rate"] <= 1 and "solver/solve_rate_with_tool" in step
    (last,) = [r for r in recs if r["phase"] == "round"]
    assert last["time/sandbox_s"] > 0
    evals = [r for r in recs if r["phase"] == "eval"]
    assert len(evals) == 2 and all("eval/no_tools/accuracy/tier_2" in r and "eval/accuracy/tier_2" in r for r in evals)
    out = selfplay("eval", run)
    result = json.loads(out.stdout[out.stdout.index("{"):])
    assert result["eval/accuracy"] == evals[-1]["eval/accuracy"]
    assert result["eval/no_tools/accuracy"] == evals[-1]["eval/no_tools/accuracy"]


@pytest.mark.slow
def test_the_challenger_proposes_through_the_turn_loop(tmp_path, warmup_cache_override):
    """challenger.tools for a tiny round: the challenger's prompts announce the tools, its proposals go
    through the multi-turn sampler and its tool use is logged."""
    run = tmp_path / "run"
    proc = selfplay("train", "configs/demo_cpu.yaml", *TINY_OVERRIDES, warmup_cache_override,
                    "challenger.tools=[python]", "challenger.tool_prompt='py: '", "challenger.sampling.max_new_tokens=32",
                    "train.rounds=1", "--run-dir", run)
    assert_quiet(proc)
    recs = metrics(run)
    (step,) = [r for r in recs if r["phase"] == "update_challenger"]
    assert 0 <= step["challenger/tool_calls_mean"] < 2 and 1 <= step["challenger/turns_mean"] <= 3
    assert 0 <= step["challenger/tool_error_rate"] <= 1
    assert "solver/tool_calls_mean" not in {k for r in recs for k in r}  # the solver has no tools
    (last,) = [r for r in recs if r["phase"] == "round"]
    assert last["time/sandbox_s"] >= 0
    tasks = [json.loads(line) for line in (run / "tasks" / "round_0001.jsonl").read_text().splitlines()]
    assert tasks and all(t["prompt"].endswith("py: Q:") for t in tasks)  # the tool prompt, then the environment's
    assert all(t["trajectory"].endswith(t["text"]) for t in tasks)  # the proposal is the last turn


@pytest.fixture
def registries():
    """What a run.plugins file registers in this process is gone after the test (and its module with it)."""
    from challenger.rewards import FRONTIER_REWARDS
    from curriculum.envs.registry import ENVIRONMENTS

    saved = [(table, dict(table)) for table in (ENVIRONMENTS, FRONTIER_REWARDS)]
    modules = set(sys.modules)
    yield
    for table, before in saved:
        table.clear()
        table.update(before)
    for name in set(sys.modules) - modules:
        if name.startswith("selfplay_plugin_"):
            del sys.modules[name]


@pytest.mark.slow
def test_plugins_from_the_readme_train_and_resume(tmp_path, warmup_cache_override, registries):
    """The README's environment and reward, as a run.plugins file: train, then resume in a fresh process."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Plugging in your own", 1)[1]
    blocks = [b.split("\n", 1)[1] for b in section.split("```")[1::2] if b.startswith("python")]
    plugin = tmp_path / "my_envs.py"
    plugin.write_text("\n\n".join(blocks[:2]))  # the environment, then the reward
    run = tmp_path / "run"
    common = TINY_OVERRIDES + [warmup_cache_override, f"run.plugins=[{plugin}]",
                               "env.name=reverse", "reward.frontier=gaussian"]
    selfplay("train", "configs/demo_cpu.yaml", *common, "train.rounds=1", "--run-dir", run)
    tasks = [json.loads(line) for line in (run / "tasks" / "round_0001.jsonl").read_text().splitlines()]
    assert any(t["rejected"] == "not a word of 3-5 letters" for t in tasks)  # the plugin's parser ran
    assert {t["task"]["level"] for t in tasks if t["task"]} <= {1, 2, 3}
    real_process("train", "--resume", run, "train.rounds=2")  # a new interpreter finds the plugin via config.yaml
    assert max(r["round"] for r in metrics(run)) == 2
    missing = selfplay("train", "configs/demo_cpu.yaml", "run.plugins=[nowhere.py]", check=False)
    assert missing.returncode == 2 and f"run.plugins: cannot import '{ROOT / 'nowhere.py'}'" in missing.stderr
    bad_kwargs = selfplay("train", "configs/demo_cpu.yaml", *common, "env.kwargs={colour: red}",
                          "--run-dir", tmp_path / "bad", check=False)
    assert bad_kwargs.returncode == 2 and "env.kwargs do not fit environment 'reverse'" in bad_kwargs.stderr


@pytest.mark.slow
def test_a_lora_run_from_a_model_directory_is_quiet(tmp_path, warmup_cache_override):
    """from_pretrained (model.path, eval) and peft (LoRA) print no deprecation warnings; the LoRA run and its
    eval in real processes, so that what importing transformers, peft and deepspeed prints counts too."""
    common = TINY_OVERRIDES + [warmup_cache_override, "train.rounds=1"]
    assert_quiet(selfplay("train", "configs/demo_cpu.yaml", *common, "--run-dir", tmp_path / "base"))
    model = tmp_path / "base" / "checkpoints" / "round_0001" / "solver"
    lora = tmp_path / "lora"
    assert_quiet(real_process("train", "configs/demo_cpu.yaml", *common, f"model.path={model}",
                              "model.lora.enabled=true", "--run-dir", lora))
    assert_quiet(real_process("eval", lora))


# ----------------------------------------------------------------------------- fast: no training


def make_run(path: Path, rounds: int, reached: int | None = None, finished: bool = False) -> Path:
    """A run directory as status reads it: config.yaml (train.rounds only), a checkpoint after round ``reached``."""
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(f"train:\n  rounds: {rounds}\n")
    if reached is not None:
        CheckpointManager(path / "checkpoints").save(f"round_{reached:04d}", lambda tmp: None,
                                                     {"round": reached, "finished": finished})
    return path


def test_version():
    from importlib.metadata import version

    out = selfplay("--version")
    assert out.stdout == f"selfplay {version('selfplay-curriculum')}\n"


def test_version_without_an_install_comes_from_pyproject(monkeypatch):
    from importlib import metadata

    from curriculum import cli

    installed = metadata.version("selfplay-curriculum")  # this checkout, installed editable

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert cli._version() == installed


def test_status_table_json_and_errors(tmp_path):
    done = make_run(tmp_path / "runs" / "done", rounds=3, reached=3, finished=True)
    live = make_run(tmp_path / "runs" / "live", rounds=6, reached=1)
    make_run(tmp_path / "runs" / "fresh", rounds=2)
    # the last health record is what counts: plateau has cleared, stalled is on
    (done / "metrics.jsonl").write_text("".join(json.dumps({"round": r, "phase": "health", **m}) + "\n" for r, m in [
        (2, {"health/plateau": 1, "health/stalled": 0, "health/active": 1}),
        (3, {"health/plateau": 0, "health/stalled": 1, "health/stalled/frontier_level": 3, "health/active": 1})]))
    with RunLock(RunDir(live)):  # as a trainer holds it
        table = selfplay("status", "--root", tmp_path / "runs").stdout.splitlines()
        lines = selfplay("status", "--root", tmp_path / "runs", "--json").stdout.splitlines()
    assert table[0].split() == ["RUN", "STATE", "ROUND", "CHECKPOINT", "ALARMS", "INFO"]
    rows = {Path(line.split()[0]).name: line.split()[1:] for line in table[1:]}
    assert rows == {"done": ["finished", "3/3", "round_0003", "stalled"],
                    "fresh": ["new", "0/2", "-", "-"],
                    "live": ["running", "1/6", "round_0001", "-", f"{os.getpid()}@{socket.gethostname()}"]}
    statuses = {Path(s["run"]).name: s for s in map(json.loads, lines)}
    assert statuses["done"]["checkpoint"] == str(done / "checkpoints" / "round_0003")
    assert statuses["done"]["alarms"] == ["stalled"] and statuses["live"]["alarms"] == []
    assert statuses["live"]["state"] == "running" and statuses["live"]["pid"] == os.getpid()

    one = selfplay("status", done, "--json").stdout.splitlines()
    assert len(one) == 1 and json.loads(one[0])["state"] == "finished"

    nope = selfplay("status", tmp_path / "nope", check=False)
    assert nope.returncode == 2 and nope.stdout == ""
    assert nope.stderr.splitlines() == [f"selfplay: {tmp_path / 'nope'} has no config.yaml; is it a run directory?"]

    empty = selfplay("status", "--root", tmp_path / "elsewhere")
    assert empty.stdout == f"no runs under {tmp_path / 'elsewhere'} (a run directory holds config.yaml)\n"
    assert selfplay("status", "--root", tmp_path / "elsewhere", "--json").stdout == ""


def test_config_keys_show_type_default_and_meaning():
    plain = selfplay("config-keys", "--plain").stdout.splitlines()
    keys = {row.split("\t")[0]: row.split("\t")[1:] for row in plain}
    assert list(keys) == list(valid_keys())
    assert keys["train.rounds"] == ["int", "6", "Number of rounds."]
    assert keys["run.dir"][:2] == ["str", "runs/demo"]
    assert keys["model.path"][:2] == ["str", '""']
    assert keys["model.lora.enabled"][:2] == ["bool", "false"]
    assert keys["model.lora.target_modules"][:2] == ["list[str]", '["q_proj", "k_proj", "v_proj", "o_proj"]']
    assert keys["env.kwargs"][:2] == ["dict[str, Any]", "{}"]

    table = selfplay("config-keys").stdout.splitlines()
    assert table[0].split() == ["KEY", "TYPE", "DEFAULT", "MEANING"]
    assert next(line for line in table if line.startswith("train.rounds ")).split() == \
        ["train.rounds", "int", "6", "Number", "of", "rounds."]


def test_validate_checks_without_building(tmp_path):
    run = tmp_path / "run"
    ok = selfplay("validate", "configs/demo_cpu.yaml", "train.rounds=3", "model.lora.enabled=true", "--run-dir", run)
    summary = ok.stdout.splitlines()
    assert summary[0] == "config OK"
    assert {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in summary[1:]} == {
        "run dir": str(run), "env": "arithmetic(num_levels=6, max_digits=1)", "mode": "selfplay", "rounds": "3",
        "model": "embedded tiny (2 layers, hidden 128, 4 heads), float32, LoRA r=8", "engine": "torch on cpu"}
    assert not run.exists()  # nothing built, nothing written

    # `train --dry-run` is the same check; overrides may follow the option.
    dry = selfplay("train", "configs/demo_cpu.yaml", "--run-dir", run, "--dry-run", "train.rounds=3",
                   "model.lora.enabled=true")
    assert dry.stdout == ok.stdout and not run.exists()

    for bad, message in ((["train.round=2"], "did you mean train.rounds?"),
                         (["curriculum.band_low=0.9", "curriculum.band_high=0.1"], "curriculum.band_low (0.9)"),
                         (["run.plugins=[nowhere.py]"], "run.plugins: cannot import")):
        proc = selfplay("validate", "configs/demo_cpu.yaml", *bad, check=False)
        assert proc.returncode == 2 and proc.stdout == ""
        assert len(proc.stderr.splitlines()) == 1 and message in proc.stderr, proc.stderr


def test_resume_dry_run_writes_nothing(tmp_path):
    run = make_run(tmp_path / "run", rounds=2, reached=2, finished=True)
    before = to_yaml(load_config(ROOT / "configs" / "demo_cpu.yaml", ["train.rounds=2", f"run.dir={run}"]))
    (run / "config.yaml").write_text(before)
    dry = selfplay("train", "--resume", run, "train.rounds=4", "--dry-run")
    assert "rounds:   4" in dry.stdout and "(resume; changing train.rounds)" in dry.stdout
    assert (run / "config.yaml").read_text() == before
    refused = selfplay("train", "--resume", run, "solver.group_size=4", "--dry-run", check=False)
    assert refused.returncode == 2 and "solver.group_size" in refused.stderr


def test_help_is_plain_text_and_lists_every_command(capsys):
    from curriculum.cli import build_parser

    out = selfplay("--help").stdout
    assert "``" not in out and "examples:" in out
    for command in ("train", "validate", "eval", "status", "dashboard", "config-keys"):
        assert re.search(rf"^    {command}\s", out, flags=re.M), f"{command} missing from --help"
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        assert "``" not in capsys.readouterr().out


def test_omp_wait_policy_defaults_to_passive_before_torch_loads():
    code = "import os, sys, curriculum.cli; print(os.environ['OMP_WAIT_POLICY'], 'torch' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(ROOT)

    def run(env):
        return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env=env)

    assert run(env).stdout.split() == ["PASSIVE", "False"]  # set, and torch not yet loaded
    assert run({**env, "OMP_WAIT_POLICY": "ACTIVE"}).stdout.split() == ["ACTIVE", "False"]  # the user's wins
