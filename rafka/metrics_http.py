"""The metrics/health HTTP endpoint: /metrics, /healthz (liveness), /readyz (readiness)."""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client import REGISTRY as DEFAULT_REGISTRY


def _registry() -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        reg = CollectorRegistry()
        multiprocess.MultiProcessCollector(reg)
        return reg
    return DEFAULT_REGISTRY


def serve_metrics(port: int, host: str = "127.0.0.1", ready: Callable[[], bool] = lambda: True) -> ThreadingHTTPServer:
    """Serve metrics and health on ``host:port`` from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, ctype, code = generate_latest(_registry()), CONTENT_TYPE_LATEST, 200
            elif path == "/healthz":
                body, ctype, code = b"ok\n", "text/plain", 200
            elif path == "/readyz":
                ok = ready()
                body, ctype, code = (b"ready\n" if ok else b"not ready\n"), "text/plain", (200 if ok else 503)
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
