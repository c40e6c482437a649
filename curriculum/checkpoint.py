"""Atomic, verified checkpoints: write to a temporary directory, fsync, rename, move ``latest``.

Layout of ``checkpoints/<name>/``: whatever the writer puts there plus
``state.json`` (counters) and ``manifest.json`` (size and sha256 of every file),
written last. A checkpoint whose manifest is missing or does not match is
skipped on load with a warning naming it. A write that fails leaves nothing behind
(the temporary directory is removed, the previous checkpoint and ``latest`` are
untouched); one that ran out of space says so (``DiskFullError``).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Iterator

from curriculum.errors import DamagedCheckpoint, DiskFullError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
# round_0002 (after round 2) or round_0002+003 (three stages into round 3): names sort in run order.
NAME = re.compile(r"round_\d{4}(\+\d{3})?")
# A failed write with less free space than this left is taken to have run out of it: torch.save
# reports a full disk as "basic_ios::clear: iostream error", with no errno to tell.
LOW_SPACE = 64 << 20


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_tree(root: Path) -> None:
    for p in sorted(root.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # two writing processes never share one
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _tree_bytes(root: Path) -> int:
    """Bytes in the files under ``root`` (0 if it is gone)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


def _free_bytes(path: Path) -> int:
    """Free bytes on the filesystem of ``path`` (or of its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def _out_of_space(exc: BaseException, free: int, still_needed: int) -> bool:
    """Whether a failed write ran out of space: an OSError says so (ENOSPC, EDQUOT) somewhere in the
    chain; torch.save and safetensors do not, so less space left than the checkpoint still needed
    (or than LOW_SPACE) counts too."""
    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__ or seen.__context__
    return free < max(still_needed, LOW_SPACE)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class CheckpointManager:
    """Owns ``run_dir/checkpoints``: saving, pruning to ``keep_last``, finding the newest good one."""

    def __init__(self, directory: Path, keep_last: int = 3):
        self.dir = Path(directory)
        self.keep_last = keep_last

    def save(self, name: str, write: Callable[[Path], None], state: dict) -> Path:
        """Call ``write(tmp_dir)``, add state and manifest, then rename into place."""
        with self.writing(name) as tmp:
            write(tmp)
            return self.finish(name, tmp, state)

    @contextlib.contextmanager
    def writing(self, name: str) -> Iterator[Path]:
        """``with manager.writing(name) as tmp:`` fill ``tmp`` and call ``finish(name, tmp, state)``.

        If the block fails, ``tmp`` is removed (a half-written checkpoint must not keep the space
        it took), the previous checkpoint and ``latest`` stay as they were, and the exception goes
        on; one that ran out of space becomes a DiskFullError saying how much is free, roughly how
        much the checkpoint needs, and how to resume.
        """
        _check_name(name)
        previous = self.names()[-1:]  # what it is about to replace, for an estimate of its size
        needed = _tree_bytes(self.dir / previous[0]) if previous else 0
        tmp = self._tmp(name)
        try:
            yield self.begin(name)
        except BaseException as exc:
            written, free = _tree_bytes(tmp), _free_bytes(self.dir)
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, Exception) and _out_of_space(exc, free, needed - written):
                raise self._disk_full(name, previous[0] if previous else None, needed, written) from exc
            raise

    def _disk_full(self, name: str, previous: str | None, needed: int, written: int) -> DiskFullError:
        free = _mb(_free_bytes(self.dir))
        run = self.dir.parent
        if previous is None:
            what = (f"{free} free, the checkpoint needs more than {_mb(written)} (written before the disk filled); "
                    "there is no earlier checkpoint: free space and run the same command again")
        else:
            what = (f"{free} free, the checkpoint needs about {_mb(needed)} (the size of {previous}); the previous "
                    f"checkpoint {previous} is intact; free space and resume with `selfplay train --resume {run}`")
        return DiskFullError(self.dir / name, f"no space left on device: {what}")

    def begin(self, name: str) -> Path:
        """A fresh temporary directory for checkpoint ``name`` (filled by the caller, then ``finish``)."""
        _check_name(name)
        tmp = self._tmp(name)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        return tmp

    def _tmp(self, name: str) -> Path:
        return self.dir / f".tmp-{name}"

    def finish(self, name: str, tmp: Path, state: dict) -> Path:
        """Add state and manifest to ``tmp``, fsync, rename it to ``name`` and move ``latest``."""
        (tmp / "state.json").write_text(json.dumps(state, indent=1))
        files = {str(p.relative_to(tmp)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
                 for p in sorted(tmp.rglob("*")) if p.is_file()}
        (tmp / MANIFEST).write_text(json.dumps({"name": name, "files": files}, indent=1))
        _fsync_tree(tmp)
        final = self.dir / name
        if final.is_symlink():  # a link (to nothing, or elsewhere): replaced, never followed
            log.warning("replacing %s, a link to %s, with the checkpoint written now", final, os.readlink(final))
            final.unlink()
        elif final.exists():  # a resumed run rewrites a checkpoint it had already written
            shutil.rmtree(final)
        os.replace(tmp, final)
        atomic_write(self.dir / "latest", name + "\n")
        self._prune()
        return final

    def names(self) -> list[str]:
        """Checkpoint names, oldest first (names sort in training order). Only names of the exact
        pattern count: a copy such as ``round_0002.bak`` is never taken for a checkpoint."""
        if not self.dir.is_dir():
            return []
        return sorted(p.name for p in self.dir.iterdir() if p.is_dir() and NAME.fullmatch(p.name))

    def verify(self, path: Path) -> str | None:
        """None if complete and intact, else what is wrong.

        The manifest must list every file in the checkpoint, ``state.json`` among them, each
        with its size and SHA-256, and every file must match: an empty or edited manifest,
        a file added, missing, truncated or flipped, all make the checkpoint unusable.
        """
        manifest = path / MANIFEST
        if not manifest.is_file():
            return "missing manifest.json"
        try:
            files = json.loads(manifest.read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"unreadable manifest: {type(exc).__name__}: {exc}"
        if not isinstance(files, dict) or "state.json" not in files or not all(
                isinstance(m, dict) and isinstance(m.get("bytes"), int) and isinstance(m.get("sha256"), str)
                for m in files.values()):
            return "manifest.json is not a list of files with their sizes and checksums (state.json among them)"
        try:
            present = {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()} - {MANIFEST}
            if present != set(files):
                return f"files differ from the manifest: {sorted(present ^ set(files))[:5]}"
            for rel, meta in files.items():
                p = path / rel
                if p.stat().st_size != meta["bytes"]:
                    return f"{rel} has {p.stat().st_size} bytes, manifest says {meta['bytes']}"
                if _sha256(p) != meta["sha256"]:
                    return f"{rel} does not match its checksum"
        except OSError as exc:
            return f"unreadable: {exc}"
        return None

    def intact(self) -> Iterator[Path]:
        """Intact checkpoints, newest first; corrupt or incomplete ones are skipped with a warning,
        as are checkpoint names that are links to nothing and a ``latest`` naming no checkpoint."""
        if self.dir.is_dir():
            for p in sorted(self.dir.iterdir()):
                if NAME.fullmatch(p.name) and p.is_symlink() and not p.exists():
                    log.warning("skipping checkpoint %s: a link to %s, which does not exist", p, os.readlink(p))
            with contextlib.suppress(OSError, ValueError):
                named = (self.dir / "latest").read_text(encoding="utf-8").strip()
                if named and named not in self.names():
                    log.warning("%s names checkpoint %s, which is not there; resuming from the newest one that is",
                                self.dir / "latest", named)
        for name in reversed(self.names()):
            path = self.dir / name
            problem = self.verify(path)
            if problem is None:
                yield path
            else:
                log.warning("skipping checkpoint %s: %s", path, problem)

    def latest(self) -> Path | None:
        """Newest intact checkpoint; corrupt or incomplete ones are skipped with a warning."""
        return next(self.intact(), None)

    def _prune(self) -> None:
        for name in self.names()[: -self.keep_last]:
            shutil.rmtree(self.dir / name, ignore_errors=True)
        for p in self.dir.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True)


def _check_name(name: str) -> None:
    if not NAME.fullmatch(name):
        raise ValueError(f"checkpoint name {name!r} does not match {NAME.pattern}")


def read_state(path: Path) -> dict:
    """A checkpoint's ``state.json``; a ``DamagedCheckpoint`` naming it if unreadable or not an object."""
    f = Path(path) / "state.json"
    try:
        state = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DamagedCheckpoint(f"{f}: unreadable ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, dict):
        raise DamagedCheckpoint(f"{f}: not a JSON object")
    return state
