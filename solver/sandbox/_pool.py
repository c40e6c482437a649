"""Parent side of the sandbox: the worker pool and the public ``Sandbox``."""

from __future__ import annotations

import itertools
import json
import logging
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from . import _host, _seccomp
from . import _worker as proto
from ._types import (LIMIT_STATUSES, STATUSES, DeterminismReport, ExecResult,
                     IsolationUnavailable, SandboxError)

log = logging.getLogger("solver.sandbox")

#: Modules imported once by each zygote, so snippets get them for free.
#: Kept small on purpose: every page the zygote holds makes each fork dearer
#: (measured ~0.1-0.2 ms per MiB here), while an import in the child costs
#: 1-10 ms only for the snippets that use it.
DEFAULT_PRELOAD = (
    "bisect", "collections", "copy", "functools", "heapq", "itertools", "json",
    "math", "operator", "random", "re", "string", "typing",
)

# Extra time the parent grants a zygote past the snippet's own timeout before
# it declares the zygote hung and replaces it.
_PARENT_GRACE_S = 5.0
# Requests a worker holds at once: the running one and those queued behind.
_PIPELINE_DEPTH = 2
# A replacement that dies this many times in a row before becoming ready
# means the host cannot run workers at all.
_MAX_START_FAILURES = 3
_WORKER_SOURCE = Path(proto.__file__).read_text(encoding="utf-8")
# As root, each worker leases a uid of its own among uid_base + (0 .. 4095);
# the search starts at a pid-derived slot so that pools rarely contend.
_UID_SLOTS = 4096
_uid_counter = itertools.count(os.getpid() * 64)
_warned: set[str] = set()


class _WorkerDied(Exception):
    pass


class _Worker:
    """Parent-side handle of one zygote process."""

    def __init__(self, proc: subprocess.Popen, errfile, uid: int | None,
                 uid_lease=None):
        self.proc = proc
        self.errfile = errfile
        self.uid = uid
        self.uid_lease = uid_lease
        self.fd_in = proc.stdin.fileno()
        self.fd_out = proc.stdout.fileno()
        os.set_blocking(self.fd_in, False)
        os.set_blocking(self.fd_out, False)
        self.buf = bytearray()
        self.ready = False
        self.dead = False
        self.info: dict = {}
        self.started = time.monotonic()

    def send(self, frame: bytes, wait: bool = True) -> bool:
        """Write one request frame to the zygote.

        With ``wait=False`` the frame (at most ``PIPE_BUF`` bytes, which the
        kernel writes whole or not at all) goes only if the pipe takes it at
        once; returns whether it went.  With ``wait`` a zygote that stops
        reading for ``_PARENT_GRACE_S`` counts as dead.
        """
        if self.dead:  # never touch fd numbers the trainer may have reused
            raise _WorkerDied("worker is dead")
        view = memoryview(frame)
        try:
            while view:
                try:
                    view = view[os.write(self.fd_in, view):]
                except BlockingIOError:
                    if not wait:
                        return False
                    if not _wait_writable(self.fd_in, _PARENT_GRACE_S):
                        raise _WorkerDied("worker stopped reading") from None
        except OSError as exc:  # EPIPE: the zygote is gone
            raise _WorkerDied(str(exc)) from exc
        return True

    def pump(self) -> list[tuple[dict, list[bytes]]]:
        """Read what is available; return the complete frames, in order.

        Raises :class:`_WorkerDied` once the zygote is gone and every frame
        it wrote before going has been returned.
        """
        if self.dead:
            raise _WorkerDied("worker is dead")
        gone = None
        while True:
            try:
                chunk = os.read(self.fd_out, 1 << 20)
            except BlockingIOError:
                break
            except OSError as exc:
                gone = str(exc)
                break
            if not chunk:
                gone = "worker exited"
                break
            self.buf += chunk
        frames = []
        while (parsed := proto.parse_frame(self.buf)) is not None:
            header, blobs, used = parsed
            del self.buf[:used]
            frames.append((header, blobs))
        if gone is not None and not frames:
            raise _WorkerDied(gone)
        return frames

    def stderr_tail(self, limit: int = 4000) -> str:
        try:
            self.errfile.seek(0)
            return self.errfile.read().decode("utf-8", "replace")[-limit:]
        except (OSError, ValueError):
            return ""

    def kill(self) -> None:
        """Kill bwrap (or the fallback waiter) and, with it, the namespace."""
        if self.dead:
            return
        self.dead = True
        _kill_tree(self.proc)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.errfile.close()
        if self.uid_lease is not None:  # only now that its processes are gone
            self.uid_lease.close()


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # started with start_new_session
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except OSError:
        pass
    proc.wait()


