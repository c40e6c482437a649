"""Health alarms on synthetic metric streams: each fires on its failure, clears when it ends, and a
healthy stream raises none."""
import json
import math

import pytest

from curriculum import health
from curriculum.config import HealthConfig, load_config
from curriculum.errors import ConfigError

ROUNDS = 24


def healthy(rounds: int = ROUNDS) -> dict[int, dict[str, float]]:
    """A self-play run that learns: held-out and frontier rise, the pool is full, the roles are stable."""
    rows = {0: {"eval/accuracy": 0.3, "eval/accuracy/tier_1": 0.9, "eval/accuracy/tier_2": 0.3, "eval/frontier_level": 1}}
    for r in range(1, rounds):
        rows[r] = {
            "eval/accuracy": 0.3 + 0.02 * r, "eval/accuracy/tier_1": 0.9, "eval/accuracy/tier_2": 0.3 + 0.02 * r,
            "eval/frontier_level": 1 + r // 3, "curriculum/accepted_level_mean": 1 + r / 4, "curriculum/accepted": 40,
            "curriculum/pool_size": 100, "curriculum/valid_fraction": 0.9, "challenger/valid_fraction": 0.9,
            "challenger/unique_fraction": 0.9, "challenger/repetition_mean": 0.05, "challenger/approx_kl": 0.01,
            "challenger/loss": 0.01, "curriculum/label_accuracy": 0.8, "solver/reward_mean": 0.5,
            "solver/entropy": 0.5, "solver/no_signal_fraction": 0.2, "solver/approx_kl": 0.01, "solver/loss": 0.03,
            "solver/nonfinite_steps": 0.0,
        }
    return rows


CTX = health.Context(HealthConfig(), solver_batch=32, selfplay=True)


def active_rounds(rows, name, ctx=CTX) -> list[int]:
    return [r for r in rows if name in health.check(rows, r, ctx, []).active]


def transitions(rows, name, ctx=CTX) -> tuple[list[int], list[int]]:
    reports = {r: health.check(rows, r, ctx, []) for r in rows}
    return ([r for r, rep in reports.items() if name in rep.started],
            [r for r, rep in reports.items() if name in rep.cleared])


def broken(rounds: range, **values) -> dict[int, dict[str, float]]:
    rows = healthy()
    for r in rounds:
        rows[r].update(values)
    return rows


# name -> (stream, rounds the alarm must be on)
CASES = {
    "solver_collapse/reward": ("solver_collapse", broken(range(5, 9), **{"solver/reward_mean": 0.0}), [6, 7, 8]),
    "solver_collapse/held_out": ("solver_collapse", broken(range(5, 8), **{"eval/accuracy": 0.01}), [6, 7]),
    "solver_collapse/entropy": ("solver_collapse", broken(range(5, 8), **{"solver/entropy": 0.001}), [6, 7]),
    "forgetting": ("forgetting", broken(range(5, 7), **{"eval/accuracy/tier_1": 0.4}), [5, 6]),
    "pool_starved": ("pool_starved", broken(range(4, 8), **{"curriculum/pool_size": 2}), [6, 7]),
    "pool_starved/empty": ("pool_starved", broken(range(4, 7), **{"curriculum/pool_size": 0}), [6]),
    "challenger_invalid": ("challenger_invalid", broken(range(4, 6), **{"curriculum/valid_fraction": 0.0}), [4, 5]),
    "challenger_collapse": ("challenger_collapse", broken(range(4, 6), **{"challenger/unique_fraction": 0.1}), [4, 5]),
    "challenger_collapse/repetition": ("challenger_collapse",
                                       broken(range(4, 5), **{"challenger/repetition_mean": 0.9}), [4]),
    "label_accuracy": ("label_accuracy", broken(range(5, 7), **{"curriculum/label_accuracy": 0.5}), [5, 6]),
    "no_signal": ("no_signal", broken(range(4, 8), **{"solver/no_signal_fraction": 0.95}), [6, 7]),
    "kl": ("kl", broken(range(5, 6), **{"solver/approx_kl": 5.0}), [5]),
    "kl/reference": ("kl", broken(range(5, 6), **{"challenger/kl_ref": 5.0}), [5]),  # what the loss logs
    "kl/logprob_gap": ("kl", broken(range(5, 6), **{"solver/engine_logprob_gap": 0.9}), [5]),
    "non_finite/loss": ("non_finite", broken(range(5, 6), **{"solver/loss": math.nan}), [5]),
    "non_finite/skipped": ("non_finite", broken(range(5, 7), **{"challenger/nonfinite_steps": 1.0}), [5, 6]),
}


