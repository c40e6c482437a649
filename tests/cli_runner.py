"""`selfplay` for tests: in this process (``in_process``), or as a real process (``real_process``) where
the process is what a test checks: its exit code or output streams with import-time noise, kills and
signals, a lock held by another process, a fresh interpreter (a plugin found through config.yaml).

Both return a ``subprocess.CompletedProcess`` (returncode, stdout, stderr). In this process the CLI's
log lines reach ``stderr`` in the format the real process prints them, and so do the warnings a fresh
interpreter would show (Python's default filters); an exception the real process would die of (exit 1,
a traceback) is raised instead, so the test shows it in full. What the CLI changes in this process
(the root logger, torch's thread count, os.environ, the working directory) is put back afterwards.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _fresh_interpreter_warnings() -> None:
    """The warning filters of ``python -m curriculum.cli`` (no -W, no PYTHONWARNINGS): its defaults."""
    warnings.resetwarnings()  # what no filter names is shown once per place (warnings.defaultaction)
    for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
        warnings.simplefilter("ignore", category)  # each goes first: the reverse of sys.warnoptions' order
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")


def in_process(*args, check: bool = True) -> subprocess.CompletedProcess:
    """``curriculum.cli.main(args)`` with stdout and stderr captured, from the repository root."""
    from curriculum import cli

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    threads, cwd, environ = torch.get_num_threads(), os.getcwd(), dict(os.environ)
    root.handlers = []  # pytest's capture handlers: without them cli.main's basicConfig logs to `err`
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            _fresh_interpreter_warnings()
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: err.write(
                warnings.formatwarning(message, category, filename, lineno, line))
            try:
                rc = cli.main(argv)
            except SystemExit as exc:  # argparse: --help, --version, usage errors
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers, root.level = handlers, level
        torch.set_num_threads(threads)  # run.threads sets them for the whole process
        os.environ.clear()
        os.environ.update(environ)  # DS_ACCELERATOR and the like, set by the CLI for its own process
        os.chdir(cwd)
    proc = subprocess.CompletedProcess(["selfplay", *argv], rc or 0, out.getvalue(), err.getvalue())
    if check and proc.returncode != 0:
        raise AssertionError(f"selfplay {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def real_process(*args, check: bool = True, env: dict | None = None, timeout: int = 600,
                 launcher: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``python -m curriculum.cli args`` in a fresh interpreter, from the repository root; ``launcher``
    goes before ``-m`` (``-m torch.distributed.run ...``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_SILENT": "true", **(env or {})}
    proc = subprocess.run([sys.executable, *launcher, "-m", "curriculum.cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"selfplay {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr[-5000:]}")
    return proc
