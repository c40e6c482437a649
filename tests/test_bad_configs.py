"""No traceback for bad input: malformed configs and overrides are refused by `selfplay` in one
line on stderr with exit code 2, within seconds, before any model is built.

Most cases run `selfplay validate` in this process (`curriculum.cli.main`); a few run the real
CLI in a subprocess, and the checks made where the model is built (LoRA target modules) or the
run directory is written run `selfplay train` there on a tiny model.
"""
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from curriculum import cli
from curriculum.config import MAX_CONFIG_BYTES
from tests import cli_runner
from tests.conftest import TINY_OVERRIDES

ROOT = Path(__file__).resolve().parents[1]
DEMO = str(ROOT / "configs" / "demo_cpu.yaml")
LIMIT_S = 60  # "within seconds", with room for a loaded CI machine; past it the case hangs

BOMB = "{a: &a [1,1,1,1,1,1,1,1,1], b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b], " \
       "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c], e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d], f: [*e,*e,*e,*e,*e,*e,*e,*e,*e]}"

# (id, overrides of configs/demo_cpu.yaml, what stderr must say)
OVERRIDES = [
    # override syntax
    ("no-equals", ["train.rounds"], "is not key=value"),
    ("unknown-key", ["train.round=2"], "did you mean train.rounds?"),
    ("section", ["solver=1"], "'solver' is a section"),
    ("yaml-syntax", ["train.rounds=[1,"], "override train.rounds: not valid YAML"),
    ("yaml-tag", ["train.rounds=!!python/object/apply:os.system [true]"], "could not determine a constructor"),
    ("yaml-bomb", [f"env.kwargs={BOMB}"], "override env.kwargs: YAML holds more than 10000 values"),
    ("yaml-deep", ["env.kwargs={a: " + "[" * 200 + "]" * 200 + "}"], "YAML nests deeper than 32 levels"),
    ("interpolation", ["wandb.name=${"], "config key 'wandb.name'"),
    # tools
    ("tool-unknown", ["solver.tools=[bash]"], "solver.tools: 'bash' is not a tool; choose from ['python']"),
    ("tool-twice", ["solver.tools=[python, python]"], "names a tool twice"),
    ("tool-one-turn", ["solver.tools=[python]", "solver.max_turns=1"], "needs solver.max_turns >= 2 (got 1)"),
    ("tool-not-a-list", ["solver.tools=python"], "solver.tools must be a list"),
    ("challenger-tool-unknown", ["challenger.tools=[bash]"], "challenger.tools: 'bash' is not a tool; choose from"),
    ("challenger-tool-twice", ["challenger.tools=[python, python]"], "challenger.tools (['python', 'python']) names a tool twice"),
    ("challenger-tool-one-turn", ["challenger.tools=[python]", "challenger.max_turns=1"],
     "needs challenger.max_turns >= 2 (got 1)"),
    ("challenger-tool-workers", ["challenger.tool_workers=0"], "challenger.tool_workers"),
    ("tool-timeout-zero", ["solver.tool_timeout_s=0"], "solver.tool_timeout_s (0.0) must be in (0, 60]"),
    ("tool-output-zero", ["solver.tool_output_chars=0"], "solver.tool_output_chars (0) must be in [1, 65536]"),
    # types
    ("int-float", ["train.rounds=1.5"], "'train.rounds'"),
    ("int-word", ["train.rounds=many"], "'train.rounds'"),
    ("int-bool", ["run.seed=true"], "'run.seed'"),
    ("int-bytes", ["train.rounds=!!binary aGVsbG8="], "'train.rounds'"),
    ("float-list", ["solver.optim.lr=[1]"], "'solver.optim.lr'"),
    ("bool-word", ["log.progress=maybe"], "'log.progress'"),
    ("list-mapping", ["run.plugins={a: 1}"], "run.plugins must be a list"),
    ("kwargs-list", ["env.kwargs=[1, 2]"], "env.kwargs must be a mapping"),
    ("kwargs-null", ["env.kwargs=null"], "env.kwargs must be a mapping"),
    ("kwargs-int-key", ["env.kwargs={1: 2}"], "'env.kwargs.1'"),
    ("kwargs-date", ["env.kwargs={d: 2020-01-01}"], "'env.kwargs.d'"),
    # NaN, inf and ranges
    ("lr-inf", ["solver.optim.lr=.inf"], "solver.optim.lr (inf) must be a finite number"),
    ("lr-nan", ["challenger.optim.lr=nan"], "challenger.optim.lr (nan) must be a finite number"),
    ("lr-zero", ["solver.optim.lr=0"], "solver.optim.lr (0.0) must be > 0"),
    ("grad-clip-negative", ["solver.optim.grad_clip=-1"], "solver.optim.grad_clip (-1.0) must be >= 0"),
    ("weight-decay-negative", ["solver.optim.weight_decay=-0.1"], "solver.optim.weight_decay (-0.1) must be >= 0"),
    ("warmup-steps-negative", ["challenger.optim.warmup_steps=-1"], "challenger.optim.warmup_steps (-1) must be in"),
    ("kl-negative", ["challenger.loss.kl_coef=-0.1"], "challenger.loss.kl_coef (-0.1) must be >= 0"),
    ("clip-low-negative", ["solver.loss.clip_low=-0.1"], "solver.loss.clip_low (-0.1) must be in [0, 1]"),
    ("clip-high-inf", ["solver.loss.clip_high=.inf"], "solver.loss.clip_high (inf) must be a finite number"),
    ("clip-ratio-c-one", ["solver.loss.clip_ratio_c=1"], "solver.loss.clip_ratio_c (1.0) must be > 1, or 0"),
    ("clip-ratio-c-negative", ["solver.loss.clip_ratio_c=-3"], "solver.loss.clip_ratio_c (-3.0) must be >= 0"),
    ("delta-inside-clip", ["solver.loss.delta=1.1"], "solver.loss.delta (1.1) must be > 1 + solver.loss.clip_high"),
    ("delta-nan", ["challenger.loss.delta=.nan"], "challenger.loss.delta (nan) must be a finite number"),
    ("epochs-zero", ["solver.loss.epochs=0"], "solver.loss.epochs (0) must be in [1, 1000]"),
    ("minibatch-indivisible", ["solver.loss.minibatch_size=5"], "solver.loss.minibatch_size (5) must divide"),
    ("temperature-zero", ["solver.sampling.temperature=0"], "solver.sampling.temperature (0.0) must be > 0"),
    ("top-p-zero", ["solver.sampling.top_p=0"], "solver.sampling.top_p (0.0) must be in (0, 1]"),
    ("max-new-tokens-zero", ["challenger.sampling.max_new_tokens=0"], "challenger.sampling.max_new_tokens (0)"),
    ("group-size-one", ["solver.group_size=1"], "solver.group_size (1) must be in [2, 4096]"),
    ("batch-prompts-zero", ["challenger.batch_prompts=0"], "challenger.batch_prompts (0) must be in"),
    ("steps-too-many", ["challenger.steps=600", "solver.steps=600"], "must be <= 999"),
    ("repetition-threshold-nan", ["reward.repetition_threshold=.nan"], "reward.repetition_threshold (nan) must be a finite"),
    ("repetition-threshold-big", ["reward.repetition_threshold=1.5"], "reward.repetition_threshold (1.5) must be in [0, 1]"),
    ("repetition-coef-negative", ["reward.repetition_coef=-1"], "reward.repetition_coef (-1.0) must be >= 0"),
    ("invalid-reward-inf", ["reward.invalid=-.inf"], "reward.invalid (-inf) must be a finite number"),
    ("lora-r-zero", ["model.lora.r=0"], "model.lora.r (0) must be in [1, 4096]"),
    ("lora-alpha-zero", ["model.lora.alpha=0"], "model.lora.alpha (0) must be in"),
    ("lora-dropout-one", ["model.lora.dropout=1"], "model.lora.dropout (1.0) must be in [0, 1)"),
    ("lora-targets-empty", ["model.lora.target_modules=[]"], "model.lora.target_modules ([]) must list module names"),
    ("hidden-negative", ["model.tiny.hidden_size=-8"], "model.tiny.hidden_size (-8) must be in [2, 8192]"),
    ("hidden-heads", ["model.tiny.hidden_size=30"], "model.tiny.hidden_size (30) must be a multiple of 2 x"),
    ("layers-zero", ["model.tiny.layers=0"], "model.tiny.layers (0) must be in"),
    ("max-positions-zero", ["model.tiny.max_positions=0"], "model.tiny.max_positions (0) must be in"),
    ("warmup-lr-negative", ["model.warmup.lr=-0.1"], "model.warmup.lr (-0.1) must be > 0"),
    ("warmup-batch-zero", ["model.warmup.batch_size=0"], "model.warmup.batch_size (0) must be in"),
    ("challenger-fraction", ["model.warmup.challenger_fraction=2"], "model.warmup.challenger_fraction (2.0) must be in"),
    ("rounds-zero", ["train.rounds=0"], "train.rounds (0) must be in [1, 9999]"),
    ("rounds-too-many", ["train.rounds=10000"], "train.rounds (10000) must be in [1, 9999]"),
    ("seed-negative", ["run.seed=-1"], "run.seed (-1) must be in"),
    ("threads-negative", ["run.threads=-1"], "run.threads (-1) must be in"),
    ("per-level-huge", ["eval.per_level=1000000"], "eval.per_level (1000000) must be in [1, 1000]"),
    ("eval-every-zero", ["eval.every=0"], "eval.every (0) must be >= 1"),
    ("eval-nothing", ["eval.greedy=false"], "leave nothing to evaluate"),
    ("band-order", ["curriculum.band_low=0.9", "curriculum.band_high=0.1"], "curriculum.band_low (0.9) <= curriculum.band_high (0.1)"),
    ("probe-samples-one", ["curriculum.probe_samples=1"], "curriculum.probe_samples (1) must be in"),
    ("pool-capacity-zero", ["curriculum.pool_capacity=0"], "curriculum.pool_capacity (0) must be in"),
    ("max-age-zero", ["curriculum.max_age=0"], "curriculum.max_age (0) must be >= 1"),
    ("adaptive-floor-nan", ["curriculum.adaptive_floor=.nan"], "curriculum.adaptive_floor (nan) must be a finite"),
    ("keep-last-zero", ["checkpoint.keep_last=0"], "checkpoint.keep_last (0) must be in"),
    ("log-samples-negative", ["log.samples=-1"], "log.samples (-1) must be >= 0"),
    ("zero-stage-four", ["distributed.zero_stage=4"], "distributed.zero_stage (4) must be in [0, 3]"),
    ("timeout-zero", ["distributed.timeout_s=0"], "distributed.timeout_s (0) must be in"),
    # choices
    ("env-name", ["env.name=chess"], "env.name 'chess' is not registered"),
    ("frontier", ["reward.frontier=curiosity"], "reward.frontier 'curiosity'"),
    ("mode", ["curriculum.mode=random"], "curriculum.mode 'random'"),
    ("device", ["run.device=tpu"], "run.device 'tpu'"),
    ("dtype", ["model.dtype=float8"], "model.dtype 'float8'"),
    ("estimator", ["solver.loss.estimator=ppo"], "solver.loss.estimator 'ppo'"),
    ("aggregation", ["solver.loss.aggregation=sum"], "solver.loss.aggregation 'sum'"),
    ("engine", ["distributed.engine=jax"], "distributed.engine 'jax'"),
    # environment kwargs, through the environment's own constructor
    ("levels-huge", ["env.kwargs={num_levels: 100000000}"], "arithmetic needs an integer 1 <= num_levels <= 64"),
    ("levels-exponent", ["env.kwargs={num_levels: 1e8}"], "arithmetic needs an integer 1 <= num_levels <= 64 (got '1e8')"),
    ("levels-negative", ["env.kwargs={num_levels: -3}"], "env.kwargs do not fit environment 'arithmetic'"),
    ("levels-float", ["env.kwargs={num_levels: 2.5}"], "(got 2.5)"),
    ("levels-bool", ["env.kwargs={num_levels: true}"], "(got True)"),
    ("digits-zero", ["env.kwargs={max_digits: 0}"], "1 <= max_digits <= 18 (got 0)"),
    ("operators-repeated", ["env.kwargs={operators: '++'}"], "distinct characters of '+-*' (got '++')"),
    ("operators-divide", ["env.kwargs={operators: '/'}"], "(got '/')"),
    ("kwargs-unknown", ["env.kwargs={colour: red}"], "unexpected keyword argument 'colour'"),
    ("ladder-levels", ["env.name=ladder", "env.kwargs={num_levels: 65}"], "ladder needs an integer 1 <= num_levels <= 64"),
    ("code-timeout-nan", ["env.name=code_output", "env.kwargs={timeout_s: .nan}"], "0 < timeout_s <= 60 (got nan)"),
    ("code-memory", ["env.name=code_output", "env.kwargs={memory_mb: 8}"], "32 <= memory_mb"),
    ("code-levels", ["env.name=code_output", "env.kwargs={num_levels: 100}"], "1 <= num_levels <= 16 (got 100)"),
    ("triplets-types", ["env.name=code_triplets", "env.kwargs={task_types: [deduction, translation]}"],
     "code_triplets needs task_types: distinct names of ['deduction', 'abduction', 'induction']"),
    ("triplets-restrict", ["env.name=code_triplets", "env.kwargs={restrict: 'no'}"], "restrict: true or false (got 'no')"),
    ("triplets-tiny-programs", ["env.name=code_triplets", "env.kwargs={num_levels: 8, max_chars: 60}"],
     "could not generate a level-"),
    # paths
    ("run-dir-empty", ["run.dir="], "run.dir is empty"),
    ("run-dir-blank", ["run.dir=' '"], "run.dir is empty"),
    ("run-dir-nul", ['run.dir="runs/a\\0b"'], "run.dir ('runs/a\\x00b') contains a NUL character"),
    ("model-path-missing", ["model.path=/nonexistent/model"], "is not a local directory"),
    ("model-id-not-cached", ["model.path=nobody-has/this-model"], "nor a model id in the local Hugging Face cache"),
    ("tokenizer-path-alone", ["model.tokenizer_path=/tmp"], "model.tokenizer_path ('/tmp') applies to a model.path model"),
    ("revision-alone", ["model.revision=v1"], "model.revision ('v1') applies to a model.path model"),
    ("remote-code-alone", ["model.trust_remote_code=true"], "model.trust_remote_code (True) applies to a model.path"),
    ("attn-unknown", ["model.attn_implementation=fastest"], "model.attn_implementation 'fastest'; choose from eager, "),
    ("plugin-missing", ["run.plugins=[nowhere_at_all.py]"], "run.plugins: cannot import"),
    ("plugin-nul", ['run.plugins=["a\\0b.py"]'], "contains a NUL character"),
    ("deepspeed-json-missing", ["distributed.engine=deepspeed", "distributed.deepspeed_config=/nonexistent.json"],
     "is not a file"),
]

