"""Reading a config: defaults <- a bounded YAML file <- ``key=value`` overrides, then plugins and checks.

Everything a config can get wrong fails here or in ``validate``, before any model is built, as a
one-line ConfigError naming the key and the value: the file (size, UTF-8, YAML nesting and aliases),
unknown keys and the type of lists and mappings; then ``validate`` checks every value.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from curriculum.config.plugins import import_plugins, plugin_paths
from curriculum.config.schema import FREE_KEYS, Config, flatten, key_specs
from curriculum.errors import ConfigError


def check_keys(values: dict[str, Any], source: str) -> None:
    """Fail on the first unknown dotted key, naming the nearest valid ones, or on a list or mapping
    key given something else (OmegaConf's own error would not name the key)."""
    known = key_specs()
    groups = {k.rsplit(".", 1)[0] for k in known}
    for key, value in values.items():
        kind = known[key].type if key in known else ""
        if kind.startswith("list[") and not isinstance(value, list):
            raise ConfigError(f"{source}: {key} must be a list ([a, b, ...]), got {value!r}")
        if kind.startswith("dict[") and not isinstance(value, dict):
            raise ConfigError(f"{source}: {key} must be a mapping ({{name: value, ...}}), got {value!r}")
        if key in known or any(key.startswith(free + ".") for free in FREE_KEYS):
            continue
        if key in groups:
            raise ConfigError(f"{source}: {key!r} is a section, set one of its keys (e.g. {key}.<name>=...)")
        near = difflib.get_close_matches(key, list(known), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise ConfigError(f"{source}: unknown config key {key!r}{hint}")


# What no config needs, refused before it can cost memory or time: a config is a few kB with
# sections three keys deep (env.kwargs may nest further).
MAX_CONFIG_BYTES = 1 << 20
MAX_YAML_DEPTH = 32
# Values once aliases are expanded: a "billion laughs" bomb is a few lines whose aliases
# (*name) expand to billions of values, which OmegaConf would copy one by one.
MAX_YAML_VALUES = 10_000


class _YamlLimit(yaml.MarkedYAMLError):
    """Well-formed YAML beyond the limits above."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses documents nested deeper than MAX_YAML_DEPTH or holding more
    than MAX_YAML_VALUES values with every alias counted as the whole value it stands for."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._values = 0
        self._anchored: dict[str, int] = {}  # anchor -> values of the node it names

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)  # raises for an undefined alias
            if event.anchor not in self._anchored:  # the anchored value is not complete: it holds itself
                raise _YamlLimit(None, None, f"alias *{event.anchor} lies inside the value it names", event.start_mark)
            self._count(self._anchored[event.anchor], event)
            return node
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise _YamlLimit(None, None, f"nests deeper than {MAX_YAML_DEPTH} levels", event.start_mark)
        before = self._values
        self._count(1, event)
        node = super().compose_node(parent, index)
        self._depth -= 1
        if event.anchor is not None:
            self._anchored[event.anchor] = self._values - before
        return node

    def _count(self, n: int, event) -> None:
        self._values += n
        if self._values > MAX_YAML_VALUES:
            raise _YamlLimit(None, None, f"holds more than {MAX_YAML_VALUES} values once aliases (*name) are expanded",
                             event.start_mark)


def _load_yaml(text: str, source: str) -> Any:
    """``yaml.safe_load`` within the limits above; a failure is a one-line ConfigError naming ``source``."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        what = "YAML" if isinstance(exc, _YamlLimit) else "not valid YAML:"
        raise ConfigError(f"{source}: {what} {_yaml_message(exc)}") from exc


def _yaml_message(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line: the problem and where it is."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem and exc.problem_mark:
        mark = exc.problem_mark
        return f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def _read_config_file(path: Path) -> str:
    """The file's text: at most MAX_CONFIG_BYTES of UTF-8."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror}") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; a config is a few kB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}") from exc


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> ``{"a.b": 1, "c": "x"}`` with YAML typing of values."""
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = _load_yaml(value, f"override {key.strip()}") if value.strip() else ""
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults <- YAML file <- overrides, validated. Raises ConfigError."""
    base = OmegaConf.structured(Config)
    layers = []
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        data = _load_yaml(_read_config_file(path), str(path)) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
        check_keys(flatten(data), str(path))
        layers.append(data)
    ov = parse_overrides(overrides or [])
    check_keys(ov, "override")
    try:
        layers = [OmegaConf.create(data) for data in layers]
        for key, value in ov.items():
            layer = OmegaConf.create()
            OmegaConf.update(layer, key, value, force_add=True)
            layers.append(layer)
        merged = OmegaConf.merge(base, *layers)
        for key in FREE_KEYS & ov.keys():  # given whole, a free mapping replaces the file's (kwargs of another env)
            OmegaConf.update(merged, key, ov[key], merge=False)
        cfg: Config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(_omegaconf_message(exc)) from exc
    cfg.run.plugins = plugin_paths(cfg.run.plugins)
    import_plugins(cfg.run.plugins)
    from curriculum.config.validate import validate  # the registries, only when a config is checked

    validate(cfg)
    return cfg


def _omegaconf_message(exc: OmegaConfBaseException) -> str:
    key = getattr(exc, "full_key", None)
    first = str(exc).splitlines()[0]
    return f"config key {key!r}: {first}" if key else first


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
