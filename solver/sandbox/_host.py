"""What the host offers, and how to start a zygote on it."""

from __future__ import annotations

import errno
import fcntl
import functools
import io
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ._types import SandboxError

BWRAP_INSTALL_HINT = (
    "install bubblewrap for full isolation: "
    "apt-get install -y --no-install-recommends bubblewrap "
    "(or: dnf install bubblewrap / apk add bubblewrap)"
)

#: Environment every snippet sees; nothing from the trainer's environment.
SNIPPET_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "USER": "sandbox",
    "LOGNAME": "sandbox",
    # glibc reserves 64 MiB of address space per malloc arena, one per thread up to 8 x cores: with
    # RLIMIT_AS a handful of threads ran out before any of them allocated (docs/sandbox.md).
    "MALLOC_ARENA_MAX": "2",
}

# Top-level paths that merged-/usr distributions make symlinks into /usr.
_USR_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")


@dataclass(frozen=True)
class HostInfo:
    """Facts about the host that decide how workers are started."""

    bwrap: str | None
    bwrap_version: str | None
    bwrap_error: str | None
    bwrap_options: frozenset[str]
    root: bool
    kernel: tuple[int, int]
    machine: str


@functools.lru_cache(maxsize=None)
def probe_host(bwrap_path: str | None = None) -> HostInfo:
    """Find bubblewrap and check that it can actually create a sandbox here."""
    bwrap = bwrap_path or shutil.which("bwrap")
    version = error = None
    options: frozenset[str] = frozenset()
    if bwrap:
        version, options, error = _try_bwrap(bwrap)
        if error:
            bwrap = None
    return HostInfo(bwrap=bwrap, bwrap_version=version, bwrap_error=error,
                    bwrap_options=options, root=os.geteuid() == 0,
                    kernel=_kernel_version(), machine=platform.machine())


def _kernel_version() -> tuple[int, int]:
    parts = platform.release().split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()))
    except (IndexError, ValueError):
        return 0, 0


