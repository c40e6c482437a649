"""A small seccomp-BPF deny list for the sandbox, built without libseccomp.

The filter is defence in depth: namespaces, rlimits and the uid switch already
contain a snippet; this removes kernel interfaces that sandbox escapes usually
go through (creating user namespaces, ptrace, bpf, userfaultfd, io_uring,
keyrings, perf events, module loading, the new mount API ...).  It also
refuses to create SysV shared memory, semaphores and message queues: nothing
a snippet legitimately needs (multiprocessing uses POSIX semaphores in
/dev/shm), and the one kind of object that would outlive a snippet and reach
the next one in the same worker.  That saves a fresh IPC namespace per
snippet, which cost more than anything else the zygote sets up.

The zygote installs it on itself once, so every snippet inherits it for free.
It therefore still allows what the zygote needs per snippet: ``unshare`` with
exactly CLONE_NEWPID, ``setns``, ``mount`` and ``umount2``.  Snippets hold no
capabilities, so the kernel refuses those calls to them anyway, and so does
the snippet filter below.

Denied calls fail with EPERM; ``clone3`` fails with ENOSYS so that libc falls
back to ``clone``, whose flags a classic filter can inspect.  A syscall from a
foreign ABI (i386 via ``int 0x80``, x32) kills the process, as those bypass
the number table.

A second, snippet-only filter (``build_snippet_filter``), stacked on the first
by each snippet just before its code runs, closes the ways to hold memory
that RLIMIT_AS does not count: pages behind a file descriptor rather than a
mapping.  It refuses ``memfd_create`` and ``memfd_secret`` (the zygote needs
the former, for stdin), ``vmsplice`` (pins user pages, whole huge pages
included, in a pipe), sockets other than unix and netlink ones (IP sockets
reach only the worker's own loopback, where TCP buffers grow by themselves to
megabytes per connection), growing socket buffers (``SO_SNDBUF``,
``SO_RCVBUF``) and pipes (``F_SETPIPE_SZ``).  What is left is bounded:
files live on the snippet's ``scratch_mb`` tmpfs, and each of at most
``max_open_files`` pipes and unix sockets keeps the kernel's default buffer
(64 KiB for a pipe, ``net.core.wmem_default`` for a socket).  It also refuses
the namespace and mount calls the first filter leaves to the zygote.
"""

from __future__ import annotations

import platform
import struct

_DENIED = (
    "pivot_root chroot ptrace process_vm_readv "
    "process_vm_writev kexec_load kexec_file_load init_module finit_module "
    "delete_module bpf perf_event_open userfaultfd keyctl add_key request_key "
    "io_uring_setup io_uring_enter io_uring_register open_by_handle_at "
    "name_to_handle_at swapon swapoff reboot acct quotactl syslog fsopen "
    "fsconfig fsmount fspick open_tree move_mount mount_setattr vhangup "
    "lookup_dcookie fanotify_init setdomainname sethostname settimeofday "
    "clock_settime adjtimex clock_adjtime shmget semget msgget"
).split()

# Refused to snippets only (see the module docstring).
_SNIPPET_DENIED = "memfd_create memfd_secret vmsplice unshare setns mount umount2".split()

# Checked against <asm/unistd_64.h> and <asm-generic/unistd.h>.
_X86_64 = dict(zip(_DENIED, (
    155, 161, 101, 310, 311, 246, 320, 175, 313, 176, 321,
    298, 323, 250, 248, 249, 425, 426, 427, 304, 303, 167, 168, 169, 163, 179,
    103, 430, 431, 432, 433, 428, 429, 442, 153, 212, 300, 171, 170, 164, 227,
    159, 305, 29, 64, 68)), clone=56, clone3=435, unshare=272,
    memfd_create=319, memfd_secret=447, vmsplice=278, setns=308, mount=165,
    umount2=166, socket=41, setsockopt=54, fcntl=72)
_AARCH64 = dict(zip(_DENIED, (
    41, 51, 117, 270, 271, 104, 294, 105, 273, 106, 280, 241,
    282, 219, 217, 218, 425, 426, 427, 265, 264, 224, 225, 142, 89, 60, 116,
    430, 431, 432, 433, 428, 429, 442, 58, 18, 262, 162, 161, 170, 112, 171,
    266, 194, 190, 186)), clone=220, clone3=435, unshare=97,
    memfd_create=279, memfd_secret=447, vmsplice=75, setns=268, mount=40,
    umount2=39, socket=198, setsockopt=208, fcntl=25)

ARCHES = {
    "x86_64": (0xC000003E, _X86_64),
    "amd64": (0xC000003E, _X86_64),
    "aarch64": (0xC00000B7, _AARCH64),
    "arm64": (0xC00000B7, _AARCH64),
}

# Every CLONE_NEW* flag (ns, cgroup, uts, ipc, user, pid, net, time).
_CLONE_NS_FLAGS = 0x7E020080
_CLONE_NEWPID = 0x20000000
_X32_BIT = 0x40000000

