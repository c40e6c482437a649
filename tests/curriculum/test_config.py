from pathlib import Path

import pytest

from curriculum.config import RANGES, ConfigError, diff_keys, is_resumable, key_specs, load_config, valid_keys

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_configs_validate(path, tmp_path, monkeypatch):
    # The GPU configs ask for run.device=cuda, which validation checks against this machine.
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    # model.path configs point at a user's local model; give them a model directory (with a tokenizer).
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer_config.json").write_text("{}")
    cfg = load_config(path, [f"model.path={tmp_path}"] if "model:\n  path:" in path.read_text() else [])
    assert cfg.train.rounds >= 1


def test_shipped_configs_exist():
    assert any(p.name == "demo_cpu.yaml" for p in SHIPPED)


def test_overrides_apply_with_types():
    cfg = load_config(ROOT / "configs/demo_cpu.yaml", ["train.rounds=3", "solver.optim.lr=0.01", "env.kwargs={num_levels: 4}",
                                                        "run.dir=/tmp/x", "model.lora.enabled=true"])
    assert (cfg.train.rounds, cfg.solver.optim.lr, cfg.env.kwargs["num_levels"], cfg.run.dir) == (3, 0.01, 4, "/tmp/x")
    assert cfg.model.lora.enabled is True


def test_env_kwargs_given_whole_replace_the_files_and_dotted_ones_merge():
    demo = ROOT / "configs/demo_cpu.yaml"
    assert load_config(demo, ["env.kwargs={num_levels: 4}"]).env.kwargs == {"num_levels": 4}
    assert load_config(demo, ["env.kwargs.num_levels=4"]).env.kwargs == {"num_levels": 4, "max_digits": 1}
    assert load_config(demo, ["env.kwargs={}"]).env.kwargs == {}


