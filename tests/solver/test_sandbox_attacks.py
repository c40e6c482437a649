"""Attack suite for solver.sandbox: each attempt must be contained, end with
the right status, and leave the sandbox serving correctly.

Attack code prints ``ESCAPED`` only if the attack worked.  Host-specific
values (paths, ports, pids) are filled in with ``%(name)s`` from the ``host``
fixture.  Needs full isolation: without bubblewrap these tests fail and say
how to install it.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from solver.sandbox import Sandbox, _pool
from solver.sandbox._seccomp import _AARCH64, _X86_64

from tests.solver.test_sandbox import (REPO, SLOW_S, make_box, run_batch,
                                       snippet_pids, wait_for)

# The limit for attacks that only the wall clock ends (status "timeout");
# every other attack must end by itself and gets SLOW_S as a hang guard.
TIMEOUT_S = 1.0
MEMORY_MB = 256
# What the memory attacks try to hold outside the snippet's address space.
HOLD_BYTES = 4 * MEMORY_MB << 20
CAP = 16 * 1024
SECRET = "sk-sandbox-test-%d" % os.getpid()
SYSCALLS = {"x86_64": _X86_64, "aarch64": _AARCH64}.get(platform.machine(), {})


@pytest.fixture(scope="module")
def box():
    # A credential in the trainer's environment must never reach a snippet.
    os.environ["SOLVER_SANDBOX_TEST_TOKEN"] = SECRET
    try:
        sandbox = make_box(workers=2, timeout_s=TIMEOUT_S, memory_mb=MEMORY_MB,
                           max_output_bytes=CAP)
    finally:
        del os.environ["SOLVER_SANDBOX_TEST_TOKEN"]
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """Things on the host a snippet must not reach: files, sockets, pids."""
    tmp = tmp_path_factory.mktemp("host")
    victim = tmp / "victim.txt"
    victim.write_text("original")
    listeners = {}
    tcp4 = socket.create_server(("127.0.0.1", 0))
    listeners["port4"] = tcp4.getsockname()[1]
    try:
        tcp6 = socket.create_server(("::1", 0), family=socket.AF_INET6)
        listeners["port6"] = tcp6.getsockname()[1]
    except OSError:  # host without IPv6: the snippet must fail all the same
        tcp6, listeners["port6"] = None, 9
    unix_path = tmp / "host.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(unix_path))
    unix.listen()
    abstract = socket.socket(socket.AF_UNIX)
    abstract_name = "\0solver-sandbox-test-%d" % os.getpid()
    abstract.bind(abstract_name)
    abstract.listen()
    servers = [s for s in (tcp4, tcp6, unix, abstract) if s is not None]
    for server in servers:
        server.setblocking(False)
    yield dict(listeners, victim=str(victim), unix_path=str(unix_path),
               abstract=abstract_name, test_file=str(Path(__file__).resolve()),
               prefix=sys.prefix, host_pid=os.getpid(), secret=SECRET,
               interp=os.path.realpath(sys.base_prefix), servers=servers)
    for server in servers:
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody from the sandbox ever connected
        server.close()
    assert victim.read_text() == "original"


def attack(name, code, status, *, stdin=None, expect=None, absent=()):
    """One case: the status it must end with, and what its stdout must show."""
    return pytest.param(code, status, stdin, expect, absent, id=name)


def timeout_for(status: str) -> float:
    return TIMEOUT_S if status == "timeout" else SLOW_S


def syscall(name, *args):
    """Snippet code printing ``rc errno`` of a raw syscall (by number)."""
    nr = SYSCALLS.get(name, -1)
    return ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.syscall(%d, %s), ctypes.get_errno())"
            % (nr, ", ".join(str(a) for a in args) or "0"))


def hold(name, grab):
    """An attempt to hold ``HOLD_BYTES`` of memory that RLIMIT_AS does not see.

    ``grab`` is a loop body that adds to ``held`` and keeps what holds the
    memory in ``keep``.  The snippet must fail, and must not have held more
    than ``MEMORY_MB`` by then (the scratch tmpfs and default kernel buffers
    are allowed; a multiple of the address-space limit is not).
    """
    code = ("import fcntl, os, socket\nheld, keep = 0, []\ntry:\n"
            "    while held < %d:\n%s\nfinally:\n"
            "    print('held', held >> 20, 'MiB', 'ESCAPED' if held > %d else 'bounded')"
            % (HOLD_BYTES, textwrap.indent(grab, " " * 8), MEMORY_MB << 20))
    return attack(name, code, "error")


FILL_NONBLOCKING = ("    s.setblocking(False)\n    try:\n        while True:\n"
                    "            held += s.send(bytes(1 << 16))\n"
                    "    except BlockingIOError:\n        pass")

ATTACKS = [
    # -- reading outside the scratch dir ---------------------------------
    attack("read_etc_shadow", "print('ESCAPED', open('/etc/shadow').read())", "error"),
    attack("read_etc_passwd", "print('ESCAPED', open('/etc/passwd').read())", "error"),
    attack("read_test_source", "print('ESCAPED', open(%(test_file)r).read())", "error"),
    attack("list_trainer_venv", "import os; print('ESCAPED', os.listdir(%(prefix)r))", "error"),
    attack("read_host_tmp_file", "print('ESCAPED', open(%(victim)r).read())", "error"),
    attack("read_via_proc_root", "print('ESCAPED', open('/proc/1/root/etc/hostname').read())",
           "error"),
    attack("symlink_out_of_scratch",
           "import os\nos.symlink('/etc', 'e')\nprint('ESCAPED', open('e/passwd').read())",
           "error"),
    attack("list_root_dir", "import os; print(sorted(os.listdir('/')))", "ok",
           absent=("'etc'", "'home'", "'work'", "'var'", "'opt'", "'mnt'", "'srv'",
                   "'boot'", "'sys'")),
    attack("list_root_home",
           "import os\nentries = os.listdir('/root') if os.path.exists('/root') else []\n"
           "leaked = [e for e in entries if not %(interp)r.startswith('/root/' + e)]\n"
           "print('ESCAPED' if leaked else 'hidden', leaked)", "ok", expect="hidden"),
    attack("no_sysfs", "import os; print('ESCAPED', os.listdir('/sys'))", "error"),
    # -- writing anywhere else -------------------------------------------
    attack("write_root", "open('/pwned', 'w').write('x'); print('ESCAPED')", "error"),
    attack("write_usr", "open('/usr/lib/pwned', 'w').write('x'); print('ESCAPED')", "error"),
    attack("write_dev", "open('/dev/pwned', 'w').write('x'); print('ESCAPED')", "error"),
    attack("write_host_file", "open(%(victim)r, 'w').write('pwned'); print('ESCAPED')", "error"),
    attack("write_proc_sys",
           "open('/proc/sys/kernel/hostname', 'w').write('pwned'); print('ESCAPED')", "error"),
    attack("huge_file", "open('big', 'wb').write(b'x' * (40 << 20)); print('ESCAPED')", "error"),
    attack("fill_scratch",
           "i = 0\nwhile True:\n    open('f%d' % i, 'wb').write(b'x' * (8 << 20)); i += 1",
           "error"),
    # -- network -----------------------------------------------------------
    attack("tcp4_to_host_listener",
           "import socket; socket.create_connection(('127.0.0.1', %(port4)d), 1)\n"
           "print('ESCAPED')", "error"),
    attack("tcp6_to_host_listener",
           "import socket; socket.create_connection(('::1', %(port6)d), 1); print('ESCAPED')",
           "error"),
    attack("tcp4_internet",
           "import socket; socket.create_connection(('1.1.1.1', 443), 1); print('ESCAPED')",
           "error"),
    attack("udp_dns_server",
           "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
           "s.sendto(b'x', ('8.8.8.8', 53)); print('ESCAPED')", "error"),
    attack("dns_lookup",
           "import socket; print('ESCAPED', socket.getaddrinfo('example.com', 80))", "error"),
    attack("unix_socket_path",
           "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(%(unix_path)r)\n"
           "print('ESCAPED')", "error"),
    attack("unix_socket_abstract",
           "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(%(abstract)r)\n"
           "print('ESCAPED')", "error"),
    attack("raw_socket",
           "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1); print('ESCAPED')",
           "error"),
    attack("only_loopback", "import socket; print([n for _, n in socket.if_nameindex()])",
           "ok", expect="['lo']"),
    # -- processes ---------------------------------------------------------
    attack("fork_bomb", "import os\nwhile True:\n    os.fork()", "error"),
    # Only the wall clock ends it; how soon depends on the host's load.
    attack("fork_bomb_resilient",
           "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
           "timeout"),
    attack("thread_bomb",
           "import threading, time\nwhile True:\n"
           "    threading.Thread(target=time.sleep, args=(9,), daemon=True).start()", "error"),
    attack("memory_bomb", "x = bytearray(10 ** 11)\nprint('ESCAPED')", "memory"),
    attack("memory_creep", "x = []\nwhile True:\n    x.append(bytearray(1 << 20))", "memory"),
    # -- memory that RLIMIT_AS does not count: fd-backed pages, kernel buffers --
    hold("memfd", "fd = os.memfd_create('hold')\nkeep.append(fd)\nfor _ in range(16):\n"
                  "    held += os.write(fd, bytes(1 << 20))"),
    hold("dev_shm_files", "f = open('/dev/shm/hold' + str(len(keep)), 'wb', buffering=0)\n"
                          "keep.append(f)\nfor _ in range(16):\n"
                          "    held += f.write(bytes(1 << 20))"),
    hold("tmp_files", "fd = os.open('.', os.O_TMPFILE | os.O_RDWR)\nkeep.append(fd)\n"
                      "for _ in range(16):\n    held += os.write(fd, bytes(1 << 20))"),
    hold("big_pipes", "r, w = os.pipe()\nkeep += [r, w]\n"
                      "fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)\n"
                      "os.set_blocking(w, False)\ntry:\n    while True:\n"
                      "        held += os.write(w, bytes(1 << 16))\n"
                      "except BlockingIOError:\n    pass"),
    hold("socket_buffers", "keep += socket.socketpair()\nfor s in keep[-2:]:\n"
                           "    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 26)\n"
                           + FILL_NONBLOCKING),
    hold("tcp_loopback_buffers",
         "if not keep:\n    keep.append(socket.create_server(('127.0.0.1', 0), backlog=256))\n"
         "keep.append(socket.create_connection(keep[0].getsockname()))\n"
         "keep.append(keep[0].accept()[0])\nfor s in keep[-2:]:\n" + FILL_NONBLOCKING),
    attack("vmsplice", syscall("vmsplice", 0, 0, 0, 0), "ok", expect="-1 1"),
    attack("memfd_secret", syscall("memfd_secret", 0), "ok", expect="-1 1"),
    # -- CPU and time ----------------------------------------------------------
    attack("cpu_spin", "while True:\n    pass", "timeout"),
    attack("cpu_spin_threads",
           "import threading\ndef spin():\n    while True:\n        pass\n"
           "for _ in range(4):\n    threading.Thread(target=spin, daemon=True).start()\nspin()",
           "timeout"),
    attack("sleep_past_timeout", "import time; time.sleep(60)", "timeout"),
    # The test then checks from the host that the grandchild is gone.
    attack("background_child_outlives",
           "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
           "        time.sleep(60); print('ESCAPED', flush=True)\n    os._exit(0)\n"
           "print('parent done')", "ok", expect="parent done"),
    attack("signal_parent",
           "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('alive')", "ok",
           expect="alive"),
    attack("signal_everyone",
           "import os, signal\nfor pid in (1, 0, -1, -os.getpgrp()):\n    try:\n"
           "        os.kill(pid, signal.SIGKILL)\n    except ProcessLookupError:\n        pass\n"
           "print('alive')", "ok", expect="alive"),
    attack("signal_trainer_by_pid",
           "import os, signal; os.kill(%(host_pid)d, signal.SIGTERM); print('ESCAPED')", "error"),
    attack("stop_self", "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\nprint('alive')",
           "ok", expect="alive"),
    # -- environment and /proc ---------------------------------------------
    attack("read_environment", "import os; print(dict(os.environ))", "ok",
           absent=("%(secret)s", "SOLVER_SANDBOX_TEST_TOKEN")),
    attack("read_all_proc_environ",
           "import os\nfor pid in os.listdir('/proc'):\n    try:\n"
           "        print(pid, open('/proc/%%s/environ' %% pid, 'rb').read())\n"
           "    except OSError:\n        pass", "ok", absent=("%(secret)s",)),
    attack("proc_lists_no_trainer",
           "import os\ncmds = [open('/proc/%%s/cmdline' %% p, 'rb').read() for p in os.listdir('/proc')"
           " if p.isdigit()]\nprint('ESCAPED' if any(b'pytest' in c or %(prefix)r.encode() in c"
           " for c in cmds) else len(cmds))", "ok", expect="2"),
    attack("read_zygote_memory", "print('ESCAPED', open('/proc/1/mem', 'rb').read(1))", "error"),
    attack("no_capabilities",
           "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0])", "ok",
           expect="CapEff:\t0000000000000000"),
    # -- privileges and kernel surface --------------------------------------
    attack("setuid_root", "import os; os.setuid(0); print('ESCAPED')", "error"),
    attack("raise_rlimit",
           "import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1)); print('ESCAPED')",
           "error"),
    attack("unshare_user_namespace", syscall("unshare", 0x10000000), "ok", expect="-1 1"),
    attack("mount_tmpfs",
           "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "print(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno())",
           "ok", expect="-1 1"),
    attack("ptrace_pid1", syscall("ptrace", 16, 1, 0, 0), "ok", expect="-1 1"),
    attack("bpf", syscall("bpf", 0, 0, 0), "ok", expect="-1 1"),
    attack("io_uring", syscall("io_uring_setup", 8, 0), "ok", expect="-1 1"),
    attack("userfaultfd", syscall("userfaultfd", 0), "ok", expect="-1 1"),
    attack("chroot", syscall("chroot", 0), "ok", expect="-1 1"),
    # -- crashes ---------------------------------------------------------------
    attack("segfault_ctypes", "import ctypes; ctypes.string_at(0)", "killed"),
    attack("abort", "import os; os.abort()", "killed"),
    attack("deep_recursion", "def f(n):\n    return f(n + 1)\nf(0)", "error"),
    attack("c_stack_overflow",
           "import sys\nsys.setrecursionlimit(10 ** 7)\nclass A:\n    def __repr__(self):\n"
           "        return repr(self)\nrepr(A())", "killed"),
    # -- the pipes ------------------------------------------------------------
    attack("close_stdout_stderr", "import os\nos.close(1)\nos.close(2)", "ok"),
    attack("redirect_stdout", "import os\nos.dup2(os.open('/dev/null', os.O_WRONLY), 1)\n"
           "print('ESCAPED')", "ok"),
    attack("close_every_fd", "import os\nos.closerange(0, 65536)", "ok"),
    attack("stdout_flood", "while True:\n    print('x' * 1000)", "output_limit"),
    attack("stderr_flood", "import sys\nwhile True:\n    sys.stderr.write('y' * 1000)",
           "output_limit"),
    attack("single_huge_write", "import sys; sys.stdout.write('z' * 10 ** 7)", "output_limit"),
    attack("huge_stdin_unread", "print('fine')", "ok", stdin=b"x" * (32 << 20), expect="fine"),
    attack("huge_stdin_echoed", "import sys, shutil; shutil.copyfileobj(sys.stdin, sys.stdout)",
           "output_limit", stdin="é" * (8 << 20)),
    # -- garbage -------------------------------------------------------------
    attack("lone_surrogate_source", "print('ok')  # \udcff", "error"),
    attack("nul_bytes_source", "print(1)\x00print(2)", "error"),
    attack("binary_garbage_source", bytes(range(256)).decode("latin-1") * 4, "error"),
    attack("unicode_output", r"print('\u202e\U0001f600\x00\udcff\ufffe')", "ok",
           expect="\u202e\U0001f600\x00\ufffd\ufffe"),
    # -- persistence between snippets ----------------------------------------
    attack("poison_builtins",
           "import builtins, sys\nbuiltins.print = None\nbuiltins.len = None\n"
           "sys.modules['json'] = None", "ok"),
    attack("import_trainer_packages", "import torch\nprint('ESCAPED')", "error"),
    attack("gpu_device", "open('/dev/nvidia0'); print('ESCAPED')", "error"),
]

CHECK = ("import json, os\n"
         "print(json.dumps([len('ab'), sorted(os.listdir('.')), "
         "sorted(p for p in os.listdir('/proc') if p.isdigit() and p != '1')]))")


@pytest.mark.parametrize("code, status, stdin, expect, absent", ATTACKS)
def test_attack_is_contained(box, host, code, status, stdin, expect, absent):
    fill = {k: v for k, v in host.items() if k != "servers"}
    res = box.run(code % fill if "%(" in code or "%%" in code else code,
                  stdin=stdin, timeout_s=timeout_for(status))
    assert res.status == status, (res.status, res.exit_code, res.stderr[-2000:])
    assert "ESCAPED" not in res.stdout
    if expect is not None:
        assert expect in res.stdout, res.stdout[-2000:]
    for text in absent:
        assert text % fill not in res.stdout
    if status == "output_limit":
        assert len(res.stdout.encode()) <= CAP and len(res.stderr.encode()) <= CAP
    # Nothing left running, seen from the host: no process below a zygote.
    wait_for(lambda: not any(snippet_pids(box).values()),
             "the attack's processes to exit")
    # Still serving, on every worker: clean builtins, empty scratch, and no
    # process left from the attack (only the check itself besides PID 1).
    for after in box.run_many([CHECK, CHECK], timeout_s=SLOW_S):
        assert after.status == "ok", after.stderr
        length, scratch, procs = __import__("json").loads(after.stdout)
        assert (length, scratch, len(procs)) == (2, [], 1), after.stdout


def test_attack_count_matches_the_docs():
    """The docs quote how many attacks this suite contains; keep them honest."""
    assert len(ATTACKS) >= 25
    for doc, pattern in (("docs/sandbox.md", r"(\d+) attacks\)"),
                         ("README.md", r"attack suite of (\d+) attempts")):
        counts = re.findall(pattern, (REPO / doc).read_text(encoding="utf-8"))
        assert counts == [str(len(ATTACKS))], (doc, counts, len(ATTACKS))


def test_attacks_in_one_batch_do_not_disturb_normal_snippets(box, host):
    """All attacks at once, interleaved with honest work that must be exact."""
    fill = {k: v for k, v in host.items() if k != "servers"}
    jobs = []
    for i, case in enumerate(ATTACKS):
        code, status, stdin = case.values[:3]
        jobs += [(code % fill if "%(" in code or "%%" in code else code, stdin,
                  timeout_for(status)),
                 ("import sys; print(sum(map(int, sys.stdin.read().split())), %d)" % i,
                  "%d %d" % (i, i), SLOW_S)]
    results = run_batch(box, jobs)
    expected = [case.values[1] for case in ATTACKS]
    assert [r.status for r in results[::2]] == expected
    assert [r.stdout for r in results[1::2]] == ["%d %d\n" % (2 * i, i)
                                                 for i in range(len(ATTACKS))]


# -------------------------------------------------- pools in other processes --
# A pool in another process whose pid-derived first uid slot is the same as
# ours; it runs a snippet that forks until its process limit refuses more.
OTHER_POOL = r"""
import itertools, json, sys
sys.path.insert(0, sys.argv[1])
from solver.sandbox import Sandbox, _pool
_pool._uid_counter = itertools.count(0)
with Sandbox(workers=1, timeout_s=600, max_processes=16, strict=True) as box:
    print(json.dumps(box.isolation()["unprivileged_uid"]), flush=True)
    box.run("import os, time\nwhile True:\n    try:\n        if os.fork() == 0:\n"
            "            time.sleep(600)\n    except OSError:\n        time.sleep(600)")
