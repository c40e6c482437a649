import logging

from curriculum.checkpoint import CheckpointManager, read_state


def write_files(content):
    def write(d):
        (d / "weights.bin").write_bytes(content)
        (d / "sub").mkdir()
        (d / "sub" / "a.json").write_text("{}")

    return write


def test_save_is_complete_and_pruned(tmp_path):
    m = CheckpointManager(tmp_path / "ck", keep_last=2)
    for r in range(4):
        m.save(f"round_{r:04d}", write_files(bytes([r]) * 100), {"round": r})
    assert m.names() == ["round_0002", "round_0003"]
    assert (tmp_path / "ck" / "latest").read_text().strip() == "round_0003"
    assert read_state(m.latest())["round"] == 3
    assert not list((tmp_path / "ck").glob(".tmp-*"))


def test_corrupt_newest_falls_back_with_warning(tmp_path, caplog):
    m = CheckpointManager(tmp_path / "ck", keep_last=5)
    for r in range(3):
        m.save(f"round_{r:04d}", write_files(bytes([r]) * 100), {"round": r})
    newest = tmp_path / "ck" / "round_0002"
    with open(newest / "weights.bin", "r+b") as f:
        f.truncate(10)
    (tmp_path / "ck" / "round_0001" / "manifest.json").unlink()
    with caplog.at_level(logging.WARNING):
        assert m.latest().name == "round_0000"
    assert "round_0002" in caplog.text and "manifest says 100" in caplog.text
    assert "round_0001" in caplog.text and "missing manifest" in caplog.text


def test_flipped_byte_detected(tmp_path):
    m = CheckpointManager(tmp_path / "ck")
    path = m.save("round_0000", write_files(b"x" * 64), {"round": 0})
    data = bytearray((path / "weights.bin").read_bytes())
    data[3] ^= 1
    (path / "weights.bin").write_bytes(bytes(data))
    assert "checksum" in m.verify(path)
    assert m.latest() is None


def test_interrupted_write_leaves_previous(tmp_path):
    m = CheckpointManager(tmp_path / "ck")
    m.save("round_0000", write_files(b"a"), {"round": 0})

    def crash(d):
        (d / "partial").write_text("x")
        raise KeyboardInterrupt

    try:
        m.save("round_0001", crash, {"round": 1})
    except KeyboardInterrupt:
        pass
    assert m.latest().name == "round_0000"
    assert m.names() == ["round_0000"]
