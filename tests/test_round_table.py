"""scripts/round_table.py: per-round means over runs, a round a run did not log left out, and the last row."""
import json

from tests.script_loader import load_script

rt = load_script("round_table")


def write(run, records):
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_means_over_runs_per_round_and_over_all_rounds(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    # challenger/* is averaged over the round's steps; curriculum/* takes the round's last value
    write(a, [{"round": 1, "phase": "update_challenger", "challenger/valid_fraction": 0.5},
              {"round": 1, "phase": "update_challenger", "challenger/valid_fraction": 1.0},
              {"round": 1, "phase": "fill_pool", "curriculum/label_accuracy": 0.25},
              {"round": 1, "phase": "fill_pool", "curriculum/label_accuracy": 0.5},
              {"round": 2, "phase": "fill_pool", "curriculum/label_accuracy": 1.0}])
    write(b, [{"round": 1, "phase": "update_challenger", "challenger/valid_fraction": 0.25},
              {"round": 1, "phase": "fill_pool", "curriculum/label_accuracy": 1.0}])
    lines = rt.table([a, b], ["challenger/valid_fraction", "curriculum/label_accuracy"], 0, 99).splitlines()
    assert lines[2] == "| 1 | 0.5 | 0.75 |"  # (0.75 + 0.25) / 2 and (0.5 + 1.0) / 2
    assert lines[3] == "| 2 | - | 1 |"  # only a logged it
    assert lines[4] == "| rounds 1-2, 2 run(s) | 0.5 | 0.833 |"
    assert rt.table([a], ["curriculum/label_accuracy"], 2, 2).splitlines()[2] == "| 2 | 1 |"
