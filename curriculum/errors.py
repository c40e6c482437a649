"""Errors a user can act on; the CLI prints them in one line and exits with code 2."""
from __future__ import annotations

import errno


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and the values."""


class DamagedCheckpoint(ConfigError):
    """A checkpoint whose manifest is intact but a file of which cannot be what the run wrote;
    the message names the file and what is wrong with it."""


class DiskFullError(OSError):
    """A write that ran out of space; ``strerror`` says how much is free, how much was needed and
    what to do. An OSError with ``filename`` set, so it reads like any other write that failed."""

    def __init__(self, path, message: str):
        super().__init__(errno.ENOSPC, message, str(path))

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


class UsageError(ValueError):
    """A command line asking for something that is not there (a role, a checkpoint); said in one line."""
