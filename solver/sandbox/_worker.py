"""Zygote process of :mod:`solver.sandbox`; this code runs *inside* the sandbox.

The parent starts one zygote per worker as
``python -I -S -c BOOTSTRAP <this file's source> <config json>``, normally
under bubblewrap.  It must use the standard library only: the ``solver`` package is
not visible in there.  The parent also imports this module for the framing
helpers (``pack_frame`` / ``parse_frame``) so that both ends share one codec.

Per snippet the zygote mounts a fresh tmpfs on /tmp (under bubblewrap
/dev/shm is a link to it) and forks once::

    zygote Z ── C: the snippet, PID 1 of a fresh PID namespace, with rlimits,
                   a dedicated uid when the host runs us as root, and no
                   capabilities; the seccomp filter (which also refuses SysV
                   IPC), no_new_privs and the empty bounding set are
                   inherited from Z, which set them up once; C then stacks
                   the snippet filter, which refuses fd-backed memory that
                   RLIMIT_AS does not count (memfd, IP sockets, growing
                   socket and pipe buffers, vmsplice).

C cannot see Z (different PID namespace), so it cannot signal or trace it.
C is PID 1 of its namespace: when it exits (or Z kills it on timeout), the
kernel kills every process left in the namespace, so background children
cannot outlive the snippet.
"""

import _thread
import atexit
import builtins
import ctypes
import gc
import io
import json
import os
import resource
import select
import signal
import struct
import sys
import time
import types

# ----------------------------------------------------------------- framing --
# A frame is: 4-byte big-endian length of a JSON header, the header, then raw
# byte blobs whose lengths the header lists under "blobs".
_LEN = struct.Struct(">I")
MAX_HEADER_BYTES = 1 << 24
THREAD_STACK_BYTES = 1 << 20  # each snippet thread's stack (prepare_interpreter)


def pack_frame(header, blobs=()):
    """Encode one frame (used by both ends)."""
    raw = json.dumps(dict(header, blobs=[len(b) for b in blobs])).encode()
    return b"".join([_LEN.pack(len(raw)), raw, *blobs])


def parse_frame(buf):
    """Decode one frame from the start of ``buf``.

    Returns ``(header, blobs, consumed)`` or ``None`` if ``buf`` does not yet
    hold a whole frame.
    """
    if len(buf) < _LEN.size:
        return None
    (hlen,) = _LEN.unpack_from(buf)
    if hlen > MAX_HEADER_BYTES:
        raise ValueError("sandbox frame header too large")
    end = _LEN.size + hlen
    if len(buf) < end:
        return None
    header = json.loads(bytes(buf[_LEN.size:end]))
    total = end + sum(header["blobs"])
    if len(buf) < total:
        return None
    blobs, pos = [], end
    for size in header["blobs"]:
        blobs.append(bytes(buf[pos:pos + size]))
        pos += size
    return header, blobs, total


def _read_exact(fd, n):
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd):
    """Blocking read of one frame from ``fd`` (zygote side)."""
    (hlen,) = _LEN.unpack(_read_exact(fd, _LEN.size))
    header = json.loads(_read_exact(fd, hlen))
    return header, [_read_exact(fd, size) for size in header["blobs"]]


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ------------------------------------------------------------ kernel calls --
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 22, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL, SECCOMP_MODE_FILTER = 4, 2

# Exit code the snippet child uses to report an uncaught MemoryError.
EXIT_MEMORY = 213
# Exit code of the snippet child when *our* setup code failed in it.
EXIT_SETUP = 214

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret):
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def _b(s):
    return None if s is None else os.fsencode(s)


def unshare(flags):
    _check(_libc.unshare(ctypes.c_int(flags)))


def setns(fd, nstype):
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)))


def mount(source, target, fstype, flags, data=None):
    _check(_libc.mount(_b(source), _b(target), _b(fstype),
                       ctypes.c_ulong(flags), _b(data)))


def prctl(option, arg2=0, arg3=0, arg4=0, arg5=0):
    return _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2),
                              ctypes.c_ulong(arg3), ctypes.c_ulong(arg4),
                              ctypes.c_ulong(arg5)))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