# (id, config file content, what stderr must say); {path} is the file's path
FILES = [
    ("not-utf8", b"train:\n  rounds: 2\n\xff\xfe\n", "{path}: not UTF-8 text: byte 0xff at offset 19"),
    ("utf16", "train:\n  rounds: 2\n".encode("utf-16"), "not UTF-8 text: byte 0xff at offset 0"),
    ("too-large", b"# " + b"x" * MAX_CONFIG_BYTES + b"\n", f"larger than {MAX_CONFIG_BYTES} bytes"),
    ("nul-byte", b"train:\x00\n", "not valid YAML"),
    ("deep", ("env:\n  kwargs:\n    a: " + "[" * 5000 + "]" * 5000 + "\n").encode(), "YAML nests deeper than 32 levels"),
    ("bomb", f"env:\n  kwargs: {BOMB}\n".encode(), "YAML holds more than 10000 values"),
    ("recursive-alias", b"env:\n  kwargs: &x {a: *x}\n", "alias *x lies inside the value it names"),
    ("syntax", b"train: [1, 2\n", "not valid YAML"),
    ("tab", b"train:\n\trounds: 2\n", "not valid YAML"),
    ("undefined-alias", b"train: {rounds: *nope}\n", "found undefined alias"),
    ("top-level-list", b"- 1\n- 2\n", "top level must be a mapping"),
    ("file-unknown-key", b"solver:\n  optim:\n    lrr: 0.1\n", "unknown config key 'solver.optim.lrr'"),
    ("file-kwargs-list", b"env:\n  kwargs: [1, 2]\n", "env.kwargs must be a mapping"),
    ("section-value", b"train: 3\n", "'train' is a section"),
    ("nan-in-file", b"solver:\n  optim:\n    lr: .nan\n", "solver.optim.lr (nan) must be a finite number"),
]

