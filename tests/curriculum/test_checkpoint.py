import logging

import pytest

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


def _two_rounds(tmp_path):
    m = CheckpointManager(tmp_path / "ck", keep_last=5)
    for r in range(2):
        m.save(f"round_{r:04d}", write_files(bytes([r]) * 64), {"round": r})
    return m, tmp_path / "ck" / "round_0001"


@pytest.mark.parametrize("manifest,why", [
    ("", "unreadable manifest"),
    ("[]", "unreadable manifest"),
    ('{"files": {}}', "not a list of files"),
    ('{"files": []}', "not a list of files"),
    ('{"files": {"state.json": {"bytes": "12", "sha256": 3}}}', "not a list of files"),
    ('{"name": "round_0001"}', "unreadable manifest"),
])
def test_malformed_manifest_is_skipped_not_trusted(tmp_path, caplog, manifest, why):
    m, newest = _two_rounds(tmp_path)
    (newest / "manifest.json").write_text(manifest)
    with caplog.at_level(logging.WARNING):
        assert m.latest().name == "round_0000"
    assert why in caplog.text and "round_0001" in caplog.text


def test_a_file_the_manifest_does_not_list_makes_it_unusable(tmp_path):
    m, newest = _two_rounds(tmp_path)
    (newest / "extra.safetensors").write_bytes(b"\x00" * 8)
    assert "differ from the manifest" in m.verify(newest)
    assert m.latest().name == "round_0000"


def test_only_exact_checkpoint_names_count(tmp_path):
    import shutil

    m, newest = _two_rounds(tmp_path)
    shutil.copytree(newest, tmp_path / "ck" / "round_0002.bak")
    shutil.copytree(newest, tmp_path / "ck" / "round_9")
    assert m.names() == ["round_0000", "round_0001"] and m.latest().name == "round_0001"
    with pytest.raises(ValueError, match="does not match"):
        m.save("round_1.bak", write_files(b"x"), {})


def test_readers_create_nothing(tmp_path):
    m = CheckpointManager(tmp_path / "nowhere")
    assert m.names() == [] and m.latest() is None
    assert not (tmp_path / "nowhere").exists()