def test_every_alarm_has_a_case():
    assert {name for name, _, _ in CASES.values()} | {"stalled", "plateau"} == set(health.ALARMS)


def test_a_healthy_stream_raises_no_alarm():
    rows = healthy()
    for r in rows:
        report = health.check(rows, r, CTX, list(health.ALARMS))
        assert report.active == {} and report.stop == "", (r, report.active)
    assert health.check(rows, ROUNDS - 1, CTX, []).metrics() == {**{f"health/{n}": 0.0 for n in health.ALARMS},
                                                                  "health/active": 0.0}


@pytest.mark.parametrize("case", list(CASES))
def test_alarm_fires_then_clears(case):
    name, rows, on = CASES[case]
    assert active_rounds(rows, name) == on
    assert transitions(rows, name) == ([on[0]], [on[-1] + 1])  # one start line, one clear line


def test_stalled_fires_on_a_flat_frontier_and_clears_on_a_new_high():
    rows = healthy(30)
    for r in range(3, 30):
        rows[r].update({"eval/frontier_level": 2, "curriculum/accepted_level_mean": 1.5})
    rows[25]["eval/frontier_level"] = 3  # a new high
    on = active_rounds(rows, "stalled")
    assert on == list(range(13, 25))  # rounds 4..13 hold no value above round 0..3's best
    fired = health.check(rows, 13, CTX, []).active["stalled"]
    assert fired.values == {"frontier_level": 2, "accepted_level_mean": 1.5}
    # a round without accepted tasks logs level 0 (undefined): it is not a new high, nor a low that stalls
    assert "stalled" not in health.check(healthy(30), 29, CTX, []).active


def test_plateau_fires_after_n_evaluations_without_gain():
    rows = healthy(30)
    for r in range(8, 30):
        rows[r]["eval/accuracy"] = 0.46 if r != 22 else 0.5  # flat after round 7's 0.44, a gain at 22
    on = active_rounds(rows, "plateau")
    # round 8's 0.46 is a gain over 0.44; evaluations 9..18 add nothing to it; 22's 0.5 is a gain again
    assert on[0] == 18 and 22 not in on
    fired = health.check(rows, 18, CTX, []).active["plateau"]
    assert fired.values == {"best": 0.46, "recent_best": 0.46}
    # evaluations only every few rounds: counted in evaluations, not rounds
    sparse = {r: m if r % 4 == 0 else {k: v for k, v in m.items() if not k.startswith("eval/")} for r, m in rows.items()}
    assert active_rounds(sparse, "plateau") == []  # 8 evaluations in all


def test_pool_starved_is_selfplay_only():
    _, rows, _ = CASES["pool_starved"]
    assert active_rounds(rows, "pool_starved", health.Context(HealthConfig(), 32, selfplay=False)) == []


def test_challenger_invalid_names_the_cause():
    never = broken(range(1, ROUNDS), **{"curriculum/valid_fraction": 0.0, "challenger/rejected/grammar": 1.0})
    text = health.check(never, 3, CTX, []).active["challenger_invalid"].text
    assert "since round 1" in text and "does not write proposals in the environment's format" in text
    assert "grammar 100%" in text and "collapsed after an update" not in text
    _, after, _ = CASES["challenger_invalid"]
    text = health.check(after, 5, CTX, []).active["challenger_invalid"].text
    assert "it was 0.90 at round 3" in text and "collapsed after an update" in text