# ------------------------------------------------------------------ zygote --
class Zygote:
    """Forks one disposable, locked-down child per snippet."""

    def __init__(self, cfg, private_mounts, seccomp):
        self.cfg = cfg
        self.limits = cfg["limits"]
        self.env = cfg["env"]
        self.uid = cfg.get("uid")
        self.gid = cfg.get("gid")
        self.pidns_fd = self._probe_pidns()
        # Never mount unless the mount namespace is ours alone: as root in
        # the host namespace this would cover the host's /tmp.
        self.mounts = private_mounts and self._probe_mounts()
        # Without the filter refusing SysV IPC, a fresh IPC namespace per
        # snippet keeps shared memory and queues from reaching the next one.
        self.fresh_ipc = self.pidns_fd is not None and not seccomp
        # Loaded once here; each snippet stacks it on the inherited filter.
        hex_prog = seccomp and cfg.get("snippet_seccomp_hex")
        self.snippet_filter = load_filter(hex_prog) if hex_prog else None
        self.streams = make_streams()
        self.counter = 0
        self.rlimits = self._static_rlimits()
        self.max_fd = resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    # -- startup probes ------------------------------------------------------
    @staticmethod
    def _probe_pidns():
        """Return an fd of our PID namespace if we may create child ones.

        Tried in a throwaway child first: if unshare() worked but setns()
        back did not, our own later forks would land in the wrong namespace.
        """
        try:
            fd = os.open("/proc/self/ns/pid", os.O_RDONLY)
        except OSError:
            return None
        pid = os.fork()
        if pid == 0:
            try:
                unshare(CLONE_NEWPID)
                setns(fd, CLONE_NEWPID)
                os._exit(0)
            except BaseException:
                os._exit(1)
        if os.waitpid(pid, 0)[1] != 0:
            os.close(fd)
            return None
        return fd

    def _probe_mounts(self):
        """Can we mount a fresh tmpfs per snippet (and unmount it)?"""
        try:
            self._mount_scratch()
        except OSError:
            return False
        self._unmount_scratch()
        return True

    def _mount_scratch(self):
        uid = os.getuid() if self.uid is None else self.uid
        gid = os.getgid() if self.gid is None else self.gid
        opts = "size=%dm,nr_inodes=%d,uid=%d,gid=%d,mode=0700" % (
            self.limits["scratch_mb"], self.limits["scratch_inodes"], uid, gid)
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts)
        if not self.cfg.get("shm_mount"):
            return  # /dev/shm links to /tmp
        try:
            mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts)
        except OSError:
            _umount("/tmp")
            raise

    def _unmount_scratch(self):
        # MNT_DETACH: frees the tmpfs and everything the snippet left in it.
        if self.cfg.get("shm_mount"):
            _umount("/dev/shm")
        _umount("/tmp")

    # -- one snippet ---------------------------------------------------------
    def execute(self, header, blobs):
        """Run one request; return the response header and blobs."""
        timeout = float(header["timeout_s"])
        start = time.monotonic()
        scratch = self._enter_scratch()
        fds = []
        try:
            stdin_fd = self._stdin_fd(blobs[0] if blobs else b"")
            fds.append(stdin_fd)
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            fds += [out_r, out_w, err_r, err_w]
            sys.stderr.flush()
            pid = self._fork_snippet()
            if pid == 0:
                self._child_main(header["code"], timeout, scratch, stdin_fd,
                                 out_w, err_w)
            for fd in (stdin_fd, out_w, err_w):
                fds.remove(fd)
                os.close(fd)
            cap = header.get("cap", self.limits["max_output_bytes"])
            verdict = self._collect(pid, out_r, err_r, start + timeout,
                                    timeout, cap)
        finally:
            for fd in fds:
                os.close(fd)
            self._leave_scratch(scratch)
        verdict["wall_s"] = round(time.monotonic() - start, 6)
        out, err = verdict.pop("stdout"), verdict.pop("stderr")
        return verdict, [out, err]

    def _enter_scratch(self):
        if self.mounts:
            self._mount_scratch()
            return "/tmp"
        self.counter += 1
        path = os.path.join(self.cfg["scratch_root"], "run%d" % self.counter)
        _rmtree(path)
        os.mkdir(path, 0o700)
        if self.uid is not None:
            os.chown(path, self.uid, self.gid)
        return path

    def _leave_scratch(self, scratch):
        if self.mounts:
            self._unmount_scratch()
        else:
            _rmtree(scratch)

    @staticmethod
    def _stdin_fd(data):
        if not data:
            return os.open("/dev/null", os.O_RDONLY)
        fd = os.memfd_create("stdin")
        write_all(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

    def _fork_snippet(self):
        """Fork the snippet, as PID 1 of a new PID namespace when we can."""
        if self.pidns_fd is None:
            return os.fork()
        unshare(CLONE_NEWPID)
        try:
            pid = os.fork()
        except BaseException:
            setns(self.pidns_fd, CLONE_NEWPID)
            raise
        if pid:  # parent: unshare() allows one child namespace per reset
            setns(self.pidns_fd, CLONE_NEWPID)
        return pid

    def _child_main(self, code, timeout, scratch, stdin_fd, out_w, err_w):
        """C: lock ourselves down, then run the snippet."""
        try:
            # Own session and group, always: kill(0, sig) signals the caller's
            # process group *across* PID namespaces, and ours held the zygote.
            os.setsid()
            os.dup2(stdin_fd, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.closerange(3, self.max_fd)
            self._lock_down(timeout)
            os.chdir(scratch)  # after setuid: the scratch dir is mode 0700
        except BaseException as exc:
            hint = " (uid %s: is it mapped here? see uid_base)" % self.uid if (
                self.uid is not None) else ""
            os.write(2, ("sandbox setup failed: %r%s\n" % (exc, hint)).encode())
            os._exit(EXIT_SETUP)
        _run_snippet(code, scratch, self.env, self.streams)

    def _static_rlimits(self):
        lim = self.limits
        mb = 1024 * 1024
        rlimits = [
            (resource.RLIMIT_AS, lim["memory_mb"] * mb),
            (resource.RLIMIT_FSIZE, lim["file_mb"] * mb),
            (resource.RLIMIT_NOFILE, lim["open_files"]),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_MEMLOCK, 0),
            (resource.RLIMIT_MSGQUEUE, 0),
        ]
        if lim.get("nproc"):
            rlimits.append((resource.RLIMIT_NPROC, lim["nproc"]))
        # soft == hard: the snippet cannot raise them again
        return [(which, (value, value)) for which, value in rlimits]

    def _lock_down(self, timeout):
        """Limits, then identity and capabilities, then the snippet filter.

        The bounding set, no_new_privs and the worker's seccomp filter were
        settled once in the zygote and are inherited; the snippet filter
        (no memfd, IP sockets or buffer growth) goes last, as it refuses
        calls made above.
        """
        cpu = _cpu_limit(timeout)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # XCPU, KILL
        for which, value in self.rlimits:
            resource.setrlimit(which, value)
        if self.fresh_ipc:  # a PID namespace means we hold CAP_SYS_ADMIN
            unshare(CLONE_NEWIPC)
        if self.uid is not None:
            # From root to another uid: the kernel clears every capability.
            os.setgroups([])
            os.setresgid(self.gid, self.gid, self.gid)
            os.setresuid(self.uid, self.uid, self.uid)
        else:
            drop_capabilities()
        if self.snippet_filter is not None:
            install_filter(self.snippet_filter)

    def _collect(self, pid, out_r, err_r, deadline, timeout, cap):
        """Gather output until the snippet exits, overflows, or times out."""
        bufs = {out_r: bytearray(), err_r: bytearray()}
        exited = _ExitWatch(pid)
        reason = _pump_until_exit(exited, bufs, deadline, cap)
        if reason is not None:
            _kill(pid)
        status, cpu_s = exited.reap()
        if self.pidns_fd is None:
            _killpg(pid)  # no PID namespace: take the snippet's group down
        # With a PID namespace the whole tree is gone once PID 1 is reaped.
        for fd, buf in bufs.items():
            _drain(fd, buf, cap)
            if len(buf) > cap and reason is None:
                reason = "output_limit"
        if reason is None and os.WIFSIGNALED(status) and (
                cpu_s >= _cpu_limit(timeout) - 0.05):
            reason = "timeout"  # RLIMIT_CPU: CPU time, not wall time, ran out
        return _verdict(reason, status, bufs[out_r], bufs[err_r], cap)


def _pump_until_exit(exited, bufs, deadline, cap):
    """Read the snippet's pipes until it exits; or say why we must kill it."""
    poller = select.poll()
    for fd in list(bufs) + ([exited.fd] if exited.fd is not None else []):
        poller.register(fd, select.POLLIN)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        ms = max(1, int(remaining * 1000 + 0.999))
        events = poller.poll(ms if exited.fd is not None else min(ms, 5))
        for fd, _ in events:
            if fd not in bufs:
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                poller.unregister(fd)
                continue
            bufs[fd] += data
            if len(bufs[fd]) > cap:
                return "output_limit"
        pidfd_fired = exited.fd is None or any(fd == exited.fd for fd, _ in events)
        if pidfd_fired and exited.done():
            return None


def _cpu_limit(timeout):
    return int(timeout) + 2


class _ExitWatch:
    """Tells when a child exited: a pidfd if the kernel has them, else polling."""

    def __init__(self, pid):
        self.pid = pid
        self.status = None
        self.cpu_s = 0.0
        try:
            self.fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.fd = None

    def done(self):
        if self.status is not None:
            return True
        pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        if pid == 0:
            return False
        self._record(status, usage)
        return True

    def reap(self):
        if self.status is None:
            _, status, usage = os.wait4(self.pid, 0)
            self._record(status, usage)
        if self.fd is not None:
            os.close(self.fd)
        return self.status, self.cpu_s

    def _record(self, status, usage):
        self.status = status
        self.cpu_s = usage.ru_utime + usage.ru_stime


def _umount(path):
    _check(_libc.umount2(_b(path), ctypes.c_int(MNT_DETACH)))


def drop_bounding_set():
    """Shrink the bounding set (needs CAP_SETPCAP, so call before setuid)."""
    for cap in range(64):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:
            break  # EINVAL past the last cap, or EPERM without CAP_SETPCAP


def drop_capabilities():
    """Empty the ambient, effective, permitted and inheritable sets."""
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data))