def _try_bwrap(bwrap: str) -> tuple[str | None, frozenset[str], str | None]:
    """Run a trivial sandbox: (version, options, None) or (.., .., reason)."""
    options: frozenset[str] = frozenset()
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True,
                             text=True, timeout=10)
        version = out.stdout.strip() or None
        usage = subprocess.run([bwrap, "--help"], capture_output=True,
                               text=True, timeout=10)
        options = frozenset(w for w in usage.stdout.split() if w.startswith("--"))
        argv = [bwrap, "--unshare-all", "--die-with-parent",
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        if os.geteuid() != 0:
            argv.append("--unshare-user")
        probe = subprocess.run(argv + ["true"], capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, options, str(exc)
    if probe.returncode != 0:
        return version, options, probe.stderr.strip() or "bwrap exited %d" % (
            probe.returncode)
    return version, options, None


def default_python() -> str:
    """The trainer's base interpreter (not a venv shim), fully resolved."""
    exe = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(exe)


def interpreter_dirs(python: str) -> list[str]:
    """Directories the interpreter needs: its prefix (stdlib, libpython)."""
    exe = os.path.realpath(python)
    if exe == default_python():
        prefix = os.path.realpath(sys.base_prefix)
    else:
        prefix = str(Path(exe).parent.parent)
    dirs = [prefix]
    if not under(exe, prefix):
        dirs.append(os.path.dirname(exe))
    return [d for d in dirs if not under(d, "/usr")]


def under(path: str, root: str) -> bool:
    """True if ``path`` is ``root`` or inside it (purely lexical)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def bwrap_argv(host: HostInfo, python: str, scratch_mb: int) -> list[str]:
    """The bubblewrap command line a zygote runs under.

    As root we run bwrap in its privileged mode (no user namespace) and keep
    exactly the capabilities the zygote needs to build per-snippet PID and
    mount namespaces and to switch the snippet to an unprivileged uid.  As an
    ordinary user we ask for a user namespace instead; there the same
    capabilities only reach objects that namespace owns.
    """
    # --as-pid-1: the zygote, not a bwrap helper, is PID 1 of the worker's
    # namespace; it is non-dumpable, so snippets cannot reach it via /proc.
    argv = [host.bwrap, "--die-with-parent", "--new-session", "--as-pid-1",
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--cap-drop", "ALL",
            "--cap-add", "CAP_SYS_ADMIN"]
    if host.root:
        # SETUID/SETGID: switch snippets to their own uid; SETPCAP: empty
        # the bounding set; KILL: stop snippets that no longer share our uid.
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                 "--cap-add", "CAP_SETPCAP", "--cap-add", "CAP_KILL"]
    else:
        # Not --disable-userns: it nests a second user namespace, where the
        # zygote would lose its capabilities over the PID and mount
        # namespaces.  Our seccomp filter stops snippets creating one.
        argv += ["--unshare-user"]
    argv += ["--clearenv"]
    for key, value in SNIPPET_ENV.items():
        argv += ["--setenv", key, value]
    argv += ["--ro-bind", "/usr", "/usr"]
    for link in _USR_LINKS:
        argv += _mirror_top_level(link)
    for path in interpreter_dirs(python):
        # --dir first: parents bwrap creates for a bind are mode 0700,
        # which the unprivileged snippet uid could not traverse.
        argv += ["--dir", path, "--ro-bind", path, path]
    argv += ["--proc", "/proc"] + _dev_argv()
    if "--size" in host.bwrap_options:  # bubblewrap >= 0.5
        argv += ["--size", str(scratch_mb << 20)]
    argv += ["--tmpfs", "/tmp", "--remount-ro", "/", "--chdir", "/tmp"]
    return argv


def _dev_argv() -> list[str]:
    """A minimal read-only /dev.

    Not bwrap's --dev: without root that makes bwrap nest a second user
    namespace (to mount devpts), where the zygote would lose its
    capabilities over the PID and mount namespaces.
    """
    argv = ["--tmpfs", "/dev"]
    for node in ("null", "zero", "full", "random", "urandom"):
        argv += ["--dev-bind", "/dev/" + node, "/dev/" + node]
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        argv += ["--symlink", "/proc/self/fd/%d" % i, "/dev/" + name]
    # /dev/shm is the snippet's scratch tmpfs too: one mount per snippet.
    return argv + ["--symlink", "/proc/self/fd", "/dev/fd",
                   "--symlink", "/tmp", "/dev/shm", "--remount-ro", "/dev"]


def _mirror_top_level(path: str) -> list[str]:
    if os.path.islink(path):
        return ["--symlink", os.readlink(path), path]
    if os.path.isdir(path):
        return ["--ro-bind", path, path]
    return []


def default_uid_base() -> int:
    """First of 4096 uids for snippets: mapped here, and used by no account.

    On a host (or a container without a user namespace) every uid exists, and
    2e9 is far above any account or systemd's dynamic users (61184-65519).  In
    a user namespace only the mapped uids exist; usually 0-65535, where 61000
    sits below the dynamic-user range and above regular accounts.
    """
    try:
        lines = Path("/proc/self/uid_map").read_text().splitlines()
        ranges = [tuple(map(int, line.split())) for line in lines if line.strip()]
    except (OSError, ValueError):
        return 61000
    high = 2_000_000_000
    if any(inside <= high and high + 4096 <= inside + count
           for inside, _, count in ranges):
        return high
    return 61000


def uid_lock_dir() -> str:
    """Host-wide directory of the snippet uids' lock files (uids are leased as root)."""
    parent = "/run/lock"
    if not (os.path.isdir(parent) and os.access(parent, os.W_OK)):
        parent = tempfile.gettempdir()
    return os.path.join(parent, "solver-sandbox-uids")


def lease_uid(base: int, slots: int, start: int, lock_dir: str) -> tuple[int, io.FileIO]:
    """Lock the first free uid of ``base + (start .. start + slots - 1) % slots``.

    Returns the uid and the open lock file; the uid is ours until that file
    is closed or this process dies (an flock), so no two pools on this host
    ever share one: RLIMIT_NPROC counts per uid, and a shared uid would let
    one pool's fork-heavy snippet starve another's.
    """
    try:
        _check_lock_dir(lock_dir)
        for k in range(slots):
            uid = base + (start + k) % slots
            lease = _try_lock(os.path.join(lock_dir, "uid-%d.lock" % uid))
            if lease is not None:
                return uid, lease
    except OSError as exc:
        raise SandboxError("cannot lease a snippet uid in %s: %s" % (
            lock_dir, exc)) from exc
    raise SandboxError(
        "no free snippet uid: all %d uids from uid_base %d are held by other "
        "sandbox workers on this host (lock files in %s, each naming its "
        "holder's pid); close some pools, or pass another uid_base"
        % (slots, base, lock_dir))


def _try_lock(path: str) -> io.FileIO | None:
    """The open, flock-ed lock file at ``path``, or None if another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise
    lease = io.FileIO(fd, "r+")
    lease.truncate(0)
    lease.write(b"%d\n" % os.getpid())  # who holds it, for a person to see
    return lease


def _check_lock_dir(path: str) -> None:
    """Create ``path``; refuse it unless only we can write it (we run as root)."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid()
            or info.st_mode & 0o022):
        raise SandboxError(
            "uid lock directory %s is not a directory that only uid %d can "
            "write; remove it and retry" % (path, os.geteuid()))


def hidden_dirs() -> list[str]:
    """Directories the fallback hides behind an empty tmpfs (secrets live there)."""
    home = os.path.expanduser("~")
    dirs = ["/root", "/home"]
    if home not in dirs and not under(home, "/home") and home != "/":
        dirs.append(home)
    return [d for d in dirs if os.path.isdir(d)]
