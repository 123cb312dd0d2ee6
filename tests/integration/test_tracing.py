"""Spans for every handler: the gateway span and the shard span in one trace, over OTLP/HTTP."""

from __future__ import annotations

import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.integration.clients import Member, create_topic, wait_for
from tests.integration.conftest import Rafka

pytestmark = pytest.mark.integration


class OtlpReceiver:
    """A minimal OTLP/HTTP (protobuf) trace receiver."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                for rs in req.resource_spans:
                    service = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), "")
                    for ss in rs.scope_spans:
                        for sp in ss.spans:
                            receiver.spans.append({
                                "name": sp.name, "trace_id": sp.trace_id.hex(), "span_id": sp.span_id.hex(),
                                "parent": sp.parent_span_id.hex(), "service": service,
                                "attrs": {a.key: (a.value.int_value or a.value.string_value) for a in sp.attributes},
                            })
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def test_gateway_and_shard_spans_share_a_trace(tmp_path: Path) -> None:
    receiver = OtlpReceiver()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}", "OTEL_BSP_SCHEDULE_DELAY": "200",
           "OTEL_SERVICE_NAME": "rafka"}
    broker = Rafka(tmp_path / "data", shards=2, env=env).start()
    try:
        topic, group = f"t-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, topic, 2)
        m = Member(broker.bootstrap, group, topic)
        try:
            wait_for(lambda: m.assigned == {0, 1}, 30, "assignment")
        finally:
            m.close()

        def joined() -> bool:
            names = {s["name"] for s in receiver.spans}
            return {"rafka.gateway.group.join", "rafka.shard.group.join",
                    "rafka.shard.coordinator.rebalance-complete", "rafka.gateway.kafka.find-coordinator"} <= names

        wait_for(joined, 20, "join spans exported")
        by_id = {s["span_id"]: s for s in receiver.spans}
        shard_joins = [s for s in receiver.spans if s["name"] == "rafka.shard.group.join"]
        linked = [s for s in shard_joins if by_id.get(s["parent"], {}).get("name") == "rafka.gateway.group.join"]
        assert linked, "a shard join span must be the child of a gateway join span"
        assert all(by_id[s["parent"]]["trace_id"] == s["trace_id"] for s in linked)
        complete = [s for s in receiver.spans if s["name"] == "rafka.shard.coordinator.rebalance-complete"]
        assert any(s["attrs"].get("generation_id", 0) >= 1 and s["attrs"].get("leader_id") for s in complete)
        # each process exports on its own schedule: the shard's sync span may come in a later batch
        later = {"rafka.gateway.group.sync", "rafka.shard.group.sync", "rafka.gateway.group.heartbeat"}
        wait_for(lambda: later <= {s["name"] for s in receiver.spans}, 20, "sync and heartbeat spans exported")
    finally:
        broker.stop()
        receiver.close()
