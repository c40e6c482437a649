"""Run untrusted, model-written Python snippets in a real sandbox, fast.

Quick use::

    from solver.sandbox import Sandbox

    with Sandbox(workers=4, timeout_s=2) as box:
        res = box.run("print(sum(range(10)))")
        assert res.status == "ok" and res.stdout == "45\\n"
        outs = box.run_many(["print(1)", "while True: pass"])
        print(box.isolation())   # which layers are in force on this host

Workers are warm zygotes started under bubblewrap; each snippet is a fresh
fork with its own PID and mount namespaces, scratch tmpfs, rlimits, no
capabilities and a seccomp filter.  As root each worker leases an
unprivileged uid that no other worker on the host holds (a lock file), so
the per-uid process limit counts its snippets alone.  Memory is bounded by
RLIMIT_AS per process plus, for memory that lives behind a file descriptor,
a second filter each snippet stacks: no memfd, vmsplice or IP sockets, no
growing socket or pipe buffers, and files only on the scratch tmpfs.  Hosts
without bubblewrap get a weaker fallback and a one-time warning.  See
docs/sandbox.md for the threat model and benchmarks.
"""

from ._pool import DEFAULT_PRELOAD, Sandbox
from ._types import (LIMIT_STATUSES, STATUSES, DeterminismReport, ExecResult,
                     IsolationUnavailable, SandboxError)

__all__ = [
    "DEFAULT_PRELOAD",
    "DeterminismReport",
    "ExecResult",
    "IsolationUnavailable",
    "LIMIT_STATUSES",
    "STATUSES",
    "Sandbox",
    "SandboxError",
]
