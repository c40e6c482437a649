"""``run.plugins``: the user's modules and .py files, imported before the config is checked so that
what they register (environments, frontier rewards, estimators, ...) counts."""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from curriculum.errors import ConfigError


def plugin_paths(plugins: list[str]) -> list[str]:
    """The entries as config.yaml keeps them: files as absolute paths, so a resume finds them from any directory."""
    for p in plugins:
        if "\0" in p:
            raise ConfigError(f"run.plugins ({p!r}) contains a NUL character")
    return [str(Path(p).resolve()) if is_file_plugin(p) else p for p in plugins]


def is_file_plugin(entry: str) -> bool:
    return entry.endswith(".py") or "/" in entry


def import_plugins(plugins: list[str]) -> None:
    """Import each ``run.plugins`` entry once: a dotted module name, or a path to a .py file
    (relative to the working directory). An entry that fails is a ConfigError naming it."""
    for entry in plugins:
        try:
            if is_file_plugin(entry):
                path = Path(entry).resolve()
                name = "selfplay_plugin_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
                if name in sys.modules:
                    continue
                if not path.is_file():
                    raise FileNotFoundError(f"no such file {str(path)!r}")
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[name]
                    raise
            else:
                importlib.import_module(entry)
        except Exception as exc:  # noqa: BLE001 - any failure is the plugin's, named as such
            raise ConfigError(f"run.plugins: cannot import {entry!r}: {type(exc).__name__}: {exc}") from exc
