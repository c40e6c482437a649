"""Stopping on a signal: the first SIGTERM/SIGINT asks the loop to checkpoint, a second exits now."""
from __future__ import annotations

import logging
import os
import signal
import threading

log = logging.getLogger("selfplay")


class StopOnSignal:
    """First SIGTERM/SIGINT: ask the loop to checkpoint after the current step. Second: exit now."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.requested = False
        self._previous = {}

    def _handle(self, signum, frame):
        if self.requested:
            log.error("second signal: exiting without a checkpoint")
            os._exit(128 + signum)
        self.requested = True
        log.warning("signal %s: finishing the current step, then writing a checkpoint", signal.Signals(signum).name)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, h in self._previous.items():
            signal.signal(s, h)
        return False
