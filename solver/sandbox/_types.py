"""Result types of :mod:`solver.sandbox`."""

from __future__ import annotations

from dataclasses import dataclass

#: Every value ``ExecResult.status`` can take.
STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "killed")

#: Statuses that mean a sandbox limit, not the snippet's own logic, decided
#: the outcome; such a run is not a reproducible reference answer.
LIMIT_STATUSES = frozenset({"timeout", "memory", "output_limit", "killed"})


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start workers, was closed ...)."""


class IsolationUnavailable(SandboxError):
    """``strict=True`` was asked for, but some isolation layer is missing."""


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one snippet.

    Attributes:
        status: one of :data:`STATUSES`:
            ``ok`` exit code 0; ``error`` uncaught exception or nonzero exit;
            ``timeout`` wall-clock or CPU limit; ``memory`` MemoryError or
            death by allocation failure; ``output_limit`` stdout or stderr
            passed ``max_output_bytes`` (the snippet is stopped, output
            truncated); ``killed`` died by another signal, or the sandbox
            worker died under it.
        stdout: captured standard output (UTF-8, undecodable bytes replaced),
            at most ``max_output_bytes`` bytes before decoding.
        stderr: captured standard error (tracebacks land here), same cap.
        exit_code: exit status; negative signal number if killed by a signal
            (``-9`` after a timeout or output-limit kill); None if unknown.
        wall_s: wall-clock seconds from fork to the end of collection.
    """

    status: str
    stdout: str
    stderr: str
    exit_code: int | None
    wall_s: float

    @property
    def ok(self) -> bool:
        """True when the snippet ran to completion with exit code 0."""
        return self.status == "ok"


@dataclass(frozen=True)
class DeterminismReport:
    """Outcome of :meth:`Sandbox.check_determinism`.

    ``deterministic`` is True when every run produced the same status,
    stdout and exit code, and no run was decided by a sandbox limit.
    """

    deterministic: bool
    results: tuple[ExecResult, ...]

    @property
    def result(self) -> ExecResult:
        """The first run, usable as the reference answer when deterministic."""
        return self.results[0]
