"""The gateway's Kafka listener: framing, pipelining, ordering, flow control.

How this works: each client connection is a ``KafkaConnection`` (an
``asyncio.Protocol``). Bytes are cut into frames; each frame's header is parsed and
its handler started at once, so many requests are in flight per connection, but
responses are written strictly in request order: every request appends a slot to
a FIFO and the head slots are written as soon as they complete. When too many
requests are in flight, or the socket's write buffer is full, reading pauses
(flow control) and resumes when the backlog drains. Input that cannot be framed
or decoded closes that connection with a log line; every other client is
unaffected. Shutdown stops accepting, lets in-flight requests finish (bounded),
then closes connections.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from typing import Any

from rafka import telemetry
from rafka.gateway import api as api_mod
from rafka.gateway.api import REGISTRY, RequestContext
from rafka.gateway.router import ShardRouter
from rafka.ids import DEFAULT_ORG
from rafka.protocol import codec
from rafka.protocol.framing import FrameDecoder, FrameError

log = logging.getLogger("rafka.gateway")

API_VERSIONS = 18
UNSUPPORTED_VERSION = 35


class Gateway:
    """Shared state of one gateway process: config, router, connections."""

    def __init__(self, config: Any, router: ShardRouter) -> None:
        self.config = config
        self.router = router
        self.node_id: int = config.node_id
        self.advertised_host: str = config.advertised_host or config.host
        self.advertised_port: int = config.advertised_port or config.port
        self.connections: set[KafkaConnection] = set()
        self._server: asyncio.base_events.Server | None = None
        from rafka.gateway import handlers  # noqa: F401  (registers every API)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: KafkaConnection(self), self.config.host, self.config.port,
            reuse_address=True, reuse_port=getattr(self.config, "reuse_port", False), backlog=1024,
        )
        log.info("gateway listening on %s:%s (advertised %s:%s)", self.config.host, self.config.port,
                 self.advertised_host, self.advertised_port)

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting, drain in-flight requests (up to ``timeout``), close connections."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.stop_reading()
        pending = [t for c in self.connections for t in c.inflight()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()


class KafkaConnection(asyncio.Protocol):
    """One client connection."""

    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        self.decoder = FrameDecoder(gateway.config.max_request_bytes)
        self.queue: deque[asyncio.Future[bytes | None]] = deque()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_host = ""
        self.org_id = DEFAULT_ORG
        self.max_inflight: int = gateway.config.max_inflight_per_connection
        self._reading_paused = False
        self._writing_paused = False
        self._closed = False

    # -- asyncio.Protocol --------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.peer = f"{peer[0]}:{peer[1]}"
        self.client_host = f"/{peer[0]}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.gw.connections.add(self)
        telemetry.gateway_metrics().connections.inc()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self in self.gw.connections:
            self.gw.connections.discard(self)
            telemetry.gateway_metrics().connections.dec()
        for fut in self.queue:
            fut.cancel()
        self.queue.clear()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            self.bad_input("frame", str(exc))
            return
        for frame in frames:
            if self._closed:
                return
            self.handle_frame(frame)
        self._update_reading()

    # -- requests -----------------------------------------------------------
    def handle_frame(self, frame: bytes) -> None:
        try:
            api_key, version, correlation_id = codec.peek_key_version_correlation(frame)
        except codec.DecodeError as exc:
            self.bad_input("header", str(exc))
            return
        spec = REGISTRY.get(api_key)
        if spec is None:
            self.bad_input("api_key", f"unknown or unsupported API key {api_key}")
            return
        if not spec.min_version <= version <= spec.max_version:
            if api_key == API_VERSIONS:
                # Kafka answers an ApiVersions it cannot parse in v0 format, listing what it supports
                self._enqueue_done(codec.encode_response(
                    codec.response_class(API_VERSIONS, 0), correlation_id,
                    codec.from_op(codec.response_class(API_VERSIONS, 0),
                                  {"error_code": UNSUPPORTED_VERSION, "api_keys": supported_api_keys()})))
                return
            self.bad_input("version", f"API key {api_key} version {version} is not supported "
                                      f"(supported {spec.min_version}-{spec.max_version})")
            return
        req_cls = codec.request_class(api_key, version)
        try:
            header = codec.read_request_header(frame, req_cls.__header_schema__.__flexible__)  # type: ignore[union-attr]
            body = codec.decode_request(req_cls, frame, header.body_offset)  # type: ignore[arg-type]
            op = codec.to_op(body)
        except codec.DecodeError as exc:
            self.bad_input("body", str(exc))
            return
        ctx = RequestContext(api_key, version, correlation_id, header.client_id, self.client_host, self.org_id, self.gw)
        fut = asyncio.ensure_future(self._run(spec, ctx, op))
        self.queue.append(fut)
        fut.add_done_callback(self._on_done)

    async def _run(self, spec: api_mod.ApiSpec, ctx: RequestContext, op: dict[str, Any]) -> bytes | None:
        try:
            resp = await api_mod.run(spec, ctx, op)
        except Exception:
            log.exception("%s v%d from %s failed; closing the connection", spec.name, ctx.api_version, self.peer)
            self.close()
            return None
        if resp is None:
            return None
        cls = codec.response_class(ctx.api_key, ctx.api_version)
        return codec.encode_response(cls, ctx.correlation_id, codec.from_op(cls, resp))

    def _enqueue_done(self, data: bytes) -> None:
        fut: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        fut.set_result(data)
        self.queue.append(fut)
        self._on_done(fut)

    def _on_done(self, _fut: asyncio.Future[bytes | None]) -> None:
        queue = self.queue
        transport = self.transport
        while queue and queue[0].done():
            fut = queue.popleft()
            if fut.cancelled() or transport is None or self._closed:
                continue
            exc = fut.exception()
            if exc is not None:
                log.error("request from %s failed: %r", self.peer, exc)
                continue
            data = fut.result()
            if data is not None:
                transport.write(data)
        self._update_reading()

    def inflight(self) -> list[asyncio.Future[bytes | None]]:
        return [f for f in self.queue if not f.done()]

    # -- flow control and closing -------------------------------------------
    def _update_reading(self) -> None:
        if self.transport is None or self._closed:
            return
        should_pause = self._writing_paused or len(self.queue) >= self.max_inflight
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    def stop_reading(self) -> None:
        self.max_inflight = 0  # keeps reading paused while in-flight requests drain
        if self.transport is not None and not self._closed and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()

    def bad_input(self, reason: str, detail: str) -> None:
        log.warning("closing connection from %s: bad %s: %s", self.peer, reason, detail)
        telemetry.gateway_metrics().closed_bad_input.labels(reason).inc()
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self._closed:
            self._closed = True
            self.transport.close()


def supported_api_keys() -> list[dict[str, int]]:
    """ApiVersions' list, derived from the handler registry."""
    return [{"api_key": s.key, "min_version": s.min_version, "max_version": s.max_version}
            for s in sorted(REGISTRY.values(), key=lambda s: s.key)]
