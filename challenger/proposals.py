"""Parsing challenger output into tasks, where garbage becomes a rejection, not an error."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

T = TypeVar("T")

MAX_PROPOSAL_CHARS = 4096


@dataclass
class Parsed(Generic[T]):
    """One proposal after parsing: ``task`` is set or ``reason`` says why not; ``well_formed``: a rejection
    that parsed but failed when run (the environment raised an exception with ``well_formed`` true)."""

    text: str
    task: T | None
    reason: str = ""
    well_formed: bool = False

    @property
    def valid(self) -> bool:
        return self.task is not None


def parse_proposals(texts: Sequence[str], parse: Callable[[str], T], *, finished: Sequence[bool] | None = None) -> list[Parsed[T]]:
    """Apply the environment's ``parse`` to each text; any exception is a rejection.

    ``finished[i]`` False (the model hit the token limit before its end-of-text)
    rejects the proposal as ``truncated`` without parsing it.
    """
    out: list[Parsed[Any]] = []
    for i, text in enumerate(texts):
        if finished is not None and not finished[i]:
            out.append(Parsed(text, None, "truncated"))
            continue
        if len(text) > MAX_PROPOSAL_CHARS:
            out.append(Parsed(text, None, "too_long"))
            continue
        try:
            out.append(Parsed(text, parse(text)))
        except Exception as exc:  # noqa: BLE001 - model output must never crash the trainer
            out.append(Parsed(text, None, _reason(exc), well_formed=bool(getattr(exc, "well_formed", False))))
    return out


def _reason(exc: Exception) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    refusal = any(c.__name__ == "InvalidProposal" for c in type(exc).__mro__)  # its subclasses too
    return msg[:80] if refusal and msg else f"{name}: {msg[:60]}".rstrip(": ")
