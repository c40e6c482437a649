"""configs/code_cpu.yaml through the CLI (in this process): Absolute Zero's three task types in the loop, their per-type
metrics and the sandbox's executions per round; then the uniform arm on the program generator."""
import json

import pytest

from tests.test_cli import assert_quiet, metrics, selfplay

KINDS = ("deduction", "abduction", "induction")
# The shipped config, shorter: a warm-up that still teaches the formats (some proposals are valid, so the
# sandbox runs), one challenger group and one solver task per type and step.
SMALL = ["model.warmup.steps=250", "model.warmup.batch_size=16", "challenger.batch_prompts=3", "solver.batch_prompts=3",
         "solver.steps=1", "curriculum.fill_proposals=12", "curriculum.probe_samples=2", "eval.per_level=2",
         "log.progress=false", "wandb.mode=disabled"]


@pytest.fixture
def cache(warmup_cache_override):
    """One warm-up for both runs (the arm is not part of its key), the session's."""
    return warmup_cache_override


def records(run, phase):
    return [r for r in metrics(run) if r["phase"] == phase]


@pytest.mark.slow
def test_three_task_types_run_in_the_loop_with_per_type_metrics(tmp_path, cache):
    run = tmp_path / "code"
    assert_quiet(selfplay("train", "configs/code_cpu.yaml", *SMALL, cache, "train.rounds=1", "--run-dir", run))

    for phase, prefix in (("update_challenger", "challenger"), ("fill_pool", "curriculum")):
        recs = records(run, phase)
        assert [r["round"] for r in recs] == [1]
        for rec in recs:
            for k in KINDS:
                valid = rec[f"{prefix}/valid_fraction/type_{k}"]
                assert 0.0 <= valid <= 1.0
                # a type whose proposals were valid was probed: its solve rate is logged
                assert (f"{prefix}/solve_rate/type_{k}" in rec) == (valid > 0)
    for rec in records(run, "fill_pool"):
        assert sum(rec[f"curriculum/accepted/type_{k}"] for k in KINDS) == rec["curriculum/accepted"]
        assert sum(rec[f"curriculum/pool_size/type_{k}"] for k in KINDS) == rec["curriculum/pool_size"]
    evals = records(run, "eval")
    assert [r["round"] for r in evals] == [0, 1]
    assert all(0.0 <= r[f"eval/accuracy/type_{k}"] <= 1.0 for r in evals for k in KINDS)
    for rec in records(run, "update_solver"):
        if "solver/skipped" not in rec:
            assert any(f"solver/solve_rate/type_{k}" in rec for k in KINDS)
    rounds = records(run, "round")
    assert [r["round"] for r in rounds] == [1]
    assert all(r["sandbox/executions"] >= 0 and 0 <= r["sandbox/timeouts"] <= r["sandbox/executions"] for r in rounds)
    # Each group's prompt asked for one type, the types in turn; every valid task is of the type it was asked for.
    tasks = [json.loads(line) for line in (run / "tasks" / "round_0001.jsonl").read_text().splitlines()]
    assert any(t["task"] for t in tasks), "no valid proposal: the warm-up no longer teaches the format"
    assert rounds[0]["sandbox/executions"] >= 2  # each valid proposal was run twice
    asked = [next(k for k in KINDS if t["prompt"].endswith(f"#{k}\n")) for t in tasks]
    fill = [k for k, t in zip(asked, tasks) if t["phase"] == "fill"]
    assert fill and len(fill) % 12 == 0 and all(fill.count(k) == len(fill) // 3 for k in KINDS)  # a group of 4 each
    for k, t in zip(asked, tasks):
        assert (t["task"] is None) != (t["rejected"] is None)
        if t["task"]:
            assert t["task"]["kind"] == k and t["task"]["text"].startswith(f"#{k}\n")


@pytest.mark.slow
def test_the_uniform_arm_trains_on_generated_triplets(tmp_path, cache):
    run = tmp_path / "uniform"
    selfplay("train", "configs/code_cpu.yaml", *SMALL, cache,
             "curriculum.mode=uniform", "solver.steps=2", "train.rounds=1", "--run-dir", run)
    solver = records(run, "update_solver")
    assert len(solver) == 2 and all("solver/skipped" not in r for r in solver)
    assert all(any(f"solver/solve_rate/type_{k}" in r for k in KINDS) for r in solver)
    assert not records(run, "update_challenger")
    assert all(f"eval/accuracy/type_{k}" in records(run, "eval")[-1] for k in KINDS)
    assert "sandbox/executions" in records(run, "round")[0]