def test_report_metrics_values_and_stop():
    _, rows, _ = CASES["solver_collapse/reward"]
    report = health.check(rows, 6, CTX, ["plateau", "solver_collapse"])
    m = report.metrics()
    assert m["health/solver_collapse"] == 1.0 and m["health/active"] == 1.0
    assert m["health/solver_collapse/reward"] == 0.0 and m["health/solver_collapse/held_out"] == pytest.approx(0.42)
    assert report.stop.startswith("health.stop_on: solver_collapse (solver/reward_mean 0.000 <= 0.05")
    assert health.check(rows, 6, CTX, ["plateau"]).stop == ""


def test_timeline_reads_logged_alarms():
    rows = {1: {"health/kl": 0.0, "health/active": 0.0}, 2: {"health/kl": 1.0, "health/kl/solver_approx_kl": 3.0},
            3: {"health/kl": 1.0}, 4: {"health/kl": 0.0, "health/non_finite": 1.0}}
    assert health.timeline(rows) == {"kl": [2, 3], "non_finite": [4]}


def test_health_config_is_validated():
    cfg = load_config("configs/demo_cpu.yaml", ["health.stop_on=[plateau, solver_collapse]"])
    assert cfg.health.stop_on == ["plateau", "solver_collapse"]
    with pytest.raises(ConfigError, match=r"health.stop_on: 'collapse' is not an alarm; choose from solver_collapse"):
        load_config("configs/demo_cpu.yaml", ["health.stop_on=[collapse]"])
    with pytest.raises(ConfigError, match=r"health.forget_margin \(2.0\) must be in \[0, 1\]"):
        load_config("configs/demo_cpu.yaml", ["health.forget_margin=2"])
    with pytest.raises(ConfigError, match=r"health.stop_on must be a list"):
        load_config("configs/demo_cpu.yaml", ["health.stop_on=plateau"])


def write_health_run(run, on: dict[str, list[int]], rounds: int = 5):
    """A run directory with held-out evaluations and one health record per round (alarm -> rounds on)."""
    from curriculum.config import to_yaml

    run.mkdir(parents=True)
    (run / "config.yaml").write_text(to_yaml(load_config("configs/demo_cpu.yaml", [f"run.dir={run}"])))
    lines = [{"round": 0, "phase": "eval", "eval/accuracy": 0.4}]
    for r in range(1, rounds + 1):
        record = {f"health/{n}": float(r in on.get(n, [])) for n in health.ALARMS}
        record.update({f"health/{n}/value": 0.5 * r for n, rs in on.items() if r in rs})
        record["health/active"] = sum(r in rs for rs in on.values())
        lines += [{"round": r, "phase": "eval", "eval/accuracy": 0.4 - 0.05 * r}, {"round": r, "phase": "health", **record}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run


def test_dashboard_health_panel_and_markers(tmp_path):
    from curriculum import dashboard

    page = dashboard.render(write_health_run(tmp_path / "sick", {"kl": [2, 3], "solver_collapse": [4, 5]}))
    panel = page.split("<h2 id='health'>Health</h2>", 1)[1].split("<h2>", 1)[0]
    assert page.index("id='health'") < page.index("<h2>Held-out benchmark</h2>")  # at the top
    rows = panel.split("<tr class=")[1:]
    assert rows[0].startswith("'on'><td><b>solver_collapse</b></td><td>ON</td><td>4-5</td><td>value 2.5</td>")
    assert rows[1].startswith("'past'><td><b>kl</b></td><td>cleared</td><td>2-3</td><td>value 1.5</td>")
    accuracy = page.split("<figcaption>Held-out accuracy", 1)[1].split("</figure>", 1)[0]
    assert accuracy.count('class="alarm"') == 2
    assert "<title>health alarm kl from round 2</title>" in accuracy
    assert "<title>health alarm solver_collapse from round 4</title>" in accuracy
    quiet = dashboard.render(write_health_run(tmp_path / "quiet", {}))
    assert "no alarm has fired (checked every round, last at round 5)" in quiet and 'class="alarm"' not in quiet