# Run also through a real `selfplay` process: the stream handling and exit code of the real CLI.
IN_SUBPROCESS = {"lr-inf", "yaml-bomb", "levels-huge", "run-dir-empty", "not-utf8", "deep", "bomb"}


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail (rather than hang) a case that takes longer than ``seconds``."""
    def expire(*_):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def assert_refused(rc: int, out: str, err: str, expect: str) -> None:
    assert rc == 2, f"exit {rc}; stderr:\n{err[-3000:]}"
    assert "Traceback" not in err and out == "", err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("selfplay: "), err[-3000:]
    assert expect in lines[0], lines[0]


def in_process(argv: list[str], capsys) -> tuple[int, str, str]:
    with deadline(LIMIT_S):
        rc = cli.main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def selfplay(*args, timeout=LIMIT_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_SILENT": "true"}
    return subprocess.run([sys.executable, "-m", "curriculum.cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def file_case(tmp_path: Path, content: bytes, expect: str) -> tuple[Path, str]:
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    return path, expect.format(path=path)


def test_there_are_at_least_sixty_cases():
    assert len(OVERRIDES) + len(FILES) >= 60
    assert len({case[0] for case in OVERRIDES + FILES}) == len(OVERRIDES) + len(FILES)


@pytest.mark.parametrize("overrides,expect", [c[1:] for c in OVERRIDES], ids=[c[0] for c in OVERRIDES])
def test_bad_override_is_one_line_exit_2(overrides, expect, capsys):
    assert_refused(*in_process(["validate", DEMO, *overrides], capsys), expect)


@pytest.mark.parametrize("content,expect", [c[1:] for c in FILES], ids=[c[0] for c in FILES])
def test_bad_file_is_one_line_exit_2(content, expect, capsys, tmp_path):
    path, expect = file_case(tmp_path, content, expect)
    assert_refused(*in_process(["validate", str(path)], capsys), expect)


def test_the_same_through_the_real_cli(tmp_path):
    cases = [(["validate", DEMO, *o], e) for i, o, e in OVERRIDES if i in IN_SUBPROCESS]
    for case_id, content, expect in FILES:
        if case_id in IN_SUBPROCESS:
            folder = tmp_path / case_id
            folder.mkdir()
            path, expect = file_case(folder, content, expect)
            cases.append((["validate", path], expect))
    assert len(cases) == len(IN_SUBPROCESS)
    for argv, expect in cases:
        start = time.monotonic()
        proc = selfplay(*argv)  # subprocess.TimeoutExpired fails the test
        assert_refused(proc.returncode, proc.stdout, proc.stderr, expect)
        assert time.monotonic() - start < LIMIT_S


def test_cuda_asked_for_without_cuda(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert_refused(*in_process(["validate", DEMO, "run.device=cuda"], capsys),
                   "run.device=cuda but torch sees no CUDA device")
    assert_refused(*in_process(["validate", DEMO, "run.device=auto", "rl.backend=triton"], capsys),
                   "rl.backend=triton needs a CUDA device")


def test_a_model_directory_without_a_model(capsys, tmp_path):
    assert_refused(*in_process(["validate", DEMO, f"model.path={tmp_path}"], capsys),
                   f"model.path '{tmp_path}' has no config.json")


def test_a_model_directory_without_a_tokenizer(capsys, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    model = f"model.path={tmp_path}"
    assert_refused(*in_process(["validate", DEMO, model], capsys), "holds no tokenizer (tokenizer.json, ")
    assert_refused(*in_process(["validate", DEMO, model, "model.tokenizer_path=/nonexistent/tok"], capsys),
                   "model.tokenizer_path '/nonexistent/tok' is not a local directory")
    assert_refused(*in_process(["validate", DEMO, model, f"model.tokenizer_path={tmp_path}"], capsys),
                   f"model.tokenizer_path '{tmp_path}' holds no tokenizer")
    (tmp_path / "tokenizer.json").write_text("{}")
    assert_refused(*in_process(["validate", DEMO, model, "model.revision=main"], capsys),
                   f"model.path '{tmp_path}' is a directory, which holds one version")


@pytest.mark.parametrize("text,expect", [("{zero: 2", "is not readable JSON"), ("[2]", "must hold a JSON object")])
def test_a_deepspeed_config_that_is_not_a_json_object(text, expect, capsys, tmp_path):
    (tmp_path / "ds.json").write_text(text)
    assert_refused(*in_process(["validate", DEMO, "distributed.engine=deepspeed",
                                f"distributed.deepspeed_config={tmp_path / 'ds.json'}"], capsys), expect)


def tiny_train(tmp_path: Path, *overrides) -> list[str]:
    return ["train", DEMO, *TINY_OVERRIDES, "model.warmup.steps=2", f"model.warmup.cache_dir={tmp_path / 'cache'}",
            *overrides]


@pytest.mark.slow
def test_lora_targets_that_the_model_lacks_are_named(tmp_path):
    """Checked where the model is built (peft would otherwise train the names it finds and skip a typo)."""
    proc = selfplay(*tiny_train(tmp_path, f"run.dir={tmp_path / 'run'}", "model.lora.enabled=true",
                                "model.lora.target_modules=[q_proj, qv_proj, attn]"), timeout=300)
    assert_refused(proc.returncode, proc.stdout, proc.stderr,
                   "model.lora.target_modules: qv_proj, attn not in the model; its linear layers are ")
    assert "q_proj" in proc.stderr and "down_proj" in proc.stderr


def test_a_run_directory_that_cannot_be_created_is_named(tmp_path):
    """In this process, its log lines on stderr as the real CLI prints them (``tests/cli_runner.py``)."""
    (tmp_path / "file").write_text("not a directory")
    run = tmp_path / "file" / "run"
    proc = cli_runner.in_process(*tiny_train(tmp_path, f"run.dir={run}"), check=False)
    assert_refused(proc.returncode, proc.stdout, proc.stderr, f"selfplay: cannot write {run}: Not a directory")


def test_permission_denied_names_the_path(capsys, monkeypatch):
    # Root (CI) writes anywhere; the error a read-only parent gives everyone else, raised where
    # the run directory is created.
    def denied(*_):
        raise PermissionError(13, "Permission denied", "/readonly/run")

    monkeypatch.setattr(cli, "_train", denied)
    assert_refused(*in_process(["train", DEMO], capsys), "selfplay: cannot write /readonly/run: Permission denied")


def test_an_os_error_about_no_path_stays_a_traceback(monkeypatch):
    """An unexpected failure is a bug: its traceback is what a report needs."""
    def broken(*_):
        raise OSError("something no user caused")

    monkeypatch.setattr(cli, "_train", broken)
    with pytest.raises(OSError, match="something no user caused"):
        cli.main(["train", DEMO])