def _finalize(owner: int, procs: list, leases: list, scratch: str | None,
              spawner) -> None:
    """Kill all workers; also runs at exit or GC if close() was never called."""
    if os.getpid() != owner:  # a fork of the trainer must not kill its pool
        return
    for proc in list(procs):
        if proc.poll() is None:
            _kill_tree(proc)
    for lease in list(leases):
        lease.close()
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    spawner.shutdown(wait=False)


class Sandbox:
    """A pool of warm, isolated Python workers for untrusted snippets.

    Each worker is a lean interpreter (``python -I -S``) started inside
    bubblewrap with no network, a read-only view of only ``/usr`` and the
    interpreter, and private PID/IPC/UTS namespaces.  It imports common
    stdlib modules once and then forks a fresh child per snippet, so a run
    costs one fork instead of an interpreter start.  See ``docs/sandbox.md``
    for the threat model.

    Args:
        workers: parallel workers (each runs one snippet at a time).
        timeout_s: default wall-clock limit per snippet.
        memory_mb: address-space limit (RLIMIT_AS) of each snippet process;
            memory it does not count (memfd, socket and pipe buffers) is
            refused by seccomp, files count against ``scratch_mb``.
        max_output_bytes: cap on stdout and on stderr; beyond it the snippet
            is stopped and the result is ``output_limit``.
        max_processes: processes and threads a snippet may have (RLIMIT_NPROC).
        max_file_mb: largest file a snippet may write (RLIMIT_FSIZE).
        scratch_mb: size of the snippet's private tmpfs (/tmp, its cwd).
        max_open_files: RLIMIT_NOFILE.
        python: interpreter for workers; default the trainer's base
            interpreter.  Snippets get its standard library only.
        use_bwrap: None picks bubblewrap when it works here; False forces the
            weaker fallback (for tests or hosts where bwrap misbehaves).
        strict: raise :class:`IsolationUnavailable` instead of warning when
            any isolation layer is missing.
        preload: modules each worker imports before forking snippets.
        uid_base: when the trainer runs as root, snippets run as
            ``uid_base + k`` (k < 4096), an unprivileged uid per worker that
            no other worker on this host has: each worker holds a lock file
            for its uid (in ``/run/lock/solver-sandbox-uids``) until it is
            killed or this process dies, and :class:`SandboxError` says so
            when all 4096 are taken.  None picks a base no account uses:
            2,000,000,000 on a host, 61,000 inside a container whose user
            namespace maps 64 Ki uids.
        start_timeout_s: how long a worker may take to come up.

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, workers: int = 2, timeout_s: float = 5.0,
                 memory_mb: int = 512, max_output_bytes: int = 1 << 20, *,
                 max_processes: int = 32, max_file_mb: int = 16,
                 scratch_mb: int = 64, max_open_files: int = 256,
                 python: str | None = None, use_bwrap: bool | None = None,
                 strict: bool = False,
                 preload: Sequence[str] = DEFAULT_PRELOAD,
                 uid_base: int | None = None, start_timeout_s: float = 60.0):
        if workers < 1 or timeout_s <= 0 or memory_mb < 32:
            raise ValueError("need workers >= 1, timeout_s > 0, memory_mb >= 32")
        self.workers = workers
        self.timeout_s = float(timeout_s)
        self.max_output_bytes = int(max_output_bytes)
        self._host = _host.probe_host()
        self._python = os.path.realpath(python) if python else _host.default_python()
        self._bwrap = self._choose_bwrap(use_bwrap)
        self._uid_base = _host.default_uid_base() if uid_base is None else uid_base
        self._uid_lock_dir = _host.uid_lock_dir()
        self._start_timeout = start_timeout_s
        self._scratch_root = None if self._bwrap else tempfile.mkdtemp(
            prefix="solver-sandbox-")
        self._cfg = self._worker_config(memory_mb, max_processes, max_file_mb,
                                        scratch_mb, max_open_files, preload)
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawn")
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._procs: list[subprocess.Popen] = []
        self._uid_leases: list = []
        self._closed = False
        self._owner = os.getpid()
        self._finalizer = weakref.finalize(self, _finalize, self._owner,
                                           self._procs, self._uid_leases,
                                           self._scratch_root, self._spawner)
        try:
            self._start_pool()
            self._isolation = self._measure_isolation()
        except BaseException:
            self.close()
            raise
        self._report_missing(strict)

    # -- public API ----------------------------------------------------------
    def run(self, code: str, stdin: str | bytes | None = None,
            timeout_s: float | None = None) -> ExecResult:
        """Run one snippet and return its :class:`ExecResult`."""
        return self._run_jobs([self._job(code, stdin, timeout_s)], 1)[0]

    def run_many(self, codes: Sequence[str],
                 stdins: Sequence[str | bytes | None] | None = None,
                 timeout_s: float | None = None) -> list[ExecResult]:
        """Run snippets in parallel on the pool; results are in input order.

        ``stdins``, if given, must match ``codes`` in length.  One snippet's
        failure (even killing its worker) never changes another's result.
        """
        if stdins is not None and len(stdins) != len(codes):
            raise ValueError("stdins must have one entry per code")
        stdins = stdins if stdins is not None else [None] * len(codes)
        jobs = [self._job(c, s, timeout_s) for c, s in zip(codes, stdins)]
        return self._run_jobs(jobs, 1) if jobs else []

    def check_determinism(self, code: str, stdin: str | bytes | None = None,
                          timeout_s: float | None = None,
                          runs: int = 2) -> DeterminismReport:
        """Run ``code`` ``runs`` times and report whether the runs agree.

        Runs go to distinct workers when the pool has enough of them; each
        worker has its own hash seed, so output that depends on set or dict
        ordering of str keys is caught, as is unseeded randomness.
        """
        if runs < 2:
            raise ValueError("runs must be >= 2")
        job = self._job(code, stdin, timeout_s)
        results = tuple(self._run_jobs([job] * runs, min(runs, self.workers)))
        first = results[0]
        same = all((r.status, r.stdout, r.exit_code)
                   == (first.status, first.stdout, first.exit_code)
                   for r in results)
        limited = any(r.status in LIMIT_STATUSES for r in results)
        return DeterminismReport(same and not limited, results)

    def isolation(self) -> dict[str, bool | str]:
        """Isolation layers in force, measured from inside a worker.

        Each value is a short description (truthy) when the layer holds and
        ``False`` when it is missing on this host.
        """
        return dict(self._isolation)

    def close(self) -> None:
        """Kill every worker and its snippets; leaves no process behind."""
        with self._cond:
            self._closed = True
            self._idle.clear()
            workers, self._all = list(self._all), set()
            self._cond.notify_all()
        for worker in workers:
            worker.kill()
        self._finalizer()
        self._spawner.shutdown(wait=True)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- configuration -------------------------------------------------------
    def _choose_bwrap(self, use_bwrap: bool | None) -> bool:
        if use_bwrap and not self._host.bwrap:
            raise SandboxError("bubblewrap unusable here (%s); %s" % (
                self._host.bwrap_error or "not installed",
                _host.BWRAP_INSTALL_HINT))
        return bool(self._host.bwrap) if use_bwrap is None else use_bwrap

    def _worker_config(self, memory_mb, max_processes, max_file_mb,
                       scratch_mb, max_open_files, preload) -> dict:
        limits = {
            "memory_mb": int(memory_mb), "file_mb": int(max_file_mb),
            "open_files": int(max_open_files), "scratch_mb": int(scratch_mb),
            "scratch_inodes": 4096, "max_output_bytes": self.max_output_bytes,
            "nproc": self._nproc_limit(max_processes),
        }
        return {
            "limits": limits, "env": _host.SNIPPET_ENV, "preload": list(preload),
            "seccomp_hex": (_seccomp.build_filter(self._host.machine) or b"").hex(),
            "snippet_seccomp_hex": (_seccomp.build_snippet_filter(
                self._host.machine) or b"").hex(),
            "self_isolate": not self._bwrap,
            "shm_mount": not self._bwrap,  # bwrap links /dev/shm to /tmp
            "scratch_root": self._scratch_root or "/tmp",
            "hide": [] if self._bwrap else _host.hidden_dirs(),
            "expose": _host.interpreter_dirs(self._python),
        }

    def _nproc_limit(self, max_processes: int) -> int | None:
        """RLIMIT_NPROC value, or None where it would count foreign processes.

        As root each worker gets its own uid, so the count is exact.  Without
        root, kernels >= 5.14 count per user namespace (bwrap gives each
        worker one; it and the zygote take 3 slots); older ones count every
        process of the trainer's uid, where a limit would break the trainer.
        """
        if self._host.root:
            return max_processes
        if self._bwrap and self._host.kernel >= (5, 14):
            return max_processes + 3
        return None

    # -- worker lifecycle ----------------------------------------------------
    def _spawn(self) -> _Worker:
        """Start a zygote (from the spawner thread: see _popen)."""
        with self._cond:
            if self._closed:
                raise SandboxError("sandbox is closed")
        cfg = dict(self._cfg)
        uid = lease = None
        if self._host.root:
            uid, lease = _host.lease_uid(self._uid_base, _UID_SLOTS,
                                         next(_uid_counter) % _UID_SLOTS,
                                         self._uid_lock_dir)
            cfg.update(uid=uid, gid=uid)
        argv = [self._python, "-I", "-S", "-c", proto.BOOTSTRAP, _WORKER_SOURCE,
                json.dumps(cfg)]
        if self._bwrap:
            argv = _host.bwrap_argv(self._host, self._python,
                                    self._cfg["limits"]["scratch_mb"]) + argv
        errfile = tempfile.TemporaryFile()
        try:
            proc = self._spawner.submit(self._popen, argv, errfile).result()
        except (OSError, RuntimeError) as exc:  # RuntimeError: spawner shut down
            errfile.close()
            if lease is not None:
                lease.close()
            raise SandboxError("cannot start a sandbox worker: %s" % exc) from exc
        worker = _Worker(proc, errfile, uid, lease)
        with self._cond:
            self._procs.append(proc)
            if lease is not None:
                self._uid_leases.append(lease)
            self._all.add(worker)
            if not self._closed:
                return worker
        worker.kill()
        raise SandboxError("sandbox is closed")

    @staticmethod
    def _popen(argv: list[str], errfile) -> subprocess.Popen:
        # Runs on the long-lived spawner thread: bwrap's --die-with-parent
        # (PR_SET_PDEATHSIG) fires when the *thread* that forked it exits.
        return subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errfile,
            env=dict(_host.SNIPPET_ENV), close_fds=True, start_new_session=True,
            cwd="/")

    def _start_pool(self) -> None:
        fresh = [self._spawn() for _ in range(self.workers)]
        deadline = time.monotonic() + self._start_timeout
        pending = list(fresh)
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError("workers did not start in %.0fs: %s" % (
                    self._start_timeout, pending[0].stderr_tail()))
            readable = _wait_readable([w.fd_out for w in pending], remaining)
            for worker in [w for w in pending if w.fd_out in readable]:
                try:
                    frames = worker.pump()
                except _WorkerDied:
                    raise SandboxError("sandbox worker failed to start:\n"
                                       + worker.stderr_tail()) from None
                if frames:
                    self._mark_ready(worker, frames[0][0])
                    pending.remove(worker)
        with self._cond:
            self._idle.extend(fresh)

    @staticmethod
    def _mark_ready(worker: _Worker, header: dict) -> None:
        if not header.get("ready"):
            raise SandboxError("unexpected first frame from worker: %r" % header)
        worker.ready = True
        worker.info = header.get("info", {})

    def _respawn(self, worker: _Worker) -> _Worker:
        """A fresh worker in place of ``worker`` (killed if still alive)."""
        worker.kill()
        with self._cond:
            self._all.discard(worker)
            if worker.proc in self._procs:
                self._procs.remove(worker.proc)
            if worker.uid_lease in self._uid_leases:
                self._uid_leases.remove(worker.uid_lease)
        return self._spawn()

    # -- running -------------------------------------------------------------
    def _job(self, code, stdin, timeout_s) -> dict:
        if not isinstance(code, str):
            raise TypeError("code must be str, got %s" % type(code).__name__)
        if isinstance(stdin, str):
            stdin = stdin.encode("utf-8", "surrogateescape")
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        if timeout <= 0:
            raise ValueError("timeout_s must be > 0")
        return {"code": code, "timeout_s": timeout, "stdin": stdin or b""}

    def _acquire(self, at_least: int, at_most: int) -> list[_Worker]:
        if os.getpid() != self._owner:
            raise SandboxError("a Sandbox cannot be used across fork(); "
                               "create one in each process")
        with self._cond:
            while len(self._idle) < at_least and not self._closed:
                self._cond.wait()
            if self._closed:
                raise SandboxError("sandbox is closed")
            taken = self._idle[:at_most]
            del self._idle[:at_most]
            return taken

    def _release(self, workers: list[_Worker]) -> None:
        with self._cond:
            if self._closed:
                return
            self._idle.extend(workers)
            self._cond.notify_all()

    def _run_jobs(self, jobs: list[dict], at_least: int) -> list[ExecResult]:
        held = self._acquire(at_least, min(len(jobs), self.workers))
        try:
            return _Dispatch(self, held, jobs).run()
        finally:
            self._release(held)

    # -- isolation report ----------------------------------------------------
    def _measure_isolation(self) -> dict[str, bool | str]:
        worker_info = self._idle[0].info
        paths = _probe_paths(self._cfg["expose"])
        job = self._job(_PROBE_SNIPPET, json.dumps(paths), 30.0)
        job["cap"] = 1 << 20  # whatever max_output_bytes the caller chose
        probe = self._run_jobs([job], 1)[0]
        if probe.status != "ok":
            raise SandboxError("isolation self-test failed (%s):\n%s" % (
                probe.status, probe.stderr))
        facts = json.loads(probe.stdout)
        return _layers(self, worker_info, facts)

    def _report_missing(self, strict: bool) -> None:
        missing = sorted(k for k, v in self._isolation.items() if not v)
        if not missing:
            return
        msg = missing_message(missing, self._host, self._bwrap,
                              bool(self._cfg["seccomp_hex"]))
        if strict:
            self.close()
            raise IsolationUnavailable(msg)
        if msg not in _warned:  # loudly, but once per process
            _warned.add(msg)
            log.warning(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=3)


# Layers that only the seccomp filters provide (sysv_ipc too, unless the
# zygote may create a fresh IPC namespace per snippet instead).
_SECCOMP_LAYERS = {"seccomp", "user_namespaces_blocked", "fd_memory_bounded",
                   "sysv_ipc"}


def missing_message(missing: list[str], host: _host.HostInfo, bwrap_used: bool,
                    seccomp_built: bool) -> str:
    """The warning for ``missing`` layers, naming what causes each of them.

    Only a missing bubblewrap is fixed by installing bubblewrap; a filter
    missing for this architecture or a process limit the kernel cannot
    scope need other remedies, so the message says which applies.
    """
    causes, left = [], set(missing)
    if not seccomp_built and left & _SECCOMP_LAYERS:
        causes.append(
            "%s: no seccomp filter for this architecture (%s; filters exist for "
            "%s), so snippets may call what the filters refuse elsewhere "
            "(user namespaces, bpf, io_uring, memfd, IP sockets, ...)" % (
                ", ".join(sorted(left & _SECCOMP_LAYERS)), host.machine,
                ", ".join(sorted(_seccomp.ARCHES))))
        left -= _SECCOMP_LAYERS
    if "rlimit_processes" in left and not host.root:
        causes.append(
            "rlimit_processes: not set, as it would count the non-root trainer's"
            " own processes; it needs root, or bubblewrap on a kernel >= 5.14 "
            "(which counts per user namespace; this one is %d.%d)" % host.kernel)
        left.discard("rlimit_processes")
    if not bwrap_used:
        if host.bwrap:
            why = "bubblewrap works here but use_bwrap=False was passed"
        else:
            why = _host.BWRAP_INSTALL_HINT
            if host.bwrap_error:
                why += " (bwrap failed: %s)" % host.bwrap_error
        causes.append("%s: the fallback without bubblewrap; %s" % (
            ", ".join(sorted(left)), why))
    elif left:
        causes.append(
            "%s: missing although bubblewrap and the filters are in use, which "
            "nothing in this host's configuration explains; isolation() and "
            "docs/sandbox.md describe each layer" % ", ".join(sorted(left)))
    return ("solver.sandbox: isolation layers NOT in force on this host: %s. "
            "Untrusted code is less contained than documented. %s."
            % (", ".join(missing), ". ".join(causes)))


class _Dispatch:
    """Drives one batch of jobs over a set of held workers.

    Each worker gets one job, then up to ``_PIPELINE_DEPTH - 1`` more queued
    behind it, so that the next request is already in its pipe when a
    snippet ends and no zygote idles while the trainer thread wakes up.
    A zygote answers its requests in order; only the first one still open
    is running, and its deadline starts when the answer before it arrives.

    A worker that dies or hangs gets its running job recorded as ``killed``
    and is replaced; jobs queued behind it never started and go back to the
    queue, so no other job is affected.  Held workers are never left with a
    job in flight: on any exception the busy ones are killed (and replaced by
    whoever next holds them), so a late answer can never be read as the
    answer to a later job.
    """

    def __init__(self, box: Sandbox, held: list[_Worker], jobs: list[dict]):
        self.box = box
        self.held = held
        self.jobs = jobs
        self.queue = deque(range(len(jobs)))
        self.results: list[ExecResult | None] = [None] * len(jobs)
        self.inflight: dict[_Worker, deque[int]] = {}
        self.deadline: dict[_Worker, float] = {}
        self.start_failures = 0

    def run(self) -> list[ExecResult]:
        try:
            while self.queue or self.inflight:
                self._revive()
                self._dispatch()
                self._wait()
        except BaseException:
            for worker in self.inflight:
                worker.kill()
            raise
        return self.results  # type: ignore[return-value]

    def _revive(self) -> None:
        """Replace workers found dead, including ones that died while idle."""
        for i, worker in enumerate(self.held):
            if worker not in self.inflight and worker.proc.poll() is not None:
                worker.kill()
            if worker.dead:
                self.held[i] = self.box._respawn(worker)

    def _dispatch(self) -> None:
        # First one job per free worker (check_determinism relies on this
        # to spread its runs), then the queued-behind ones, but only while
        # every worker will still find work when it frees up: a job queued
        # behind a slow snippet must not wait while another worker idles.
        for depth in range(_PIPELINE_DEPTH):
            for worker in self.held:
                if not self.queue or (depth and len(self.queue) <= len(self.held)):
                    return
                if (worker.ready and not worker.dead
                        and len(self.inflight.get(worker, ())) == depth):
                    self._send(worker)

    def _send(self, worker: _Worker) -> None:
        index = self.queue[0]
        job = self.jobs[index]
        frame = job.get("frame")
        if frame is None:
            header = {k: job[k] for k in ("code", "timeout_s", "cap") if k in job}
            frame = job["frame"] = proto.pack_frame(header, [job["stdin"]])
        queued = worker in self.inflight
        if queued and len(frame) > select.PIPE_BUF:
            return  # too big to queue without blocking: wait for the worker
        try:
            if not worker.send(frame, wait=not queued):
                return  # the pipe is full: leave the job for later
        except _WorkerDied:  # this job never started: run it elsewhere; the worker's own jobs fail or requeue
            self._fail(worker, "sandbox worker died; replaced")
            return
        self.queue.popleft()
        if not queued:
            self.inflight[worker] = deque()
            self.deadline[worker] = self._job_deadline(index)
        self.inflight[worker].append(index)

    def _job_deadline(self, index: int) -> float:
        return time.monotonic() + self.jobs[index]["timeout_s"] + _PARENT_GRACE_S

    def _wait(self) -> None:
        watch = [w for w in self.held
                 if not w.dead and (w in self.inflight or not w.ready)]
        if not watch:
            return
        wait = min(self._deadline(w) for w in watch) - time.monotonic()
        readable = _wait_readable([w.fd_out for w in watch], max(wait, 0))
        for worker in watch:
            if worker.fd_out in readable:
                self._pump(worker)
            elif self._deadline(worker) <= time.monotonic():
                self._fail(worker, "sandbox worker unresponsive; replaced")

    def _deadline(self, worker: _Worker) -> float:
        if worker in self.inflight:
            return self.deadline[worker]
        return worker.started + self.box._start_timeout

    def _pump(self, worker: _Worker) -> None:
        try:
            frames = worker.pump()
        except _WorkerDied:
            self._fail(worker, "sandbox worker died; replaced")
            return
        for header, blobs in frames:
            if not worker.ready:
                self.box._mark_ready(worker, header)
                self.start_failures = 0
                continue
            if worker not in self.inflight:  # an answer nobody asked for
                self._fail(worker, "sandbox worker broke protocol; replaced")
                return
            pending = self.inflight[worker]
            self.results[pending.popleft()] = _to_result(header, blobs)
            if pending:
                self.deadline[worker] = self._job_deadline(pending[0])
            else:
                del self.inflight[worker], self.deadline[worker]

    def _fail(self, worker: _Worker, why: str) -> None:
        """Record a killed result for the running job; requeue the rest."""
        pending = self.inflight.pop(worker, None)
        self.deadline.pop(worker, None)
        if pending:
            self.results[pending.popleft()] = ExecResult(
                "killed", "", why + "\n", None, 0.0)
            self.queue.extendleft(reversed(pending))
        elif not worker.ready:
            self.start_failures += 1
            if self.start_failures >= _MAX_START_FAILURES:
                tail = worker.stderr_tail()
                worker.kill()
                raise SandboxError("sandbox workers keep dying at start:\n" + tail)
        worker.kill()


def _wait_writable(fd: int, timeout: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return bool(poller.poll(int(timeout * 1000) + 1))


def _wait_readable(fds: list[int], timeout: float) -> set[int]:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    ms = int(timeout * 1000) + 1 if timeout > 0 else 0
    return {fd for fd, _ in poller.poll(ms)}


def _to_result(header: dict, blobs: list[bytes]) -> ExecResult:
    status = header.get("status")
    if status not in STATUSES:
        status = "killed"
    out, err = (blobs + [b"", b""])[:2]
    return ExecResult(status=status,
                      stdout=out.decode("utf-8", "replace"),
                      stderr=err.decode("utf-8", "replace"),
                      exit_code=header.get("exit_code"),
                      wall_s=float(header.get("wall_s", 0.0)))


# ------------------------------------------------------- isolation probing --
def _probe_paths(exposed: list[str]) -> dict:
    """Host paths the probe must NOT be able to see.

    Ancestors of the exposed interpreter (say /root for a pyenv install) are
    visible by design, so for those we check their other entries instead.
    """
    candidates = {os.getcwd(), sys.prefix, os.path.expanduser("~"),
                  "/etc/passwd", "/var", "/home", "/root",
                  str(Path(__file__).resolve())}
    hidden: set[str] = set()
    # /usr and the interpreter are visible by design; /tmp and /dev/shm are
    # the snippet's own scratch mounts inside, whatever they hold outside.
    by_design = ["/usr", "/tmp", "/dev/shm"] + list(exposed)
    for path in candidates:
        if path == "/" or not os.path.exists(path) or any(
                _host.under(path, d) for d in by_design):
            continue
        if not any(_host.under(e, path) for e in exposed):
            hidden.add(path)
            continue
        try:
            entries = sorted(os.listdir(path))[:50]
        except OSError:
            continue
        hidden.update(os.path.join(path, name) for name in entries
                      if not any(_host.under(e, os.path.join(path, name))
                                 for e in exposed))
    home = os.path.expanduser("~")
    writable = ["/", "/usr", "/etc", "/var/tmp", "/opt", "/run", "/dev"]
    if not any(_host.under(home, d) for d in by_design):
        writable.append(home)
    return {"hidden": sorted(hidden), "writable": writable}


_PROBE_SNIPPET = r'''
import ctypes, errno, fcntl, json, os, resource, socket, sys
want = json.load(sys.stdin)
facts = {"uid": os.getuid(), "pid": os.getpid(), "env": sorted(os.environ)}
try:
    status = open("/proc/self/status").read()
    fields = dict(l.split(":", 1) for l in status.splitlines() if ":" in l)
    for key in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp"):
        facts[key] = fields.get(key, "").strip()
except OSError as exc:
    facts["status_error"] = str(exc)
facts["procs"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
facts["ifaces"] = [name for _, name in socket.if_nameindex()]
try:
    s = socket.socket(); s.setblocking(False)
    facts["connect_errno"] = s.connect_ex(("192.0.2.1", 80)); s.close()
except OSError as exc:  # the snippet filter refuses IP sockets outright
    facts["connect_errno"] = exc.errno
libc = ctypes.CDLL(None, use_errno=True)
def refused(call):
    try:
        ret = call()
    except OSError as exc:
        return exc.errno == errno.EPERM
    return ret == -1 and ctypes.get_errno() == errno.EPERM
pair, (r, w) = socket.socketpair(), os.pipe()
facts["fd_memory_refused"] = [name for name, call in (
    ("memfd", lambda: os.memfd_create("probe")),
    ("vmsplice", lambda: libc.vmsplice(-1, None, 0, 0)),
    ("ip_socket", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)),
    ("socket_buffer", lambda: pair[0].setsockopt(socket.SOL_SOCKET,
                                                 socket.SO_RCVBUF, 1 << 22)),
    ("pipe_size", lambda: fcntl.fcntl(w, 1031, 1 << 20)),  # F_SETPIPE_SZ
) if refused(call)]
facts["userns_errno"] = 0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno()
shm = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE, IPC_CREAT
facts["sysv_errno"] = ctypes.get_errno() if shm < 0 else 0
if shm >= 0:
    libc.shmctl(shm, 0, None)  # IPC_RMID
def writable(path):
    path += os.urandom(6).hex()
    try:
        with open(path, "x") as f:
            f.write("x")
    except OSError:
        return False
    os.unlink(path)  # the fallback has no private view; leave no litter
    return True
facts["root_writable"] = [p for p in want["writable"]
                          if writable(os.path.join(p, ".sandbox_probe_"))]
facts["scratch_writable"] = writable("probe_")
facts["visible"] = [p for p in want["hidden"] if os.path.exists(p)]
limits = {}
for name in ("CPU", "AS", "NPROC", "FSIZE", "NOFILE", "CORE"):
    limits[name] = resource.getrlimit(getattr(resource, "RLIMIT_" + name))[1]
facts["limits"] = limits
print(json.dumps(facts))
'''


def _layers(box: Sandbox, info: dict, facts: dict) -> dict[str, bool | str]:
    """Turn the probe's observations into the ``isolation()`` report."""
    host, cfg = box._host, box._cfg
    limits, lim = facts["limits"], cfg["limits"]
    inf = resource.RLIM_INFINITY
    uid = facts["uid"]
    layers: dict[str, bool | str] = {
        "bubblewrap": ("%s (%s mode)" % (host.bwrap_version or "bwrap",
                                         "root" if host.root else "user-ns")
                       if box._bwrap else False),
        "network_isolated": ("private network namespace, loopback only"
                             if set(facts["ifaces"]) <= {"lo"}
                             and facts["connect_errno"] != 115 else False),
        "pid_namespace": ("fresh PID namespace per snippet"
                          if info.get("pidns") and facts["pid"] <= 3 else False),
        "sysv_ipc": ("snippets cannot create SysV IPC objects"
                     if facts["sysv_errno"] != 0 else
                     "fresh SysV IPC namespace per snippet"
                     if info.get("fresh_ipc") else False),
        "private_proc": ("/proc shows only sandbox processes"
                         if len(facts["procs"]) <= 3 else False),
        "scratch_dir": ("fresh %d MiB tmpfs per snippet" % lim["scratch_mb"]
                        if info.get("scratch_tmpfs") else
                        "temporary directory per snippet, removed afterwards"),
        "filesystem_readonly": (not facts["root_writable"]
                                and facts["scratch_writable"]) and
                               "read-only except the scratch tmpfs",
        "filesystem_hidden": ("only /usr and the interpreter are visible"
                              if not facts["visible"] else False),
        "unprivileged_uid": (("uid %d (dedicated, not root)" % uid
                              if host.root else "uid %d in a user namespace" % uid)
                             if uid != 0 else False),
        "capabilities_dropped": (facts.get("CapEff") == "0" * 16
                                 and facts.get("CapPrm") == "0" * 16) and
                                "no capabilities",
        "no_new_privs": facts.get("NoNewPrivs") == "1" and "set",
        "seccomp": facts.get("Seccomp") == "2" and "deny-list filter",
        "user_namespaces_blocked": facts["userns_errno"] != 0 and
                                   "snippets cannot create user namespaces",
        "rlimit_cpu": limits["CPU"] != inf and "CPU seconds: timeout + 2",
        "rlimit_memory": limits["AS"] == lim["memory_mb"] << 20 and
                         "%d MiB address space" % lim["memory_mb"],
        "fd_memory_bounded": (len(facts["fd_memory_refused"]) == 5
                              and info.get("scratch_tmpfs") and
                              "memfd, vmsplice, IP sockets, socket and pipe buffer "
                              "growth refused; files only on the %d MiB scratch "
                              "tmpfs" % lim["scratch_mb"]),
        "rlimit_processes": (limits["NPROC"] != inf and
                             "%d processes/threads" % limits["NPROC"]),
        "rlimit_file_size": limits["FSIZE"] == lim["file_mb"] << 20 and
                            "%d MiB per file" % lim["file_mb"],
        "rlimit_open_files": limits["NOFILE"] == lim["open_files"] and
                             "%d descriptors" % lim["open_files"],
        "no_core_dumps": limits["CORE"] == 0 and "RLIMIT_CORE=0",
        "environment_scrubbed": (set(facts["env"]) <= set(cfg["env"]) | {
            "HOME", "TMPDIR"}) and "only PATH, LANG, USER, LOGNAME, HOME, TMPDIR",
        "wall_clock_timeout": "kills the snippet's whole PID namespace"
                              if info.get("pidns") else "kills the process group",
        "output_cap": "%d bytes each for stdout and stderr" % box.max_output_bytes,
    }
    return layers