def test_plugin_files_are_imported_once_and_kept_absolute(tmp_path, monkeypatch):
    plugin = tmp_path / "reward_plugin.py"
    plugin.write_text("from challenger.rewards import register_frontier_reward\n"
                      "COUNT = globals().get('COUNT', 0) + 1\n"
                      "@register_frontier_reward('always_one_cfg_test')\n"
                      "def always_one(p):\n    return p * 0 + 1\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, ["run.plugins=[reward_plugin.py]", "reward.frontier=always_one_cfg_test"])
    assert cfg.run.plugins == [str(plugin)]  # absolute: a resume from elsewhere finds it
    again = load_config(None, [f"run.plugins=[{plugin}]", "reward.frontier=always_one_cfg_test"])
    assert again.run.plugins == cfg.run.plugins
    with pytest.raises(ConfigError, match=r"run.plugins: cannot import '/.*/broken.py': ZeroDivisionError"):
        (tmp_path / "broken.py").write_text("1 / 0\n")
        load_config(None, ["run.plugins=[broken.py]"])
    with pytest.raises(ConfigError, match="reward.frontier 'nowhere'"):
        load_config(None, ["reward.frontier=nowhere"])


def test_unknown_override_names_nearest():
    with pytest.raises(ConfigError, match=r"unknown config key 'train.round'.*train.rounds"):
        load_config(None, ["train.round=3"])


def test_unknown_key_in_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("solver:\n  optim:\n    lrr: 0.1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: unknown config key 'solver.optim.lrr'.*solver.optim.lr"):
        load_config(p)


@pytest.mark.parametrize(
    "text,match",
    [
        ("train: [1, 2\n", "not valid YAML"),
        ("- 1\n- 2\n", "top level must be a mapping"),
        ("train:\n  rounds: many\n", "train.rounds"),
        ("train:\n  rounds: 0\n", r"train.rounds \(0\) must be in \[1, 9999\]"),
        ("curriculum:\n  band_low: 0.9\n  band_high: 0.1\n", r"band_low \(0.9\) <= curriculum.band_high \(0.1\)"),
        ("solver:\n  group_size: 1\n", r"solver.group_size \(1\) must be in \[2, 4096\]"),
        ("solver:\n  loss:\n    minibatch_size: 5\n", r"minibatch_size \(5\) must divide batch_prompts\*group_size \(128\)"),
        ("reward:\n  frontier: curiosity\n", "reward.frontier 'curiosity'"),
        ("env:\n  name: chess\n", "env.name 'chess' is not registered"),
        ("model:\n  path: /nonexistent/model\n", "not a local directory"),
        ("solver:\n  loss:\n    estimator: ppo\n", "solver.loss.estimator 'ppo'"),
        ("train: 3\n", "train"),
    ],
)
def test_bad_files_fail_clearly(tmp_path, text, match):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_config(p)


def test_missing_file_and_bad_override():
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/no/such.yaml")
    with pytest.raises(ConfigError, match="not key=value"):
        load_config(None, ["train.rounds"])
    with pytest.raises(ConfigError, match="is a section"):
        load_config(None, ["solver=1"])


def test_every_key_documented():
    undocumented = [k for k, doc in valid_keys().items() if not doc]
    assert undocumented == []


def test_resumable_keys():
    a = load_config(None)
    b = load_config(None, ["train.rounds=9", "log.progress=false", "solver.group_size=4"])
    changed = diff_keys(a, b)
    assert set(changed) == {"train.rounds", "log.progress", "solver.group_size"}
    assert [k for k in changed if not is_resumable(k)] == ["solver.group_size"]


def test_every_number_has_a_range():
    """A new numeric key must say which values it takes (NaN and inf are refused for every float)."""
    numeric = {k for k, spec in key_specs().items() if spec.type in ("int", "float")}
    assert numeric == set(RANGES)
    for key, spec in key_specs().items():
        if key in RANGES:
            assert spec.default in RANGES[key], f"{key}'s default {spec.default} is outside {RANGES[key]}"


def test_dual_clip_is_on_and_delta_off_by_default():
    cfg = load_config(None)
    assert (cfg.solver.loss.clip_ratio_c, cfg.solver.loss.delta) == (3.0, 0.0)
    assert load_config(None, ["solver.loss.clip_ratio_c=0", "solver.loss.delta=1.5"]).solver.loss.delta == 1.5


def test_yaml_keeps_safe_load_semantics_within_its_limits(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("sampling: &s {temperature: 0.7, max_new_tokens: 12}\n"
                 "challenger:\n  sampling: *s\nsolver:\n  sampling: *s\ntrain: {rounds: 2}\n")
    with pytest.raises(ConfigError, match="unknown config key 'sampling.temperature'"):
        load_config(p)  # aliases work as in yaml.safe_load; the anchor's own key is still a key
    p.write_text("challenger:\n  sampling: &s {temperature: 0.7, max_new_tokens: 12}\nsolver:\n  sampling: *s\n")
    cfg = load_config(p)
    assert cfg.solver.sampling.temperature == cfg.challenger.sampling.temperature == 0.7
    p.write_bytes("# ümlaut, in UTF-8\ntrain: {rounds: 2}\n".encode())
    assert load_config(p).train.rounds == 2


def test_an_unreadable_config_file_is_a_config_error(tmp_path, monkeypatch):
    p = tmp_path / "c.yaml"
    p.write_text("train: {rounds: 2}\n")

    def denied(*_a, **_k):
        raise PermissionError(13, "Permission denied", str(p))

    monkeypatch.setattr("builtins.open", denied)
    with pytest.raises(ConfigError, match=f"cannot read config file '{p}': Permission denied"):
        load_config(p)


def test_the_default_tool_prompt_is_the_solvers():
    """The schema imports nothing of the project, so it holds its own copy of solver/tools.py's prompt."""
    from curriculum.config import ToolUseConfig
    from solver.tools import DEFAULT_TOOL_PROMPT

    assert ToolUseConfig().tool_prompt == DEFAULT_TOOL_PROMPT
