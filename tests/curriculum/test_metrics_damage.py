"""A damaged metrics.jsonl or task log: a resume names every line it cannot keep, readers skip garbage with a warning."""
import json
import logging

import pytest

from curriculum.dashboard import load_records, per_round
from curriculum.monitor import Monitor

LINES = [json.dumps({"round": r, "phase": "round", "time": 0.0, "solver/reward": r / 10}) + "\n" for r in range(10)]


def damage(kind, path):
    data = "".join(LINES).encode()
    if kind == "last line cut":
        data = data[: len(data) - len(LINES[-1]) // 2]
    elif kind == "cut at 60%":
        data = data[: int(len(data) * 0.6)]
    elif kind == "garbage line":
        data = "".join(LINES[:4] + ["{garbage\n"] + LINES[5:]).encode()
    elif kind == "binary garbage":
        data = "".join(LINES[:4]).encode() + b"\xff\xfe\x00\x81\n" + "".join(LINES[5:]).encode()
    if kind != "missing":
        path.write_bytes(data)


@pytest.mark.parametrize("kind", ["last line cut", "cut at 60%", "garbage line", "binary garbage", "missing"])
def test_a_resume_names_the_lines_it_cannot_keep(tmp_path, caplog, kind):
    path = tmp_path / "metrics.jsonl"
    damage(kind, path)
    before = path.read_bytes() if path.exists() else None
    with caplog.at_level(logging.WARNING):
        m = Monitor(tmp_path, config={}, wandb_mode="disabled", keep_lines=len(LINES))
    m.close()
    assert str(path) in caplog.text and f"of the {len(LINES)} lines" in caplog.text
    if before is not None:  # the damaged file is kept, byte for byte
        (aside,) = tmp_path.glob("metrics.jsonl.damaged-*")
        assert aside.read_bytes() == before and str(aside) in caplog.text
    kept = path.read_text().splitlines() if path.exists() else []
    assert all(isinstance(json.loads(line), dict) for line in kept) and m.lines == len(kept)


def test_an_intact_file_is_cut_to_the_checkpoint_without_a_word(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(LINES))
    with caplog.at_level(logging.WARNING):
        Monitor(tmp_path, config={}, wandb_mode="disabled", keep_lines=6).close()
    assert path.read_text() == "".join(LINES[:6]) and not caplog.text and not list(tmp_path.glob("*.damaged-*"))


@pytest.mark.parametrize("kind", ["garbage line", "binary garbage"])
def test_readers_skip_a_garbage_line_with_a_warning(tmp_path, caplog, kind):
    path = tmp_path / "metrics.jsonl"
    damage(kind, path)
    with caplog.at_level(logging.WARNING):
        rows = per_round(path)
        records = load_records(path)
    assert sorted(rows) == [r for r in range(10) if r != 4] and len(records) == 9
    assert f"{path}: skipped 1 line(s)" in caplog.text and "lines [5]" in caplog.text


def test_a_task_log_of_binary_garbage_reads_as_empty_with_a_warning(tmp_path, caplog):
    path = tmp_path / "round_0001.jsonl"
    path.write_bytes(b"\x80\x81\xfe\xff" * 50 + b"\n" + b"\x00\xff" * 30 + b"\n")
    with caplog.at_level(logging.WARNING):
        assert load_records(path) == []
    assert str(path) in caplog.text


def test_a_torn_last_line_of_a_live_writer_is_skipped_quietly(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    damage("last line cut", path)
    with caplog.at_level(logging.WARNING):
        assert sorted(per_round(path)) == list(range(9))
    assert not caplog.text


def test_status_reads_alarms_past_binary_garbage(tmp_path, caplog):
    from curriculum.rundir import RunDir, active_alarms

    health = json.dumps({"round": 3, "phase": "health", "health/kl": 1.0, "health/plateau": 0.0, "health/active": 1})
    (tmp_path / "metrics.jsonl").write_bytes(health.encode() + b"\n\xff\xfe\x00\x81\n")
    with caplog.at_level(logging.WARNING):
        assert active_alarms(RunDir(tmp_path)) == ["kl"]
    assert "line(s) that are not JSON records: lines [2]" in caplog.text

