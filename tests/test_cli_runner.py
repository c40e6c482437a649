"""The in-process CLI of the tests (tests/cli_runner.py) shows what the real process would show and
leaves this process as it found it."""
import logging
import os
import warnings

import torch

from curriculum import cli
from tests.cli_runner import in_process


def test_warnings_and_log_lines_reach_stderr_as_a_fresh_interpreter_shows_them(monkeypatch):
    def noisy(args):
        logging.getLogger("curriculum.test").info("a log line")
        warnings.warn("shown by a fresh interpreter", FutureWarning)
        warnings.warn("hidden by a fresh interpreter", DeprecationWarning)  # not from __main__
        print("out")
        return 0

    monkeypatch.setattr(cli, "_status", noisy)
    proc = in_process("status")
    assert proc.returncode == 0 and proc.stdout == "out\n"
    assert "INFO curriculum.test: a log line" in proc.stderr
    assert "FutureWarning: shown by a fresh interpreter" in proc.stderr
    assert "hidden by a fresh interpreter" not in proc.stderr


def test_what_the_cli_changes_in_this_process_is_put_back(monkeypatch):
    def changes(args):
        os.environ["DS_ACCELERATOR"] = "cpu"
        torch.set_num_threads(1)
        os.chdir("/")
        return 2

    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    monkeypatch.setattr(cli, "_status", changes)
    threads, cwd, handlers = torch.get_num_threads(), os.getcwd(), logging.getLogger().handlers[:]
    assert in_process("status", check=False).returncode == 2
    assert "DS_ACCELERATOR" not in os.environ and torch.get_num_threads() == threads and os.getcwd() == cwd
    assert logging.getLogger().handlers == handlers
