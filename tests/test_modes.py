"""Every curriculum arm runs through the CLI (in this process), logs what the comparison reads, and
resumes exactly."""
import json
from pathlib import Path

import pytest

from tests.cli_runner import in_process
from tests.conftest import TINY_OVERRIDES
ARMS = {
    "uniform_filtered": ["curriculum.mode=uniform_filtered", "curriculum.filter_max_batches=3"],
    "adaptive": ["curriculum.mode=adaptive", "curriculum.max_level=2"],
    "selfplay": ["curriculum.mode=selfplay", "curriculum.references=2", "curriculum.probe_samples_max=8",
                 "curriculum.probe_temperature=0.7", "curriculum.fill_proposals=2", "curriculum.fill_max_batches=3"],
}


def train(*args):
    return in_process("train", *args)


def records(run: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "time" and not k.startswith("time/")}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("arm", sorted(ARMS))
def test_arm_logs_the_comparison_metrics_and_resumes_exactly(tmp_path, arm, warmup_cache_override):
    # a warm-up long enough for valid proposals and some solved tasks, so every arm has groups that teach
    common = [*TINY_OVERRIDES, *ARMS[arm], "model.warmup.steps=300", "model.warmup.challenger_fraction=0.7",
              warmup_cache_override, "run.threads=1", "eval.samples=2",
              "eval.temperature=1.0", "solver.batch_prompts=4"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    proc = train("configs/demo_cpu.yaml", *common, "train.rounds=2", f"run.dir={straight}")
    assert "round 2/2 |" in proc.stderr  # the per-round console line
    train("configs/demo_cpu.yaml", *common, "train.rounds=1", f"run.dir={stopped}")
    train("--resume", stopped, "train.rounds=2")
    recs = records(straight)
    assert records(stopped) == recs  # the arm's state (level rates, token counts, pool) resumes exactly
    solver = [r for r in recs if r["phase"] == "update_solver" and "solver/skipped" not in r]
    assert solver, "no solver step trained"
    assert all(0.0 <= r["solver/no_signal_fraction"] <= 1.0 for r in solver)
    assert all(1 <= r["solver/distinct_tasks"] <= 4 for r in solver)
    tokens = [r["solver/generated_tokens"] for r in recs if "solver/generated_tokens" in r]
    assert tokens == sorted(tokens) and tokens[-1] > 0  # cumulative
    evals = [r for r in recs if r["phase"] == "eval"]
    assert [r["round"] for r in evals] == [0, 1, 2]
    for r in evals:
        assert {"eval/accuracy", "eval/mean_at_k", "eval/mean_at_k/tier_1", "eval/frontier_level"} <= set(r)
    # where a round's time went: generation and scoring by purpose, inside the round's wall time
    for rec in (json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()):
        if rec["phase"] == "round":
            spent = [rec["time/propose_s"], rec["time/probe_s"], rec["time/solve_s"]]
            assert min(spent) >= 0 and rec["time/solve_s"] > 0 and sum(spent) <= rec["time/round_s"]
            assert (rec["time/propose_s"] > 0) == (arm == "selfplay")
    if arm == "uniform_filtered":
        assert all(r["solver/groups_drawn"] >= 4 for r in solver)
    if arm == "adaptive":  # max_level=2: the generator arm never trains beyond it
        assert all(r["solver/task_level_mean"] <= 2 for r in solver)
    if arm == "selfplay":
        prompts = [json.loads(line) for line in (straight / "tasks" / "round_0002.jsonl").read_text().splitlines()]
        assert prompts and all(r["phase"].startswith(("challenger_step", "fill")) for r in prompts)
        assert any(r["challenger/generated_tokens"] > 0 for r in recs if "challenger/generated_tokens" in r)
        # 2 proposals per fill batch cannot fill a solver batch (4) from an empty pool: more batches
        # follow, up to fill_max_batches=3, until the pool holds a batch
        fills = [r for r in recs if r["phase"] == "fill_pool"]
        assert fills[0]["curriculum/fill_batches"] >= 2
        assert all(r["curriculum/fill_batches"] == 3 or r["curriculum/pool_size"] >= 4 for r in fills)
        assert all(r["curriculum/proposals"] == 2 * r["curriculum/fill_batches"] for r in fills)
        # a batch never repeats a task: a small pool gives a smaller batch, and says so
        if any(r["solver/distinct_tasks"] < 4 for r in solver):
            assert "fewer than a solver batch (4)" in proc.stderr