# Socket families a snippet may create: unix (socketpair, multiprocessing,
# asyncio) and netlink (glibc's if_nameindex and getaddrinfo use it).
_AF_UNIX, _AF_NETLINK = 1, 16
_SOL_SOCKET = 1
# SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE
_SOCKET_BUFFER_OPTS = (7, 8, 32, 33)
_F_SETPIPE_SZ = 1031

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL_PROCESS = 0x7FFF0000, 0x80000000
_ERRNO, _EPERM, _ENOSYS = 0x00050000, 1, 38
# Offsets into struct seccomp_data: nr, arch, then args[i] at 16 + 8 i; the
# low half comes first on little-endian, and int arguments are that half.
_NR, _ARCH, _ARG0_LO, _ARG1_LO, _ARG2_LO = 0, 4, 16, 24, 32


def _insn(code, k, jt=0, jf=0):
    return struct.pack("=HBBI", code, jt, jf, k)


def build_filter(machine: str | None = None) -> bytes | None:
    """Return the BPF program for ``machine`` (default: this host), or None.

    None means the architecture is not supported and no filter is applied;
    the sandbox then reports the seccomp layer as missing.
    """
    arch = ARCHES.get((machine or platform.machine()).lower())
    if arch is None:
        return None
    audit_arch, numbers = arch
    deny = _RET, _ERRNO | _EPERM
    prog = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ, audit_arch, jt=1),
        _insn(_RET, _KILL_PROCESS),
        _insn(_LD_W_ABS, _NR),
    ]
    if audit_arch == 0xC000003E:  # x32 syscalls share the arch, flag the nr
        prog += [_insn(_JGE, _X32_BIT, jf=1), _insn(_RET, _KILL_PROCESS)]
    for name in _DENIED:
        prog += [_insn(_JEQ, numbers[name], jf=1), _insn(*deny)]
    prog += [_insn(_JEQ, numbers["clone3"], jf=1),
             _insn(_RET, _ERRNO | _ENOSYS)]
    prog += [  # unshare: only the zygote's per-snippet PID namespace
        _insn(_JEQ, numbers["unshare"], jf=4),
        _insn(_LD_W_ABS, _ARG0_LO),
        _insn(_JEQ, _CLONE_NEWPID, jf=1),
        _insn(_RET, _ALLOW),
        _insn(*deny),
    ]
    prog += [
        _insn(_JEQ, numbers["clone"], jf=3),
        _insn(_LD_W_ABS, _ARG0_LO),
        _insn(_JSET, _CLONE_NS_FLAGS, jf=1),
        _insn(*deny),
        _insn(_RET, _ALLOW),
    ]
    return b"".join(prog)


def build_snippet_filter(machine: str | None = None) -> bytes | None:
    """The snippet-only filter for ``machine`` (see the module docstring), or None.

    It runs after :func:`build_filter`'s, which has already killed foreign
    ABIs; it checks the architecture again only to read the right numbers.
    """
    arch = ARCHES.get((machine or platform.machine()).lower())
    if arch is None:
        return None
    audit_arch, numbers = arch
    deny, allow = _insn(_RET, _ERRNO | _EPERM), _insn(_RET, _ALLOW)
    prog = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ, audit_arch, jt=1),
        _insn(_RET, _KILL_PROCESS),
        _insn(_LD_W_ABS, _NR),
    ]
    for name in _SNIPPET_DENIED:
        prog += [_insn(_JEQ, numbers[name], jf=1), deny]
    prog += [  # socket(family, ...): unix and netlink only
        _insn(_JEQ, numbers["socket"], jf=5),
        _insn(_LD_W_ABS, _ARG0_LO),
        _insn(_JEQ, _AF_UNIX, jt=1),
        _insn(_JEQ, _AF_NETLINK, jf=1),
        allow,
        deny,
    ]
    n = len(_SOCKET_BUFFER_OPTS)
    prog += [  # setsockopt(fd, SOL_SOCKET, SO_*BUF*, ...)
        _insn(_JEQ, numbers["setsockopt"], jf=5 + n),
        _insn(_LD_W_ABS, _ARG1_LO),
        _insn(_JEQ, _SOL_SOCKET, jf=1 + n),
        _insn(_LD_W_ABS, _ARG2_LO),
    ]
    prog += [_insn(_JEQ, opt, jt=n - i) for i, opt in enumerate(_SOCKET_BUFFER_OPTS)]
    prog += [allow, deny]
    prog += [  # fcntl(fd, F_SETPIPE_SZ, size); its last allow is the default
        _insn(_JEQ, numbers["fcntl"], jf=3),
        _insn(_LD_W_ABS, _ARG1_LO),
        _insn(_JEQ, _F_SETPIPE_SZ, jf=1),
        deny,
        allow,
    ]
    return b"".join(prog)
