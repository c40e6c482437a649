"""Tests for solver.sandbox: the API, result statuses and the worker pool.

The attack suite lives in test_sandbox_attacks.py.  These tests need full
isolation: without bubblewrap they fail and say how to install it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

from solver.sandbox import (STATUSES, ExecResult, IsolationUnavailable, Sandbox,
                            SandboxError)
from solver.sandbox import _host, _pool
from tests.conftest import missing_tool

REPO = Path(__file__).resolve().parents[2]
# Hang guard: the timeout of snippets that must end by themselves, and how
# long a test waits for something to happen.  Speed is bench_sandbox.py's.
SLOW_S = 30.0


def needs_bwrap() -> None:
    """For tests of behaviour that bubblewrap's presence decides."""
    if not shutil.which("bwrap"):
        missing_tool("bwrap", "full isolation unavailable on this host: " + _host.BWRAP_INSTALL_HINT)


def make_box(**kwargs) -> Sandbox:
    """A sandbox with every isolation layer, or a failure naming the fix."""
    try:
        return Sandbox(strict=True, **kwargs)
    except IsolationUnavailable as exc:  # its message says what is missing
        missing_tool("bwrap", "full isolation unavailable on this host:\n%s" % exc)


@pytest.fixture(scope="module")
def box():
    sandbox = make_box(workers=2, timeout_s=SLOW_S, memory_mb=256,
                       max_output_bytes=64 * 1024)
    yield sandbox
    sandbox.close()


