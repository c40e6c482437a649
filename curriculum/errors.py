"""Errors a user can act on; the CLI prints them in one line and exits with code 2."""
from __future__ import annotations


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and the values."""
