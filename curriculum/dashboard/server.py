"""``selfplay dashboard RUN_DIR --serve``: the page over HTTP, rebuilt on every request."""
from __future__ import annotations

import errno
import http.server
import logging
from pathlib import Path

from curriculum.dashboard.page import render_any, run_dirs_of

log = logging.getLogger(__name__)


def serve(run_dir: Path | list[Path], port: int = 8000, host: str = "127.0.0.1",
          refresh_s: int = 30) -> http.server.HTTPServer:
    """An HTTP server whose ``/`` renders the page (of one run, or comparing several) afresh on
    every request and reloads itself every ``refresh_s``; call ``serve_forever()`` on it.
    Binds to localhost by default. A port that cannot be bound raises ``RuntimeError``."""
    run_dirs = run_dirs_of(run_dir)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            if self.path not in ("/", "/index.html"):
                self.send_error(404)
                return
            body = render_any(run_dirs, refresh_s).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):
            log.debug("dashboard: " + fmt, *args)

    try:
        return http.server.ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise RuntimeError(f"port {port} is in use; pick another with --port") from exc
        raise RuntimeError(f"cannot serve on {host}:{port} ({exc.strerror or exc}); pick another with --port "
                           "or --host") from exc