def _verdict(reason, status, out, err, cap):
    truncated = len(out) > cap or len(err) > cap
    result = {"stdout": bytes(out[:cap]), "stderr": bytes(err[:cap]),
              "truncated": truncated}
    if reason is not None:
        result.update(status=reason, exit_code=-signal.SIGKILL)
    elif status is None:
        result.update(status="killed", exit_code=None)
    elif os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        result.update(status=_signal_status(sig, err), exit_code=-sig)
    else:
        code = os.WEXITSTATUS(status)
        if code == EXIT_MEMORY:
            result.update(status="memory", exit_code=1)
        elif code == EXIT_SETUP:
            result.update(status="killed", exit_code=code)
        else:
            result.update(status="ok" if code == 0 else "error", exit_code=code)
    return result


def _signal_status(sig, err):
    if sig == signal.SIGXCPU:
        return "timeout"  # RLIMIT_CPU: CPU time, not wall time, ran out
    # Allocation failures inside C code tend to end in abort/segfault.
    tail = bytes(err[-4096:])
    if sig in (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS) and (
            b"MemoryError" in tail or b"Cannot allocate memory" in tail
            or b"out of memory" in tail):
        return "memory"
    return "killed"


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _killpg(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _drain(fd, buf, cap):
    """Read what is left in a pipe without blocking (writers may linger)."""
    os.set_blocking(fd, False)
    try:
        while len(buf) <= cap:
            data = os.read(fd, 1 << 16)
            if not data:
                return
            buf += data
    except BlockingIOError:
        pass


def _rmtree(path):
    """Remove a scratch dir even if the snippet chmod-ed things shut."""
    if not os.path.lexists(path):
        return
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
        for name in dirs:
            full = os.path.join(root, name)
            try:
                os.chmod(full, 0o700, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
            try:
                os.rmdir(full) if not os.path.islink(full) else os.unlink(full)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


# ----------------------------------------------------------------- snippet --
def _run_snippet(code, scratch, env, streams):
    """C: execute ``code`` as ``__main__`` would run under ``python -c``.

    Everything here runs in a fresh fork, where the first write to any page
    copies it; so the zygote prepared all it could (environment, streams,
    sys.argv, sys.path) in ``prepare_interpreter`` and we touch little.
    """
    if scratch != "/tmp":  # no per-snippet tmpfs: a directory of its own
        os.environ.update(HOME=scratch, TMPDIR=scratch)
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    rc = _exec_main(code, main)
    os._exit(_finish(rc))


def prepare_interpreter(env):
    """Zygote: set up, once, the interpreter state every snippet starts from."""
    _KEEP.extend([sys.stdin, sys.stdout, sys.stderr])  # their fds are 0-2
    os.environ.clear()
    os.environ.update(env, HOME="/tmp", TMPDIR="/tmp")
    sys.argv[:] = ["-c"]
    sys.path.insert(0, "")  # as python -c: the cwd, i.e. the scratch dir
    # A thread's stack counts against RLIMIT_AS at its full size (8 MiB by default): 1 MiB, as
    # macOS's secondary threads have, lets 16 threads start at 256 MiB (docs/sandbox.md).
    _thread.stack_size(THREAD_STACK_BYTES)


def make_streams():
    """Text streams over fds 0-2, as the snippet's sys.stdin/stdout/stderr.

    Built once in the zygote while fds 0-2 are pipes, so that what io caches
    at construction (seekability, buffer size) matches the child's pipes.
    """
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    r, w = os.pipe()
    try:
        for fd, target in ((r, 0), (w, 1), (w, 2)):
            os.dup2(fd, target)
        return (
            open(0, "r", encoding="utf-8", errors="surrogateescape",
                 closefd=False),
            open(1, "w", encoding="utf-8", errors="surrogateescape",
                 closefd=False),
            io.TextIOWrapper(open(2, "wb", closefd=False), encoding="utf-8",
                             errors="backslashreplace", line_buffering=True),
        )
    finally:
        for fd, target in zip(saved, (0, 1, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.close(r)
        os.close(w)


def _exec_main(code, main):
    """Run the snippet; on an uncaught exception print it as python -c would.

    ``sys.__excepthook__`` is CPython's C traceback printer: it needs no
    imports and little memory, and like ``python -c`` it shows no source
    lines for code that has no file.
    """
    try:
        exec(compile(code, "<snippet>", "exec"), main.__dict__)
        return 0
    except SystemExit as exc:
        return _system_exit_code(exc)
    except MemoryError as exc:
        main.__dict__.clear()  # free the snippet's data so we can report
        _print_exception(exc)
        return EXIT_MEMORY
    except BaseException as exc:  # noqa: BLE001 - report like the interpreter
        _print_exception(exc)
        return 1


def _print_exception(exc):
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code is _exec_main.__code__:
        tb = tb.tb_next  # hide our own frame, as python -c has none
    try:
        # The C hook prints exc.__traceback__, not its tb argument.
        sys.__excepthook__(type(exc), exc.with_traceback(tb), tb)
    except BaseException:
        pass


def _system_exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _finish(rc):
    """Interpreter-shutdown steps a snippet may rely on, then flush."""
    try:
        threading = sys.modules.get("threading")
        if threading is not None and threading.active_count() > 1:
            threading._shutdown()  # wait for non-daemon threads, like python
        if atexit._ncallbacks() > _ATEXIT_BASELINE:
            atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            if rc == 0 and stream is sys.stdout:
                rc = 120  # what CPython returns when the final flush fails
    return rc


_KEEP = []
_ATEXIT_BASELINE = atexit._ncallbacks()


# ------------------------------------------------------------------- setup --
def _take_protocol_fds():
    """Move the protocol pipes off fds 0/1 so that nothing else writes them."""
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    return proto_in, proto_out


def _self_isolate(cfg):
    """Fallback without bubblewrap: new namespaces for the whole worker.

    The process that called us becomes a tiny waiter; the zygote continues in
    the forked child, which is PID 1 of a fresh PID namespace.  Returns a
    description of what could be unshared.
    """
    base = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    uid, gid = os.getuid(), os.getgid()
    got = None
    for flags in ([base] if uid == 0 else [base | CLONE_NEWUSER]) + [CLONE_NEWNET, 0]:
        try:
            unshare(flags)
            got = flags
            break
        except OSError:
            continue
    if got & CLONE_NEWUSER:
        _write_id_maps(uid, gid)
    if got & CLONE_NEWNS:
        mount(None, "/", None, MS_REC | MS_PRIVATE)
    if got & CLONE_NEWPID:
        pid = os.fork()
        if pid:
            _wait_and_mirror(pid)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        try:
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except OSError:
            pass
    return {"net": bool(got & CLONE_NEWNET), "pid": bool(got & CLONE_NEWPID),
            "mount": bool(got & CLONE_NEWNS), "user": bool(got & CLONE_NEWUSER)}


def _write_id_maps(uid, gid):
    with open("/proc/self/uid_map", "w") as f:
        f.write("%d %d 1" % (uid, uid))
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/gid_map", "w") as f:
        f.write("%d %d 1" % (gid, gid))


def _wait_and_mirror(pid):
    """The outer waiter: exit when the zygote does."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _expose_paths(cfg):
    """Fallback as root: hide home directories, keep the interpreter visible.

    The snippet's uid cannot traverse e.g. /root, where pyenv or conda often
    live, so we bind the interpreter's directories onto a tmpfs that replaces
    the hidden directory.
    """
    done = []
    keep = [p for p in cfg.get("expose", []) if os.path.isdir(p)]
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in keep}
    for hidden in cfg.get("hide", []):
        if not os.path.isdir(hidden):
            continue
        mount("tmpfs", hidden, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        done.append(hidden)
        for path, fd in fds.items():
            if path == hidden or path.startswith(hidden.rstrip("/") + "/"):
                os.makedirs(path, 0o755, exist_ok=True)
                mount("/proc/self/fd/%d" % fd, path, None, MS_BIND | MS_REC)
                mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    for fd in fds.values():
        os.close(fd)
    return done


def _install_seccomp(hex_prog):
    """Filter ourselves; every snippet inherits it (see _seccomp.py)."""
    if not hex_prog:
        return False
    install_filter(load_filter(hex_prog))
    return True


def load_filter(hex_prog):
    """A seccomp program ready for ``install_filter``: (sock_fprog, its code)."""
    buf = ctypes.create_string_buffer(bytes.fromhex(hex_prog))
    return _SockFprog(len(buf.raw) // 8, ctypes.addressof(buf)), buf


def install_filter(loaded):
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(loaded[0]))


def _trim_heap():
    """Give free heap back to the kernel: fewer pages to copy at each fork."""
    try:
        _libc.malloc_trim(0)
    except AttributeError:  # not glibc
        pass


def _preload(modules):
    for name in modules:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing module is not fatal
            pass


#: The ``python -c`` program that starts a zygote: it runs this file's source
#: (argv[1]) as a module that is *not* ``__main__``.  Measured: forks of a
#: zygote living in ``__main__`` copy ~50% more pages per snippet.
BOOTSTRAP = (
    "import sys, types\n"
    "m = types.ModuleType('solver_sandbox_zygote')\n"
    "sys.modules[m.__name__] = m\n"
    "exec(compile(sys.argv[1], '<solver.sandbox zygote>', 'exec'), m.__dict__)\n"
    "m.main(sys.argv[2])\n"
)


def main(cfg_json):
    """Zygote entry point; ``cfg_json`` is the parent's worker config."""
    cfg = json.loads(cfg_json)
    proto_in, proto_out = _take_protocol_fds()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the trainer
    info = {}
    private_mounts = not cfg.get("self_isolate")  # bubblewrap made one
    if cfg.get("self_isolate"):
        info["namespaces"] = _self_isolate(cfg)
        private_mounts = info["namespaces"]["mount"]
        if private_mounts:
            try:
                info["hidden"] = _expose_paths(cfg)
            except OSError as exc:
                info["hidden_error"] = str(exc)
    prctl(PR_SET_DUMPABLE, 0)  # snippets must not ptrace or read our /proc
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # inherited: exec can never gain privileges
    drop_bounding_set()  # inherited too; our own permitted set is unaffected
    _preload(cfg.get("preload", []))
    seccomp = _install_seccomp(cfg.get("seccomp_hex"))
    zygote = Zygote(cfg, private_mounts, seccomp)
    info.update(pidns=zygote.pidns_fd is not None, scratch_tmpfs=zygote.mounts,
                fresh_ipc=zygote.fresh_ipc, seccomp=seccomp, pid=os.getpid())
    _trim_heap()
    prepare_interpreter(cfg["env"])
    global _ATEXIT_BASELINE
    _ATEXIT_BASELINE = atexit._ncallbacks()
    gc.freeze()  # children must not touch (and so copy) our objects in GC
    write_all(proto_out, pack_frame({"ready": True, "info": info}))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # for snippets
    while True:
        try:
            header, blobs = read_frame(proto_in)
        except EOFError:
            os._exit(0)
        try:
            response, out = zygote.execute(header, blobs)
        except Exception as exc:  # noqa: BLE001 - our failure, not the snippet's
            response = {"status": "killed", "exit_code": None, "wall_s": 0.0,
                        "truncated": False}
            out = [b"", ("sandbox error: %r\n" % (exc,)).encode()]
        write_all(proto_out, pack_frame(response, out))


if __name__ == "__main__":
    main(sys.argv[1])