def _tree(pid: int) -> set[int]:
    """pid and all its descendants, from /proc."""
    pids = {pid}
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return pids
    for task in tasks:
        try:
            kids = Path("/proc/%d/task/%s/children" % (pid, task)).read_text()
        except OSError:
            continue
        for kid in kids.split():
            pids |= _tree(int(kid))
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _ppid(pid: int) -> int | None:
    try:
        return int(Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def snippet_pids(box: Sandbox) -> dict[int, set[int]]:
    """Per worker (bwrap's host pid), host pids of the processes below its zygote.

    The zygote is bwrap's child (PID 1 of the worker's namespace); an idle
    worker has nothing below it, a busy one its snippet and what that started.
    """
    pids: dict[int, set[int]] = {}
    for worker in list(box._all):
        below: set[int] = set()
        for zygote in _tree(worker.proc.pid) - {worker.proc.pid}:
            if _ppid(zygote) == worker.proc.pid:
                below |= _tree(zygote) - {zygote}
        pids[worker.proc.pid] = below
    return pids


def wait_for(predicate, what: str):
    """Poll ``predicate`` until it returns something truthy, for up to SLOW_S."""
    deadline = time.monotonic() + SLOW_S
    while not (value := predicate()):
        assert time.monotonic() < deadline, "waited %.0f s for %s" % (SLOW_S, what)
        time.sleep(0.02)
    return value


def run_batch(box: Sandbox, jobs) -> list[ExecResult]:
    """``run_many`` with a timeout per job: ``jobs`` is (code, stdin, timeout_s).

    Snippets that must time out get a short limit, the others SLOW_S, all in
    one batch (so they still share workers and queue behind each other).
    """
    return box._run_jobs([box._job(code, stdin, timeout)
                          for code, stdin, timeout in jobs], 1)


# ------------------------------------------------------------------ results --
def test_ok_result(box):
    res = box.run("print(6 * 7)")
    assert res == ExecResult("ok", "42\n", "", 0, res.wall_s)
    assert res.ok and res.wall_s > 0


def test_stdin_as_str_and_bytes(box):
    code = "import sys\nprint(sys.stdin.read().upper())"
    assert box.run(code, stdin="héllo").stdout == "HÉLLO\n"
    assert box.run(code, stdin=b"abc").stdout == "ABC\n"
    assert box.run("print(input() + input())", stdin="a\nb\n").stdout == "ab\n"


def test_uncaught_exception_is_error_with_traceback(box):
    res = box.run("def f():\n    raise ValueError('boom')\nf()")
    assert (res.status, res.exit_code) == ("error", 1)
    assert 'File "<snippet>", line 3, in <module>' in res.stderr
    assert res.stderr.endswith("ValueError: boom\n")
    assert "zygote" not in res.stderr  # no sandbox frames leak into tracebacks


def test_syntax_error(box):
    res = box.run("def f(:\n  pass")
    assert res.status == "error" and "SyntaxError" in res.stderr


@pytest.mark.parametrize("code, status, exit_code, stderr", [
    ("import sys; sys.exit()", "ok", 0, ""),
    ("import sys; sys.exit(0)", "ok", 0, ""),
    ("import sys; sys.exit(3)", "error", 3, ""),
    ("import sys; sys.exit('bye')", "error", 1, "bye\n"),
    ("import os; os._exit(7)", "error", 7, ""),
    ("raise KeyboardInterrupt", "error", 1, None),
])
def test_exit_codes(box, code, status, exit_code, stderr):
    res = box.run(code)
    assert (res.status, res.exit_code) == (status, exit_code)
    if stderr is not None:
        assert res.stderr == stderr


def test_output_is_decoded_with_replacement(box):
    res = box.run("import sys; sys.stdout.buffer.write(b'a\\xff\\xfeb'); "
                  "print('\\udcff', end='')")
    assert res.status == "ok"
    assert res.stdout == "a\ufffd\ufffdb\ufffd"


def test_output_just_under_cap_is_kept(box):
    res = box.run("print('x' * (64 * 1024 - 1))")
    assert res.status == "ok" and len(res.stdout) == 64 * 1024


def test_memory_status(box):
    res = box.run("x = bytearray(10 ** 10)")
    assert (res.status, res.exit_code) == ("memory", 1)
    assert "MemoryError" in res.stderr


def test_timeout_status_and_per_call_override(box):
    # Lower than the pool's default (SLOW_S): the short limit is the one used.
    res = box.run("import time; time.sleep(600)", timeout_s=0.5)
    assert (res.status, res.exit_code) == ("timeout", -signal.SIGKILL)
    assert 0.5 <= res.wall_s < SLOW_S  # never early; SLOW_S would be the default
    assert box.run("print('next')").stdout == "next\n"  # the pool serves on
    # Higher than the default: a snippet the default would stop completes.
    with make_box(workers=1, timeout_s=0.3) as short:
        assert short.run("import time; time.sleep(600)").status == "timeout"
        res = short.run("import time; time.sleep(0.6); print(1)", timeout_s=SLOW_S)
        assert (res.status, res.stdout) == ("ok", "1\n"), res.stderr


def test_result_is_frozen_and_statuses_are_fixed():
    res = ExecResult("ok", "", "", 0, 0.1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.status = "error"  # type: ignore[misc]
    assert STATUSES == ("ok", "error", "timeout", "memory", "output_limit",
                        "killed")


def test_invalid_arguments(box):
    with pytest.raises(TypeError):
        box.run(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        box.run("print(1)", timeout_s=0)
    with pytest.raises(ValueError):
        box.run_many(["print(1)"], stdins=["a", "b"])
    with pytest.raises(ValueError):
        Sandbox(workers=0)
    assert box.run_many([]) == []


# ----------------------------------------------------------- python world --
def test_snippet_runs_as_main_with_fresh_globals(box):
    code = ("if __name__ == '__main__':\n"
            "    import sys\n"
            "    print(sys.argv, 'box' in globals(), 'Zygote' in globals())")
    assert box.run(code).stdout == "['-c'] False False\n"


def test_standard_library_and_subprocesses_work(box):
    code = textwrap.dedent("""
        import dataclasses, decimal, fractions, sqlite3, statistics, subprocess, sys
        print(statistics.mean([1, 2, 3]), fractions.Fraction(1, 3) * 3)
        print(subprocess.run([sys.executable, "-c", "print(5)"],
                             capture_output=True, text=True).stdout.strip())
        print(subprocess.run(["sh", "-c", "echo hi"], capture_output=True,
                             text=True).stdout.strip())
        """)
    res = box.run(code)
    assert (res.status, res.stdout) == ("ok", "2 1\n5\nhi\n"), res.stderr


def test_threads_and_multiprocessing_work(box):
    code = textwrap.dedent("""
        import multiprocessing, threading, time
        def late():
            time.sleep(0.2)
            print("thread done", flush=True)
        threading.Thread(target=late).start()   # non-daemon: awaited at exit
        with multiprocessing.Pool(2) as pool:
            print(pool.map(abs, [-1, -2]))
        """)
    res = box.run(code)
    assert (res.status, res.stdout) == ("ok", "[1, 2]\nthread done\n"), res.stderr


def test_scratch_dir_is_private_writable_and_fresh(box):
    write = ("import os, tempfile\n"
             "open('here.txt', 'w').write('x')\n"
             "open(os.path.join(tempfile.gettempdir(), 'tmp.txt'), 'w').write('y')\n"
             "open('/dev/shm/shm.txt', 'w').write('z')\n"
             "print(os.getcwd(), sorted(os.listdir('.')))")
    # Under bubblewrap /dev/shm is the same tmpfs as /tmp (one mount).
    assert box.run(write).stdout == "/tmp ['here.txt', 'shm.txt', 'tmp.txt']\n"
    look = "import os; print(os.listdir('.'), os.listdir('/dev/shm'))"
    for res in box.run_many([look] * 4):  # on every worker
        assert res.stdout == "[] []\n"


def test_what_the_snippet_filter_leaves_works(box):
    """Unix sockets, asyncio, pipes, /dev/shm and ctypes callbacks still work."""
    code = textwrap.dedent("""
        import asyncio, ctypes, fcntl, multiprocessing, os, socket
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # not a buffer size
        a.sendall(b"ping"); print(b.recv(4).decode())
        parent, child = multiprocessing.Pipe()
        child.send([1, 2]); print(parent.recv())
        r, w = os.pipe()
        print(fcntl.fcntl(r, fcntl.F_GETFL) & os.O_NONBLOCK, fcntl.fcntl(w, 1032))
        async def main():
            await asyncio.sleep(0)
            return "async"
        print(asyncio.run(main()))
        from multiprocessing import shared_memory
        shm = shared_memory.SharedMemory(create=True, size=1 << 16)
        shm.buf[:2] = b"ok"; print(bytes(shm.buf[:2]).decode()); shm.close(); shm.unlink()
        cmp = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                               ctypes.POINTER(ctypes.c_int))(
            lambda x, y: x[0] - y[0])
        arr = (ctypes.c_int * 3)(3, 1, 2)
        ctypes.CDLL(None).qsort(arr, 3, ctypes.sizeof(ctypes.c_int), cmp)
        print(list(arr))
        """)
    res = box.run(code)
    assert (res.status, res.stdout) == (
        "ok", "ping\n[1, 2]\n0 65536\nasync\nok\n[1, 2, 3]\n"), res.stderr


def test_fd_backed_memory_is_refused_with_a_clear_error(box):
    """Memory RLIMIT_AS does not count: refused at once, as PermissionError."""
    code = textwrap.dedent("""
        import os, socket
        for name, call in [
                ("memfd", lambda: os.memfd_create("x")),
                ("tcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
                ("buffer", lambda: socket.socketpair()[0].setsockopt(
                    socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 26))]:
            try:
                call()
                print(name, "allowed")
            except PermissionError as exc:
                print(name, exc)
        """)
    res = box.run(code)
    assert res.stdout == "".join("%s [Errno 1] Operation not permitted\n" % name
                                 for name in ("memfd", "tcp", "buffer")), res.stderr
    res = box.run("import os; os.memfd_create('x')")
    assert res.status == "error"
    assert "PermissionError: [Errno 1] Operation not permitted" in res.stderr


def test_sysv_ipc_is_refused(box):
    make = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.%s, ctypes.get_errno())")
    for call in ("shmget(4242, 4096, 0o1600)", "semget(4242, 1, 0o1600)",
                 "msgget(4242, 0o1600)"):  # IPC_CREAT
        assert box.run(make % call).stdout == "-1 1\n", call  # EPERM


def test_environment_is_scrubbed(box):
    res = box.run("import os; print(sorted(os.environ))")
    assert res.stdout == "['HOME', 'LANG', 'LOGNAME', 'MALLOC_ARENA_MAX', 'PATH', 'TMPDIR', 'USER']\n"


# --------------------------------------------------------------------- pool --
def test_run_many_keeps_order_and_runs_in_parallel(box):
    # Later snippets finish first; results still come back in input order.
    codes = ["import time; time.sleep(%.1f); print(%d)" % (0.3 - 0.1 * i, i)
             for i in range(4)]
    results = box.run_many(codes)
    assert [r.stdout for r in results] == ["%d\n" % i for i in range(4)]
    # Parallel: seen from the host, both workers run a snippet at once.
    results: list = []
    runner = threading.Thread(target=lambda: results.extend(box.run_many(
        ["import time; time.sleep(600)"] * 2)))
    runner.start()

    def both_busy():
        pids = snippet_pids(box)
        return len(pids) == 2 and all(pids.values()) and pids

    for pids in wait_for(both_busy, "a snippet on both workers").values():
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    runner.join(SLOW_S)
    assert [r.status for r in results] == ["killed", "killed"]


def test_run_many_with_stdins(box):
    results = box.run_many(["print(input()[::-1])"] * 3,
                           stdins=["abc", b"xyz", None])
    assert [r.status for r in results] == ["ok", "ok", "error"]
    assert [r.stdout for r in results[:2]] == ["cba\n", "zyx\n"]


def test_failures_do_not_affect_other_results(box):
    bad = ["while True: pass", "x = bytearray(10 ** 10)", "import os; os._exit(3)",
           "import ctypes; ctypes.string_at(0)", "print('x' * 10 ** 7)",
           "import os, signal; os.kill(0, signal.SIGKILL)"]
    jobs = []
    for i, code in enumerate(bad):
        jobs += [(code, None, 1.0 if i == 0 else SLOW_S),
                 ("print(%d * 2)" % i, None, SLOW_S)]
    results = run_batch(box, jobs)
    assert [r.status for r in results[::2]] == [
        "timeout", "memory", "error", "killed", "output_limit", "ok"]
    assert [r.stdout for r in results[1::2]] == ["%d\n" % (i * 2)
                                                 for i in range(len(bad))]


def test_concurrent_callers_share_the_pool(box):
    results: dict[int, str] = {}

    def call(i):
        results[i] = box.run("print(%d)" % i).stdout

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == {i: "%d\n" % i for i in range(8)}


def test_dead_worker_is_replaced(box):
    victim = box._idle[0]
    os.killpg(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait()
    results = box.run_many(["print(%d)" % i for i in range(6)])
    assert [r.stdout for r in results] == ["%d\n" % i for i in range(6)]
    assert all(not w.dead for w in box._idle)


def _kill_worker_once_busy(sandbox: Sandbox, worker, also=lambda: True) -> threading.Thread:
    """Kill ``worker`` (bwrap and all) as soon as a snippet runs on it and ``also()`` holds."""
    def kill():
        wait_for(lambda: snippet_pids(sandbox).get(worker.proc.pid) and also(),
                 "a snippet on the worker")
        os.killpg(worker.proc.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill)
    killer.start()
    return killer


def test_worker_killed_mid_snippet_reports_killed():
    with make_box(workers=1, timeout_s=SLOW_S) as sandbox:
        killer = _kill_worker_once_busy(sandbox, sandbox._idle[0])
        res = sandbox.run("import time; time.sleep(600)")
        killer.join()
        assert res.status == "killed" and "worker died" in res.stderr
        assert sandbox.run("print('back')").stdout == "back\n"


def _spy_sends(monkeypatch) -> list[bool]:
    """Record, per request sent to a zygote, whether it was queued ahead."""
    queued: list[bool] = []
    real = _pool._Worker.send

    def send(worker, frame, wait=True):
        sent = real(worker, frame, wait)
        if sent:
            queued.append(not wait)
        return sent

    monkeypatch.setattr(_pool._Worker, "send", send)
    return queued


def test_requests_are_queued_ahead_but_not_behind_the_tail(box, monkeypatch):
    queued = _spy_sends(monkeypatch)
    results = box.run_many(["print(%d)" % i for i in range(12)])
    assert [r.stdout for r in results] == ["%d\n" % i for i in range(12)]
    assert any(queued)  # the pipe held the next request while one ran
    queued.clear()
    box.run_many(["print(1)"] * 2)  # no more jobs than workers: no queueing
    assert queued == [False, False]


def test_jobs_queued_behind_a_dying_worker_run_elsewhere(monkeypatch):
    with make_box(workers=1, timeout_s=SLOW_S) as sandbox:
        queued = _spy_sends(monkeypatch)
        # only once print(0) is in the pipe: on a loaded machine the kill could come first (the next test's case)
        killer = _kill_worker_once_busy(sandbox, sandbox._idle[0], also=lambda: len(queued) >= 2)
        codes = ["import time; time.sleep(600)"] + ["print(%d)" % i for i in range(4)]
        results = sandbox.run_many(codes)
        killer.join()
        assert queued[:2] == [False, True]  # print(0) waited in the dead pipe
        assert results[0].status == "killed" and "worker died" in results[0].stderr
        assert [(r.status, r.stdout) for r in results[1:]] == [
            ("ok", "%d\n" % i) for i in range(4)]


def test_a_worker_dying_on_a_queued_send_fails_its_job_and_the_rest_run(monkeypatch):
    """The worker dies as a job is queued behind the running one (the pipe breaks on the send): the running job
    is killed, the others run on the replacement (this once spun for ever with the dead worker in flight)."""
    real = _pool._Worker.send

    def send(worker, frame, wait=True):
        if not wait:  # the first queued send: the worker is busy with the sleep
            os.killpg(worker.proc.pid, signal.SIGKILL)
            monkeypatch.setattr(_pool._Worker, "send", real)
            raise _pool._WorkerDied()
        return real(worker, frame, wait)

    with make_box(workers=1, timeout_s=SLOW_S) as sandbox:
        monkeypatch.setattr(_pool._Worker, "send", send)
        results = sandbox.run_many(["import time; time.sleep(600)"] + ["print(%d)" % i for i in range(3)])
        assert results[0].status == "killed" and "worker died" in results[0].stderr
        assert [(r.status, r.stdout) for r in results[1:]] == [("ok", "%d\n" % i) for i in range(3)]


def test_large_requests_are_not_queued_ahead(box, monkeypatch):
    queued = _spy_sends(monkeypatch)
    big = "x = %r\nprint(len(x))" % ("a" * 8192)
    results = box.run_many([big] * 6)
    assert [r.stdout for r in results] == ["8192\n"] * 6
    assert not any(queued)


# ------------------------------------------------------------- determinism --
def test_check_determinism(box):
    report = box.check_determinism("print(sum(range(10)))")
    assert report.deterministic and report.result.stdout == "45\n"
    assert len(report.results) == 2
    assert not box.check_determinism("import random; print(random.random())"
                                     ).deterministic
    # Workers have different hash seeds, so set order of str is caught.
    assert not box.check_determinism(
        "print(list({str(i) for i in range(60)}))").deterministic
    report = box.check_determinism("while True: pass", timeout_s=0.3)
    assert not report.deterministic  # limits are not a reproducible answer
    with pytest.raises(ValueError):
        box.check_determinism("print(1)", runs=1)


# ---------------------------------------------------------------- isolation --
def test_isolation_report(box):
    layers = box.isolation()
    for key in ("bubblewrap", "network_isolated", "pid_namespace", "sysv_ipc",
                "filesystem_readonly", "filesystem_hidden", "scratch_dir",
                "unprivileged_uid", "capabilities_dropped", "seccomp",
                "rlimit_cpu", "rlimit_memory", "fd_memory_bounded",
                "rlimit_processes",
                "rlimit_file_size", "rlimit_open_files", "no_core_dumps",
                "environment_scrubbed", "wall_clock_timeout", "output_cap"):
        assert layers[key], key
    assert all(layers.values()), layers
    assert box.isolation() is not box._isolation  # callers get a copy


def test_fallback_without_bwrap_warns_once_and_reports():
    _pool._warned.clear()
    with pytest.warns(RuntimeWarning, match="bubblewrap"):
        first = Sandbox(workers=1, timeout_s=1.0, use_bwrap=False)
    with first, warnings.catch_warnings():
        warnings.simplefilter("error")
        with Sandbox(workers=1, timeout_s=1.0, use_bwrap=False) as second:
            assert second.run("print(1)").stdout == "1\n"
        layers = first.isolation()
        assert layers["bubblewrap"] is False
        assert layers["environment_scrubbed"] and layers["wall_clock_timeout"]
        assert first.run("import fractions; print(fractions.Fraction(2, 4))"
                         ).stdout == "1/2\n"  # the whole stdlib, even as root
        assert first.run("while True: pass").status == "timeout"
        assert first.run("x = bytearray(10 ** 10)").status == "memory"


def test_strict_refuses_partial_isolation():
    needs_bwrap()
    with pytest.raises(IsolationUnavailable, match="use_bwrap=False was passed"):
        Sandbox(workers=1, use_bwrap=False, strict=True)


HOST = _host.HostInfo(bwrap="/usr/bin/bwrap", bwrap_version="bubblewrap 0.8.0",
                      bwrap_error=None, bwrap_options=frozenset(), root=True,
                      kernel=(6, 1), machine="x86_64")


@pytest.mark.parametrize("missing, host, bwrap_used, seccomp_built, says, not_says", [
    (["fd_memory_bounded", "seccomp", "user_namespaces_blocked"],
     dataclasses.replace(HOST, machine="riscv64"), True, False,
     ["fd_memory_bounded, seccomp, user_namespaces_blocked: no seccomp filter for "
      "this architecture (riscv64; filters exist for aarch64"], ["bubblewrap"]),
    (["bubblewrap", "filesystem_hidden", "filesystem_readonly"],
     dataclasses.replace(HOST, bwrap=None, bwrap_error="uid map: Permission denied"),
     False, True, ["bubblewrap, filesystem_hidden, filesystem_readonly: the fallback",
                   "apt-get install", "(bwrap failed: uid map: Permission denied)"],
     ["seccomp", "use_bwrap"]),
    (["bubblewrap", "filesystem_readonly"], HOST, False, True,
     ["bubblewrap works here but use_bwrap=False was passed"], ["apt-get"]),
    (["rlimit_processes"], dataclasses.replace(HOST, root=False, kernel=(5, 10)),
     True, True, ["rlimit_processes: not set", "this one is 5.10"], ["apt-get"]),
    (["pid_namespace"], HOST, True, True,
     ["pid_namespace: missing although bubblewrap and the filters are in use"],
     ["apt-get"]),
    (["bubblewrap", "fd_memory_bounded", "filesystem_hidden", "seccomp"],
     dataclasses.replace(HOST, bwrap=None, machine="riscv64"), False, False,
     ["fd_memory_bounded, seccomp: no seccomp filter",
      "bubblewrap, filesystem_hidden: the fallback", "apt-get install"], []),
])
def test_missing_layers_message_names_the_cause(missing, host, bwrap_used,
                                                seccomp_built, says, not_says):
    msg = _pool.missing_message(missing, host, bwrap_used, seccomp_built)
    assert msg.startswith("solver.sandbox: isolation layers NOT in force on this "
                          "host: %s." % ", ".join(missing))
    for text in says:
        assert text in msg, msg
    for text in not_says:
        assert text not in msg.split("documented.", 1)[1], msg


def test_no_seccomp_for_the_architecture_is_warned_as_such(monkeypatch):
    """A host whose architecture has no filter: the warning names seccomp, not bwrap."""
    needs_bwrap()
    real = _host.probe_host()
    assert real.bwrap, "full isolation unavailable on this host: " + _host.BWRAP_INSTALL_HINT
    monkeypatch.setattr(_host, "probe_host",
                        lambda: dataclasses.replace(real, machine="riscv64"))
    _pool._warned.clear()
    with pytest.warns(RuntimeWarning) as caught:
        box = Sandbox(workers=1, timeout_s=SLOW_S)
    with box:
        layers = box.isolation()
        assert box.run("print(1)").stdout == "1\n"
    missing = sorted(k for k, v in layers.items() if not v)
    assert {"seccomp", "fd_memory_bounded"} <= set(missing) <= _pool._SECCOMP_LAYERS
    msg = str(caught[0].message)
    assert "%s: no seccomp filter for this architecture (riscv64" % (
        ", ".join(missing)) in msg
    assert "apt-get" not in msg and "fallback" not in msg


# --------------------------------------------------------------- snippet uids --
def test_uid_leases_are_exclusive_and_released_on_close(tmp_path):
    first, lease1 = _host.lease_uid(1000, 3, 2, str(tmp_path))
    second, lease2 = _host.lease_uid(1000, 3, 2, str(tmp_path))  # same start slot
    assert (first, second) == (1002, 1000)  # the search wraps around
    assert (tmp_path / "uid-1002.lock").read_text() == "%d\n" % os.getpid()
    lease1.close()
    assert _host.lease_uid(1000, 3, 2, str(tmp_path))[0] == 1002
    lease2.close()


def test_uid_lease_refuses_a_lock_dir_others_can_write(tmp_path):
    tmp_path.chmod(0o777)
    with pytest.raises(SandboxError, match="only uid"):
        _host.lease_uid(1000, 3, 0, str(tmp_path))


@pytest.mark.skipif(os.geteuid() != 0, reason="uids are leased only as root")
def test_no_free_uid_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(_host, "uid_lock_dir", lambda: str(tmp_path))
    monkeypatch.setattr(_pool, "_UID_SLOTS", 2)
    with make_box(workers=2) as full:
        held = {w.uid for w in full._all}
        assert len(held) == 2
        with pytest.raises(SandboxError, match="no free snippet uid: all 2 uids"):
            Sandbox(workers=1)
    with make_box(workers=1) as after:  # closing the first released its uids
        assert {w.uid for w in after._all} <= held


# ------------------------------------------------------------------ cleanup --
def test_close_leaves_no_process_behind():
    sandbox = make_box(workers=2, timeout_s=SLOW_S)
    code = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid(); time.sleep(600)\n"
            "time.sleep(600)")
    outcome: list = []

    def run():
        try:
            outcome.append(sandbox.run_many([code] * 2))
        except SandboxError as exc:  # closed under it: that is the point
            outcome.append(exc)

    runner = threading.Thread(target=run)
    runner.start()

    def all_running():  # bwrap, zygote, snippet and its child, per worker
        pids = set().union(*(_tree(p.pid) for p in sandbox._procs))
        return len(pids) >= 2 * 4 and pids

    pids = wait_for(all_running, "every worker's snippet and its child")
    sandbox.close()
    runner.join(timeout=SLOW_S)
    assert not runner.is_alive()
    assert isinstance(outcome[0], SandboxError) or all(
        r.status == "killed" for r in outcome[0])
    wait_for(lambda: not any(_alive(p) for p in pids), "the processes to exit")
    with pytest.raises(SandboxError):
        sandbox.run("print(1)")


def test_context_manager_closes():
    with make_box(workers=1) as sandbox:
        procs = list(sandbox._procs)
    assert all(p.poll() is not None for p in procs)


# ------------------------------------------------------ unprivileged hosts --
UNPRIVILEGED_SMOKE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from solver.sandbox import Sandbox
with Sandbox(workers=2, timeout_s=30, strict=True) as box:
    out = {"layers": box.isolation()}
    results = box.run_many([
        "print(sum(range(5)))", "x = bytearray(10**10)",
        "import os, signal; os.kill(0, signal.SIGKILL); print('alive')",
        "import socket; socket.create_connection(('1.1.1.1', 53), timeout=1)",
        "open('/etc/passwd')", "import os; print(os.getuid())"])
    results.insert(1, box.run("while True: pass", timeout_s=1.0))
    out["results"] = [(r.status, r.stdout) for r in results]
print(json.dumps(out))
"""


def _python_for(uid: int) -> str | None:
    """A python3 with ctypes that ``uid`` can run (root's may be unreachable)."""
    for exe in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(exe) and subprocess.run(
                ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid,
                 "--clear-groups", exe, "-c", "import ctypes, json"],
                capture_output=True).returncode == 0:
            return exe
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to uid 65534")
def test_unprivileged_user_namespace_mode():
    """The same guarantees when the trainer is not root (bwrap --unshare-user)."""
    needs_bwrap()
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) not installed")
    exe = _python_for(65534)
    if exe is None:
        pytest.skip("no python3 that uid 65534 can run")
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         "env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp", exe, "-c",
         UNPRIVILEGED_SMOKE, str(REPO)],
        capture_output=True, text=True, timeout=120, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert all(out["layers"].values()), out["layers"]
    assert "user-ns" in out["layers"]["bubblewrap"]
    assert [s for s, _ in out["results"]] == [
        "ok", "timeout", "memory", "ok", "error", "error", "ok"]
    assert out["results"][0][1] == "10\n" and out["results"][3][1] == "alive\n"
    assert out["results"][6][1] == "65534\n"


THREADS = '''
import threading
from concurrent.futures import ThreadPoolExecutor
live = threading.Barrier(16)  # all 16 alive at once, each with its own malloc arena in use
def work(i):
    live.wait(timeout=20)
    return len([str(k) * 3 for k in range(5000)]) + i
ts = [threading.Thread(target=work, args=(i,)) for i in range(16)]
[t.start() for t in ts]; [t.join() for t in ts]
live.reset()
with ThreadPoolExecutor(16) as ex:
    print(sum(ex.map(work, range(16))))
'''


def test_sixteen_threads_start_under_the_default_memory_limit(box):
    """At 256 MiB each thread's 8 MiB stack and 64 MiB malloc arena counted against RLIMIT_AS:
    8 threads did not start. The bound itself stays: 300 MiB is still refused."""
    r = box.run(THREADS)
    assert r.status == "ok", r.stderr[-400:]
    assert r.stdout.strip() == str(16 * 5000 + sum(range(16)))
    big = box.run("x = bytearray(300 << 20)\nprint(len(x))")
    assert big.status == "memory" and "MemoryError" in big.stderr
