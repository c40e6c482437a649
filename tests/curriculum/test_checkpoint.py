import errno
import io
import logging
import re
import subprocess
from pathlib import Path

import pytest
import torch

from curriculum import checkpoint
from curriculum.checkpoint import CheckpointManager, read_state
from curriculum.errors import DiskFullError


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


# --------------------------------------------------------------------------- full disks


def filler(size: int):
    """A writer of ``size`` bytes that runs out of space (ENOSPC, as the OS says it) after ``budget``."""
    def write(d, budget=None):
        with open(d / "weights.bin", "wb") as f:
            if budget is not None and budget < size:
                f.write(b"\0" * budget)
                raise OSError(errno.ENOSPC, "No space left on device", str(d / "weights.bin"))
            f.write(b"\0" * size)

    return write


def assert_previous_intact(m, tmp_path, name="round_0000"):
    assert m.names() == [name] and m.latest().name == name and m.verify(m.latest()) is None
    assert (tmp_path / "ck" / "latest").read_text().strip() == name
    assert not list((tmp_path / "ck").glob(".tmp-*")), "the failed write keeps its space"


def test_disk_full_says_where_how_much_and_how_to_resume(tmp_path):
    m = CheckpointManager(tmp_path / "ck")
    write = filler(3_000_000)
    m.save("round_0000", write, {"round": 0})
    with pytest.raises(DiskFullError) as err:
        m.save("round_0001", lambda d: write(d, budget=1_000_000), {"round": 1})
    msg = str(err.value)
    assert msg.startswith(f"cannot write {tmp_path / 'ck' / 'round_0001'}: no space left on device: ")
    assert re.search(r"[0-9.]+ MB free, the checkpoint needs about 3\.0 MB \(the size of round_0000\)", msg), msg
    assert "the previous checkpoint round_0000 is intact" in msg
    assert f"free space and resume with `selfplay train --resume {tmp_path}`" in msg
    assert err.value.errno == errno.ENOSPC and isinstance(err.value.__cause__, OSError)
    assert_previous_intact(m, tmp_path)


def test_torch_save_on_a_full_disk_is_named_too(tmp_path, monkeypatch):
    """torch.save says only "basic_ios::clear: iostream error": the free space left tells."""
    m = CheckpointManager(tmp_path / "ck")
    m.save("round_0000", filler(3_000), {"round": 0})

    def torch_save_fails(d):
        (d / "part").write_bytes(b"\0" * 1_000)
        raise RuntimeError("basic_ios::clear: iostream error")

    monkeypatch.setattr(checkpoint, "_free_bytes", lambda path: 0)
    with pytest.raises(DiskFullError, match="0.0 MB free, the checkpoint needs about 0.0 MB"):
        m.save("round_0001", torch_save_fails, {"round": 1})
    assert_previous_intact(m, tmp_path)


def test_a_failure_with_space_to_spare_stays_what_it_is(tmp_path, monkeypatch):
    m = CheckpointManager(tmp_path / "ck")
    m.save("round_0000", filler(3_000), {"round": 0})
    monkeypatch.setattr(checkpoint, "_free_bytes", lambda path: 10**12)

    def bug(d):
        (d / "part").write_bytes(b"\0" * 1_000)
        raise RuntimeError("a bug, not the disk")

    with pytest.raises(RuntimeError, match="a bug, not the disk"):
        m.save("round_0001", bug, {"round": 1})
    assert_previous_intact(m, tmp_path)


def test_the_first_checkpoint_on_a_full_disk(tmp_path):
    m = CheckpointManager(tmp_path / "ck")
    with pytest.raises(DiskFullError, match=r"needs more than 0\.5 MB \(written before the disk filled\); there is no "
                                            r"earlier checkpoint: free space and run the same command again"):
        m.save("round_0000", lambda d: filler(3_000_000)(d, budget=500_000), {"round": 0})
    assert m.names() == [] and not list((tmp_path / "ck").glob(".tmp-*"))


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    """A 1 MB filesystem: a real tmpfs where this process may mount one (root with CAP_SYS_ADMIN),
    else a directory where torch.save fails as it does on a full disk once 1 MB is used."""
    size, disk = 1 << 20, tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                      capture_output=True).returncode == 0:
        yield disk
        subprocess.run(["umount", "--lazy", str(disk)], check=True)  # a failed torch.save may hold its file
        return
    real_save = torch.save

    def used():
        return sum(p.stat().st_size for p in disk.rglob("*") if p.is_file())

    def save(obj, path):
        buffer = io.BytesIO()
        real_save(obj, buffer)
        room = size - used()
        Path(path).write_bytes(buffer.getvalue()[: max(room, 0)])
        if room < buffer.tell():
            raise RuntimeError("basic_ios::clear: iostream error")

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(checkpoint, "_free_bytes", lambda path: size - used())
    yield disk


def test_a_real_full_disk_under_torch_save(small_disk):
    m = CheckpointManager(small_disk / "ck")

    def write(d):  # 0.6 MB: one checkpoint fits in the 1 MB disk, two do not
        torch.save({"w": torch.zeros(150_000)}, d / "weights.pt")

    m.save("round_0000", write, {"round": 0})
    with pytest.raises(DiskFullError) as err:
        m.save("round_0001", write, {"round": 1})
    assert re.search(r"0\.[0-9] MB free, the checkpoint needs about 0\.6 MB \(the size of round_0000\); the previous "
                     r"checkpoint round_0000 is intact", str(err.value)), str(err.value)
    assert_previous_intact(m, small_disk)
    assert torch.load(m.latest() / "weights.pt")["w"].shape == (150_000,)


def test_a_dangling_link_and_a_latest_naming_nothing_are_named(tmp_path, caplog):
    m = CheckpointManager(tmp_path / "ckpt", keep_last=5)
    m.save("round_0001", write_files(b"1"), {"round": 1})
    (m.dir / "round_0002").symlink_to(tmp_path / "gone")
    (m.dir / "latest").write_text("round_0003\n")
    with caplog.at_level(logging.WARNING):
        assert m.latest() == m.dir / "round_0001"
    assert f"skipping checkpoint {m.dir / 'round_0002'}: a link to {tmp_path / 'gone'}" in caplog.text
    assert "names checkpoint round_0003, which is not there" in caplog.text
    m.save("round_0002", write_files(b"2"), {"round": 2})  # rewritten in place of the link
    assert m.latest() == m.dir / "round_0002" and not (m.dir / "round_0002").is_symlink()
