"""The metrics/health HTTP endpoint: /metrics, /healthz (liveness), /readyz (readiness)."""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

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
            end = leo.get(key, 0.0)
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
