"""The metrics/health HTTP endpoint: /metrics, /healthz (liveness), /readyz (readiness),
and the REST admin API under /v1/ (``rafka.admin.rest``) once ``enable_admin_api`` was called.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client import REGISTRY as DEFAULT_REGISTRY


class StateFilesCollector:
    """Merges the shards' ``state-shard-*.prom`` files and joins them into consumer lag.

    ``kafka_consumergroup_lag`` = log end offset of the partition (from the shard that
    owns the log) − committed offset of the group (from the shard that owns the group).
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self):  # type: ignore[no-untyped-def]
        from pathlib import Path

        from prometheus_client.core import GaugeMetricFamily, Metric
        from prometheus_client.parser import text_string_to_metric_families

        merged: dict[str, Metric] = {}
        for path in sorted(Path(self.directory).glob("state-shard-*.prom")):
            try:
                text = path.read_text()
            except OSError:
                continue
            for fam in text_string_to_metric_families(text):
                into = merged.get(fam.name)
                if into is None:
                    merged[fam.name] = fam
                else:
                    into.samples.extend(fam.samples)
        yield from merged.values()
        leo: dict[tuple[str, str, str], float] = {}
        fam = merged.get("rafka_partition_log_end_offset")
        for sample in fam.samples if fam else []:
            leo[(sample.labels["org"], sample.labels["topic"], sample.labels["partition"])] = sample.value
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Log end offset minus committed offset",
                                labels=["org", "consumergroup", "topic", "partition"])
        fam = merged.get("kafka_consumergroup_current_offset")
        for sample in fam.samples if fam else []:
            key = (sample.labels["org"], sample.labels["topic"], sample.labels["partition"])
            end = leo.get(key)
            if end is None:  # no log end offset exported (past a shard's series cap, or not yet written): unknown
                continue
            lag.add_metric([sample.labels["org"], sample.labels["consumergroup"], key[1], key[2]],
                           max(0.0, end - sample.value))
        yield lag


def _registry() -> CollectorRegistry:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        from prometheus_client import multiprocess

        reg = CollectorRegistry()
        multiprocess.MultiProcessCollector(reg)
        reg.register(StateFilesCollector(directory))  # type: ignore[arg-type]
        return reg
    return DEFAULT_REGISTRY


_admin_config: Any = None
_admin_api: Any = None
_admin_lock = threading.Lock()


def enable_admin_api(cfg: Any) -> None:
    """Serve the REST admin API over the shards of ``cfg`` (a ``rafka.config.Config``)
    on every metrics server of this process (``rafka serve`` and a standalone gateway)."""
    global _admin_config, _admin_api
    with _admin_lock:
        _admin_config, _admin_api = cfg, None


def _admin(explicit: Any) -> Any:
    """The AdminApi to answer /v1/ with (built on first use), or None."""
    global _admin_api
    if explicit is not None:
        return explicit
    with _admin_lock:
        if _admin_api is None and _admin_config is not None:
            from rafka.admin.rest import AdminApi

            _admin_api = AdminApi.from_config(_admin_config)
        return _admin_api


def serve_metrics(port: int, host: str = "127.0.0.1", ready: Callable[[], bool] = lambda: True,
                  admin: Any = None) -> ThreadingHTTPServer:
    """Serve metrics and health on ``host:port`` from a daemon thread.

    ``admin`` (a ``rafka.admin.rest.AdminApi``) answers /v1/ paths; without it the API
    configured by ``enable_admin_api`` does, if any.
    """

    class Handler(BaseHTTPRequestHandler):
        def _admin_answer(self, method: str) -> bool:
            api = _admin(admin)
            answer = api.handle(method, self.path, self.headers) if api is not None else None
            if answer is None:
                return False
            body = answer.encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
            return True

        def _not_allowed(self) -> None:
            if not self._admin_answer(self.command):
                self.send_error(501, "Unsupported method")

        do_POST = do_PUT = do_PATCH = do_DELETE = _not_allowed

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path.startswith("/v1") and self._admin_answer("GET"):
                return
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
