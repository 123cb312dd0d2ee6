"""The gateway's Kafka listener: framing, pipelining, ordering, flow control.

How this works: each client connection is a ``KafkaConnection`` (an
``asyncio.Protocol``). Bytes are cut into frames; each frame's header is parsed and
its handler started at once, so many requests are in flight per connection, but
responses are written strictly in request order: every request appends a slot to
a FIFO and the head slots are written as soon as they complete (OffsetCommits back
to back in one read that differ only in their offsets are one handler call and one
slot, written with every response of the run: ``commit_runs.py``). Their ops reach
the shards in request order too: while a request waits before it can send its op (a
topic lookup), the frames after it wait in ``_held`` (``api.py``, "Request order").
No loop pass separates the steps of a shard round trip: the ops a client read queued
go to the shards once the read has been handled, a shard's reply resumes its request
at once, and the responses one reply message completed are written once it has been
handled. When too many requests are in flight, or the socket's write buffer is full,
reading pauses (flow control) and resumes when the backlog drains. Input that cannot be framed
or decoded closes that connection with a log line; every other client is
unaffected. Shutdown stops accepting, lets in-flight requests finish (bounded),
then closes connections.

Security and limits: with ``--tls-cert``/``--tls-key`` the listener speaks TLS
(``--tls-client-ca`` additionally requires client certificates). With
``--auth-users`` every connection must complete a SASL exchange
(``handlers/sasl.py``, ``auth.py``) before anything but ApiVersions,
SaslHandshake and SaslAuthenticate; any other request first closes the
connection, as Kafka does. Until authenticated, a connection handles one SASL
request at a time: frames behind an unfinished SASL request wait in ``_held``.
Success sets the connection's ``org_id`` (the user's organisation), which every
later request carries to the shards. ``kill -HUP`` on the gateway process
(``rafka-gateway`` in ``ps``) reloads the users file; a bad file keeps the old
users. Limits: ``max_connections`` (new connections above it are closed),
``idle_timeout_ms`` (a periodic sweep closes connections with nothing in flight
and no traffic for that long), ``max_inflight_per_connection`` (reading pauses)
and ``max_request_bytes`` (the connection is closed; 512 KiB until a client has
authenticated, Kafka's ``sasl.server.max.receive.size``); each hit logs a line
(rate limited, except an oversized request, logged like other bad input) and
counts ``rafka_gateway_limit_hits_total{limit}``. A request body is read straight
into its op dict by ``protocol/fastread.py``, which refuses any length or array
count that overruns the frame (kio, its fallback, runs only after ``wirecheck.py``
has done the same: kio would otherwise abort the process on an absurd count).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import signal
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import cache
from typing import Any

from prometheus_client import Counter

from rafka import ids, telemetry
from rafka.config import sasl_mechanisms
from rafka.datadir import recorded_cluster_id
from rafka.gateway import api as api_mod
from rafka.gateway import auth
from rafka.gateway.api import REGISTRY, RequestContext
from rafka.gateway.commit_runs import OFFSET_COMMIT, CommitRun
from rafka.gateway.inline import InlineRequest
from rafka.gateway.router import ShardRouter
from rafka.ids import DEFAULT_ORG
from rafka.logs import Throttled
from rafka.loops import Soon, idle_poll
from rafka.protocol import codec, fastread, fastwrite
from rafka.protocol.framing import FrameDecoder, FrameError, FrameTooLarge

log = logging.getLogger("rafka.gateway")

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
UNSUPPORTED_VERSION = 35
PRE_AUTH_APIS = frozenset((API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE))
# A handler's response dict holding this key (True) is written and then the connection closed.
CLOSE_AFTER = "_rafka_close_after"
# ... holding this one is not written: the connection closes once the responses before it are out.
CLOSE_INSTEAD = "_rafka_close_instead"

_connection: contextvars.ContextVar[KafkaConnection] = contextvars.ContextVar("rafka_connection")


def current_connection() -> KafkaConnection:
    """The connection whose request the running handler serves."""
    return _connection.get()


@cache
def limit_hits() -> Counter:
    return Counter("rafka_gateway_limit_hits", "Connection limits hit, by limit", ["limit"])


class _LimitLog:
    """Count every limit hit; log one a second per limit, saying how many were skipped."""

    def __init__(self) -> None:
        self.lines = Throttled(log)

    def hit(self, limit: str, msg: str, *args: Any) -> None:
        limit_hits().labels(limit).inc()
        self.lines.warning(f"{limit} hits", msg, *args)


LIMIT_LOG = _LimitLog()


class _Closing(bytes):
    """A response after which the connection closes."""


def ssl_context(config: Any) -> ssl.SSLContext | None:
    """The listener's TLS context from ``tls_cert``/``tls_key``/``tls_client_ca`` (None: plaintext)."""
    cert, key, ca = config.tls_cert, config.tls_key, config.tls_client_ca
    if not cert and not key:
        if ca:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if not cert or not key:
        raise ValueError("TLS needs both --tls-cert and --tls-key")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if ca:
        ctx.load_verify_locations(cafile=ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class Gateway:
    """Shared state of one gateway process: config, router, connections, users."""

    def __init__(self, config: Any, router: ShardRouter) -> None:
        self.config = config
        self.router = router
        self.node_id: int = config.node_id
        self.cluster_id = (config.cluster_id or recorded_cluster_id(config.data_dir)
                           or ids.derived_cluster_id(*config.endpoints()))
        self.advertised_host: str = config.advertised_host or config.host
        self.advertised_port: int = config.advertised_port or config.port
        self.connections: set[KafkaConnection] = set()
        self.max_connections: int = getattr(config, "max_connections", 0) or 0
        self.idle_timeout: float = (getattr(config, "idle_timeout_ms", 0) or 0) / 1000
        self.users_path: str | None = getattr(config, "auth_users", None)
        self.users: auth.Users | None = auth.load_users(self.users_path) if self.users_path else None
        self.sasl_mechanisms = sasl_mechanisms(config)  # offered once --auth-users is given
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._sighup = False
        from rafka.gateway.txn import TxnSweeper

        self.txn_sweeper = TxnSweeper(router)  # finishes prepared and timed-out transactions
        from rafka.gateway.reconcile import LogReconciler

        self.reconciler = LogReconciler(router)  # brings back shards' logs in line with the catalogue
        self._due: list[KafkaConnection] = []  # connections with responses to write (write_soon)
        self.write_due = Soon(self._write_due)  # one write per connection of the responses completed since
        router.on_replies = self.write_due  # a reply message's answers go out when it has been handled
        from rafka.gateway import handlers  # noqa: F401  (registers every API)

        errors = telemetry.gateway_metrics().errors
        for spec in REGISTRY.values():  # at 0 from the start, so a first exception is an increase alerts see
            errors.labels(spec.name, "exception")

    @property
    def auth_required(self) -> bool:
        return self.users is not None

    def write_soon(self, conn: KafkaConnection) -> None:
        """``conn`` has responses to write: at the end of the reply message that completed them
        (``write_due``), or on the next loop pass, whichever comes first."""
        self._due.append(conn)
        self.write_due.soon()

    def _write_due(self) -> None:
        due, self._due = self._due, []
        for conn in due:
            conn.write_ready()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        tls = ssl_context(self.config)
        self._server = await loop.create_server(
            lambda: KafkaConnection(self), self.config.host, self.config.port,
            reuse_address=True, reuse_port=getattr(self.config, "reuse_port", False), backlog=1024,
            ssl=tls, ssl_handshake_timeout=10.0 if tls is not None else None,
        )
        if self.idle_timeout > 0:
            self._sweeper = asyncio.ensure_future(self._sweep_idle())
        self.txn_sweeper.start()
        self.reconciler.start()
        try:
            loop.add_signal_handler(signal.SIGHUP, self.reload_users)
            self._sighup = True
        except (RuntimeError, ValueError, NotImplementedError):  # not the main thread, or no signals
            pass
        security = "SASL_SSL" if tls and self.users else "SSL" if tls else "SASL_PLAINTEXT" if self.users else "PLAINTEXT"
        log.info("gateway listening on %s:%s (advertised %s:%s, %s%s%s)", self.config.host, self.config.port,
                 self.advertised_host, self.advertised_port, security,
                 ", client certificates required" if tls is not None and self.config.tls_client_ca else "",
                 f", {len(self.users)} users from {self.users_path}" if self.users is not None else "")

    def reload_users(self) -> None:
        """SIGHUP: re-read the users file; on error keep the current users."""
        if not self.users_path:
            log.info("SIGHUP: no --auth-users file configured, nothing to reload")
            return
        try:
            users = auth.load_users(self.users_path)
        except auth.UsersFileError as exc:
            log.error("SIGHUP: keeping the %d current users: %s", len(self.users or ()), exc)
            return
        self.users = users
        log.info("SIGHUP: reloaded %d users from %s (open connections keep their identity until they re-authenticate)",
                 len(users), self.users_path)

    async def _sweep_idle(self) -> None:
        """Close connections with nothing in flight and no traffic for ``idle_timeout``."""
        timeout = self.idle_timeout
        interval = min(max(timeout / 10, 0.05), 10.0)
        while True:
            await asyncio.sleep(interval)
            deadline = time.monotonic() - timeout
            for conn in [c for c in self.connections if c.last_active < deadline and c.idle()]:
                LIMIT_LOG.hit("idle_timeout", "closing connection from %s: idle for more than %d ms",
                              conn.peer, int(timeout * 1000))
                conn.close()

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting, drain in-flight requests (up to ``timeout``), close connections."""
        if self._sighup:
            try:  # a reload while draining: nothing to do (the default action would kill the gateway)
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, lambda: None)
            except (RuntimeError, ValueError):
                pass
            self._sighup = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self.txn_sweeper.stop()
        self.reconciler.stop()
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
        telemetry.gateway_meter().flush()  # the last requests' counts, before the process exits


PRE_AUTH_MAX_FRAME = 512 * 1024  # Kafka's sasl.server.max.receive.size (CVE-2022-34917)


class KafkaConnection(asyncio.Protocol):
    """One client connection."""

    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        # until it authenticates a client is held to Kafka's sasl.server.max.receive.size (lifted
        # in handlers/sasl.py when it succeeds)
        self.decoder = FrameDecoder(gateway.config.max_request_bytes if not gateway.auth_required
                                    else min(gateway.config.max_request_bytes, PRE_AUTH_MAX_FRAME))
        self.queue: deque[asyncio.Future[bytes | None]] = deque()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_host = ""
        self.org_id = DEFAULT_ORG
        self.auth = auth.ConnectionAuth(required=gateway.auth_required)
        self.max_inflight: int = gateway.config.max_inflight_per_connection
        self.last_active = time.monotonic()
        # frames waiting behind an unfinished SASL request, or a request not yet able to send its op
        self._held: deque[bytes] = deque()
        self.ordering = api_mod.Ordering(self._release_held_soon)
        self._commit_run: CommitRun | None = None  # OffsetCommits of this read answered by one handler call
        # runs in the response order, with their requests past the first: max_inflight counts
        # requests, and a run is one slot
        self._runs: deque[tuple[asyncio.Future[bytes | None], int]] = deque()
        self._in_runs = 0
        self._sasl_pending = 0
        self._answered = False  # a request finished during dispatch; its response awaits the write
        self._write_scheduled = False
        self._reading_paused = False
        self._writing_paused = False
        self._closed = False
        self._last_fetch: asyncio.Future[None] | None = None  # see fetch_turn
        self._write_waiters: list[asyncio.Future[None]] = []

    @property
    def principal(self) -> str | None:
        return self.auth.principal

    # -- asyncio.Protocol --------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.loop = asyncio.get_running_loop()  # held: each lookup is a getpid() syscall on 3.11
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.peer = f"{peer[0]}:{peer[1]}"
        self.client_host = f"/{peer[0]}"
        cap = self.gw.max_connections
        if cap > 0 and len(self.gw.connections) >= cap:
            LIMIT_LOG.hit("max_connections", "closing new connection from %s: %d connections open (max_connections %d)",
                          self.peer, len(self.gw.connections), cap)
            self._closed = True
            transport.close()
            return
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
        self._held.clear()
        self._commit_run = None
        self._runs.clear()
        self._in_runs = 0
        self._wake_writers()
        # the ordering's callback refers back to this connection: dropped, the connection is freed
        # as soon as its last request is, not by a pass of the cyclic GC
        self.ordering.resume = _nothing_held

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()
        self._wake_writers()

    def _wake_writers(self) -> None:
        waiters, self._write_waiters = self._write_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def fetch_turn(self) -> tuple[Awaitable[None] | None, Callable[[], None]]:
        """One Fetch of a connection at a time, as Kafka serves a connection's requests one by
        one: a client that pipelines Fetches, reading their answers or not, cannot make the
        gateway and a shard build hundreds of responses at once. A Fetch starts once the one
        before it has its response and the socket is not write-paused. Returns what to wait for
        first (None: nothing) and the call that ends this Fetch's turn."""
        before, mine = self._last_fetch, self.loop.create_future()
        self._last_fetch = mine

        def release() -> None:
            if not mine.done():
                mine.set_result(None)

        if (before is None or before.done()) and not self._writing_paused:
            return None, release
        return self._fetch_ready(before), release

    async def _fetch_ready(self, before: asyncio.Future[None] | None) -> None:
        if before is not None:
            await before
        while self._writing_paused and not self._closed:
            waiter = self.loop.create_future()
            self._write_waiters.append(waiter)
            await waiter

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self.last_active = time.monotonic()
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            if isinstance(exc, FrameTooLarge) and "size -" not in str(exc):  # negative sizes are just bad input
                limit_hits().labels("max_request_bytes").inc()  # bad_input logs the line
            self.bad_input("frame", str(exc))
            return
        if frames:  # a whole request: a slow sender's bytes between them are no reason to poll
            idle_poll.kick()
            for frame in frames:
                if self._closed:
                    break
                self.handle_frame(frame)
            self._end_dispatch()
            if self._closed:
                return
        self._write_answered()

    # -- requests -----------------------------------------------------------
    def _must_wait(self) -> bool:
        """A request waits before its op, or (before authentication) a SASL request is unfinished:
        before authentication, SASL requests are handled one at a time."""
        return self.ordering.waiting > 0 or (self._sasl_pending > 0 and not self.auth.authenticated)

    def handle_frame(self, frame: bytes) -> None:
        if self._held or self._must_wait():
            self._held.append(frame)
            return
        self._dispatch(frame)

    def _release_held(self) -> None:
        while self._held and not self._closed and not self._must_wait():
            self._dispatch(self._held.popleft())
        self._end_dispatch()
        self._write_answered()

    def _end_dispatch(self) -> None:
        """After a burst of frames: start the open run, and send the shards the ops queued."""
        self._end_run()
        self.gw.router.flush()

    def _release_held_soon(self) -> None:
        """No request waits before its op any more: the frames held behind it go a loop pass
        later, after the op the last one sends once its wait is over."""
        if self._held and not self._closed:
            self.loop.call_soon(self._release_held)

    def _write_answered(self) -> None:
        """Write the responses of requests answered during dispatch; update flow control."""
        if self._answered:
            self._answered = False
            self.write_ready()
        else:
            self._update_reading()

    def _dispatch(self, frame: bytes) -> None:
        run = self._commit_run
        if run is not None and run.matches(frame) and self._session_valid():
            if run.slot is None:  # the run's place: nothing was queued after its first frame
                run.slot = self._slot()
            run.frames.append(frame)
            return
        self._end_run()
        if self._closed:  # the run's last frame was bad input
            return
        if self.ordering.waiting:  # the run waits before its op: this frame may not overtake it
            self._held.appendleft(frame)
            return
        state = self.auth
        if not state.authenticated and state.raw and state.exchange is not None:
            self._raw_sasl_token(frame)
            return
        try:
            api_key, version, correlation_id = codec.peek_key_version_correlation(frame)
        except codec.DecodeError as exc:
            self.bad_input("header", str(exc))
            return
        if not state.authenticated and api_key not in PRE_AUTH_APIS:
            log.warning("closing connection from %s: request with API key %d before SASL authentication",
                        self.peer, api_key)
            telemetry.gateway_metrics().closed_bad_input.labels("unauthenticated").inc()
            self.close()
            return
        if api_key not in PRE_AUTH_APIS and not self._session_valid():
            why = "its SASL session expired" if state.exchange is None else "a request during re-authentication"
            log.info("closing connection from %s: %s", self.peer, why)
            telemetry.gateway_metrics().closed_bad_input.labels("session_expired").inc()
            self.close()
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
        if api_key == OFFSET_COMMIT:  # the frame opens a run; the handler runs when it ends
            self._commit_run = CommitRun(frame, version)
            return
        self._start(spec, frame, version, correlation_id)

    def _start(self, spec: api_mod.ApiSpec, frame: bytes, version: int, correlation_id: int,
               run: CommitRun | None = None) -> None:
        """Decode the request and run its handler; the response goes to the end of the queue, or
        to every request of ``run`` (``frame`` is its last)."""
        api_key = spec.key
        req_cls = codec.request_class(api_key, version)
        try:
            header = codec.read_request_header(frame, req_cls.__header_schema__.__flexible__)  # type: ignore[union-attr]
            op = fastread.decode_request(req_cls, frame, header.body_offset)  # type: ignore[arg-type]
        except codec.DecodeError as exc:
            self.bad_input("body", str(exc))
            return
        ctx = RequestContext(api_key, version, correlation_id, header.client_id, self.client_host, self.org_id, self.gw,
                             self, requests=len(run.frames) if run is not None else 1)
        sasl = api_key == SASL_HANDSHAKE or api_key == SASL_AUTHENTICATE
        context = None
        if sasl:
            context = contextvars.copy_context()
            context.run(_connection.set, self)
            self._sasl_pending += 1
        fut = InlineRequest(self._handle(spec, ctx, op), self.loop, context)
        if run is not None:
            if fut.done():
                run.answer(fut)
                self._answered = True
            else:
                fut.on_done = lambda f: (run.answer(f), self._on_done(f))
            return
        self.queue.append(fut)
        if fut.done():
            self._answered = True  # written once the whole burst has been dispatched
        else:
            fut.on_done = self._on_done
        if sasl:
            fut.add_done_callback(self._on_sasl_done)

    def _session_valid(self) -> bool:
        """Kafka's SocketServer closes a connection whose SASL session expired (KIP-368), and one
        that sends other requests while it re-authenticates (an exchange left unfinished would
        otherwise keep a revoked user's session open for good)."""
        state = self.auth
        return state.expires is None or (state.exchange is None and time.monotonic() <= state.expires)

    def _end_run(self) -> None:
        """Run the handler of the open OffsetCommit run, on its last frame."""
        run = self._commit_run
        if run is None:
            return
        self._commit_run = None
        if self._closed:
            return
        frame = run.frames[-1]
        _key, _version, correlation_id = codec.peek_key_version_correlation(frame)
        if run.slot is None:  # a lone commit: an ordinary request
            self._start(REGISTRY[OFFSET_COMMIT], frame, run.version, correlation_id)
            return
        extra = len(run.frames) - 1
        self._runs.append((run.slot, extra))
        self._in_runs += extra
        self._start(REGISTRY[OFFSET_COMMIT], frame, run.version, correlation_id, run)

    def _slot(self) -> asyncio.Future[bytes | None]:
        """A place at the end of the response order, for a response that comes by other means."""
        fut: asyncio.Future[bytes | None] = self.loop.create_future()
        self.queue.append(fut)
        return fut

    def _raw_sasl_token(self, frame: bytes) -> None:
        """After SaslHandshake v0 the client sends SASL tokens without Kafka headers."""
        from rafka.gateway.handlers.sasl import raw_token

        reply = raw_token(self, frame)
        if reply is None:
            self.close()
            return
        self._enqueue_done(len(reply).to_bytes(4, "big") + reply)

    def _on_sasl_done(self, _fut: asyncio.Future[bytes | None]) -> None:
        self._sasl_pending -= 1
        self.write_ready()  # the SASL answer goes out before anything held behind it runs
        if self._held and not self._closed:
            self._release_held()

    async def _handle(self, spec: api_mod.ApiSpec, ctx: RequestContext, op: dict[str, Any]) -> bytes | None:
        try:
            resp = await api_mod.run(spec, ctx, op)
        except Exception:
            log.exception("%s v%d from %s failed; closing the connection", spec.name, ctx.api_version, self.peer)
            self.close()
            return None
        if resp is None:
            return None
        if resp.get(CLOSE_INSTEAD):
            return _Closing(b"")
        cls = codec.response_class(ctx.api_key, ctx.api_version)
        data = fastwrite.encode_response(cls, ctx.correlation_id, resp)
        return _Closing(data) if resp.get(CLOSE_AFTER) else data

    def _enqueue_done(self, data: bytes) -> None:
        self._slot().set_result(data)
        self._answered = True

    def _on_done(self, _fut: asyncio.Future[bytes | None]) -> None:
        """A request finished: write once the reply message or loop pass that finished it has
        finished the others due too."""
        if not self._write_scheduled:
            self._write_scheduled = True
            self.gw.write_soon(self)

    def write_ready(self) -> None:
        """Write every finished response at the head of the queue, in order, with one write."""
        self._write_scheduled = False
        queue = self.queue
        transport = self.transport
        out: list[bytes] = []
        close = False
        while queue and queue[0].done():
            fut = queue.popleft()
            if self._runs and self._runs[0][0] is fut:
                self._in_runs -= self._runs.popleft()[1]
            if fut.cancelled() or transport is None or self._closed:
                continue
            exc = fut.exception()
            if exc is not None:  # no response can be made (a bug): the client must not wait for one
                log.error("request from %s failed: %r; closing the connection", self.peer, exc)
                close = True
                break
            data = fut.result()
            if data is not None:
                out.append(data)
                if type(data) is _Closing:
                    close = True
                    break
        if out and transport is not None:
            self.last_active = time.monotonic()
            transport.write(out[0] if len(out) == 1 else b"".join(out))
            if close:
                self.close()  # the transport flushes what was written, then closes
                return
        self._update_reading()

    def inflight(self) -> list[asyncio.Future[bytes | None]]:
        return [f for f in self.queue if not f.done()]

    def idle(self) -> bool:
        """Nothing in flight or waiting."""
        return not self.queue and not self._held

    # -- flow control and closing -------------------------------------------
    def _update_reading(self) -> None:
        if self.transport is None or self._closed:
            return
        backlog = len(self.queue) + self._in_runs + len(self._held)
        should_pause = self._writing_paused or backlog >= self.max_inflight
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
            if backlog >= self.max_inflight > 0:
                LIMIT_LOG.hit("max_inflight", "pausing reads from %s: %d requests in flight "
                              "(max_inflight_per_connection %d)", self.peer, backlog, self.max_inflight)
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


def _nothing_held() -> None:
    """A closed connection's ordering callback: it holds nothing more to release."""


def supported_api_keys() -> list[dict[str, int]]:
    """ApiVersions' list, derived from the handler registry."""
    return [{"api_key": s.key, "min_version": s.min_version, "max_version": s.max_version}
            for s in sorted(REGISTRY.values(), key=lambda s: s.key)]