"""
HONEST_THREADS = ("import threading\nts = [threading.Thread(target=sum, args=([1, 2],))"
                  " for _ in range(8)]\nfor t in ts:\n    t.start()\nfor t in ts:\n"
                  "    t.join()\nprint('threads ok')")


def _uid_of(layer: str) -> int:
    return int(re.match(r"uid (\d+)", layer).group(1))


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        try:
            status = Path("/proc/%s/status" % entry).read_text()
        except (OSError, ValueError):
            continue
        if entry.isdigit() and re.search(r"^Uid:\s+%d\s" % uid, status, re.M):
            pids.append(int(entry))
    return pids


@pytest.mark.skipif(os.geteuid() != 0,
                    reason="snippets get uids of their own only when the trainer is root")
def test_pools_in_two_processes_never_share_a_uid(monkeypatch):
    """RLIMIT_NPROC counts per uid: a shared uid lets one pool starve another."""
    make_box(workers=1).close()  # the other process's pool needs full isolation too
    other = subprocess.Popen([sys.executable, "-c", OTHER_POOL, str(REPO)],
                             stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        other_uid = _uid_of(json.loads(other.stdout.readline()))
        wait_for(lambda: len(_pids_of_uid(other_uid)) >= 16,
                 "the other pool's fork bomb to reach its process limit")
        monkeypatch.setattr(_pool, "_uid_counter", itertools.count(0))
        with Sandbox(workers=1, timeout_s=SLOW_S, max_processes=16,
                     strict=True) as mine:
            uid = _uid_of(mine.isolation()["unprivileged_uid"])
            res = mine.run(HONEST_THREADS)
        assert (res.status, res.stdout) == ("ok", "threads ok\n"), res.stderr
        assert uid != other_uid
    finally:
        other.kill()
        other.wait()
    # The other process died without closing its pool: its snippets die with
    # it, and its uid is free again for the next pool that asks for it.
    wait_for(lambda: not _pids_of_uid(other_uid), "the other pool's snippets to exit")
    monkeypatch.setattr(_pool, "_uid_counter", itertools.count(0))
    with Sandbox(workers=1, timeout_s=SLOW_S) as again:
        assert _uid_of(again.isolation()["unprivileged_uid"]) == other_uid
