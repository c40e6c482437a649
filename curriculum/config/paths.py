"""What model.path and model.tokenizer_path name on disk: a directory, or a model id in the local
Hugging Face cache. Nothing is downloaded."""
from __future__ import annotations

from pathlib import Path


def local_model_dir(name: str, revision: str = "") -> Path | None:
    """The directory holding Hugging Face model ``name``: ``name`` itself, or the snapshot of model id
    ``name`` (org/model) at ``revision`` in the local Hugging Face cache; None if neither. Never downloads."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.is_absolute() or name.count("/") != 1:  # a path that is not there, not a model id
        return None
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, revision=revision or None, local_files_only=True))
    except (OSError, ValueError):  # not cached at that revision (LocalEntryNotFoundError), not a valid id
        return None


# Any of these makes a directory a tokenizer's (fast, its config, sentencepiece, BPE vocabulary).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def has_tokenizer(path: Path) -> bool:
    return any((path / f).is_file() for f in TOKENIZER_FILES)
