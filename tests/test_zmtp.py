"""ZMTP on the event loop against libzmq (pyzmq), both directions, over ipc:// (abstract names
too) and tcp://: messages of every size class arrive whole and in order, multipart messages
keep their frames, a dealer reconnects and queues nothing while it has no connection, and a
peer that breaks the protocol (not ZMTP, another security mechanism, an incompatible socket
type, an ERROR command, an oversized frame, no handshake) is disconnected with a log line,
not a crash; an owner callback that raises costs only its message."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvloop
import zmq

from rafka import zmtp

SIZES = [0, 1, 255, 256, 70_000, 3_000_000]  # short frames, the first long frame, a large message
GREETING_AND_READY = zmtp.GREETING + zmtp.ready(b"DEALER")  # what a dealer sends first


def _endpoints(tmp_path: Path, free_port: int) -> list[str]:
    return [f"ipc://{tmp_path}/z.sock", f"tcp://127.0.0.1:{free_port}"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _until(predicate: Callable[[], Any], seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def _run(main: Callable[[], Awaitable[None]]) -> None:
    uvloop.run(main())


async def _zmq_recv(sock: zmq.Socket[bytes], seconds: float = 5.0) -> list[bytes]:
    for _ in range(int(seconds / 0.005)):
        try:
            return sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            await asyncio.sleep(0.005)
    raise AssertionError("nothing received")


@pytest.mark.parametrize("kind", ["ipc", "tcp"])
def test_router_serves_a_libzmq_dealer(tmp_path: Path, kind: str) -> None:
    endpoint = _endpoints(tmp_path, _free_port())[kind == "tcp"]

    async def main() -> None:
        received: list[list[bytes]] = []
        idles: list[int] = []

        def on_message(frames: list[bytes]) -> None:
            received.append(frames)
            router.send([frames[0], b"re:" + frames[-1]])

        router = zmtp.Router(on_message, lambda: idles.append(len(received)))
        await router.bind(endpoint)
        dealer = zmq.Context.instance().socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(endpoint)
        try:
            for size in SIZES:
                dealer.send(bytes([size % 251]) * size)
            for size in SIZES:
                assert await _zmq_recv(dealer) == [b"re:" + bytes([size % 251]) * size]
            assert [len(m[1]) for m in received] == SIZES, "each message whole, in order"
            assert len({m[0] for m in received}) == 1, "one routing id per connection"
            assert idles, "the owner hears when a burst was read"
            dealer.send_multipart([b"a", b"", b"c" * 300])
            await _until(lambda: len(received) == len(SIZES) + 1)
            assert received[-1][1:] == [b"a", b"", b"c" * 300]
        finally:
            dealer.close(0)
            router.close()

    _run(main)


@pytest.mark.parametrize("kind", ["ipc", "tcp"])
def test_dealer_talks_to_a_libzmq_router_and_reconnects(tmp_path: Path, kind: str) -> None:
    endpoint = _endpoints(tmp_path, _free_port())[kind == "tcp"]

    async def main() -> None:
        ctx = zmq.Context.instance()
        received: list[list[bytes]] = []
        events: list[str] = []
        dealer = zmtp.Dealer(endpoint, received.append, lambda: events.append("up"), lambda: events.append("down"),
                             reconnect_ivl=0.02)
        assert not dealer.send(b"early"), "nothing is queued before a connection is ready"
        dealer.start()  # before the router exists: it keeps trying
        await asyncio.sleep(0.1)
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.bind(endpoint)
        try:
            await _until(lambda: dealer.connected)
            for size in SIZES:
                assert dealer.send(bytes([size % 7]) * size)
            for size in SIZES:
                ident, body = await _zmq_recv(router)
                assert body == bytes([size % 7]) * size
                router.send_multipart([ident, b"x" * size])
            await _until(lambda: len(received) == len(SIZES))
            assert [len(m[0]) for m in received] == SIZES
            assert events == ["up"]

            router.close(0)  # the peer goes away
            await _until(lambda: not dealer.connected)
            assert events == ["up", "down"]
            assert not dealer.send(b"lost"), "nothing is queued while disconnected"
            router = ctx.socket(zmq.ROUTER)
            router.setsockopt(zmq.LINGER, 0)
            router.bind(endpoint)
            await _until(lambda: dealer.connected)
            assert events == ["up", "down", "up"]
            assert dealer.send(b"after")
            assert (await _zmq_recv(router))[1] == b"after", "only what was sent after reconnecting arrives"
        finally:
            dealer.close()
            router.close(0)

    _run(main)


def test_our_dealer_and_router_together(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/z.sock"

    async def main() -> None:
        router = zmtp.Router(lambda frames: router.send([frames[0], frames[1][::-1]]), lambda: None)
        await router.bind(endpoint)
        got: list[list[bytes]] = []
        dealer = zmtp.Dealer(endpoint, got.append)
        dealer.start()
        try:
            await _until(lambda: dealer.connected)
            for i in range(200):
                dealer.send(str(i).encode() * (i * 10))
            await _until(lambda: len(got) == 200)
            assert [m[0] for m in got] == [(str(i).encode() * (i * 10))[::-1] for i in range(200)]
        finally:
            dealer.close()
            router.close()

    _run(main)


def _greeting(mechanism: bytes = b"NULL", major: int = 3) -> bytes:
    return b"\xff" + bytes(8) + b"\x7f" + bytes((major, 0)) + mechanism.ljust(20, b"\0") + bytes(32)


def _ready(socket_type: bytes) -> bytes:
    return zmtp.ready(socket_type)


@pytest.mark.parametrize(("name", "sent"), [
    ("not ZMTP", b"GET / HTTP/1.1\r\n\r\n" + bytes(60)),
    ("ZMTP 2", b"\xff" + bytes(8) + b"\x7f" + b"\x01" + bytes(60)),
    ("PLAIN mechanism", _greeting(b"PLAIN")),
    ("a PUB peer", _greeting() + _ready(b"PUB")),
    ("a message before READY", _greeting() + b"\x00\x01x"),
    ("an ERROR command", _greeting() + _ready(b"DEALER") + zmtp.command(b"ERROR", b"\x03bad")),
    ("an oversized frame", _greeting() + _ready(b"DEALER") + b"\x02" + struct.pack(">Q", 1 << 40)),
    ("a truncated READY property", _greeting() + zmtp.command(b"READY", b"\x0bSocket-Type\x00\x00\x00\x09DEAL")),
])
def test_a_peer_that_breaks_the_protocol_is_disconnected(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                         name: str, sent: bytes) -> None:
    path = tmp_path / "z.sock"

    async def main() -> None:
        received: list[list[bytes]] = []
        router = zmtp.Router(received.append, lambda: None)
        await router.bind(f"ipc://{path}")
        reader, writer = await asyncio.open_unix_connection(str(path))
        try:
            writer.write(sent)
            greeting = await asyncio.wait_for(reader.readexactly(64), 5)
            assert greeting[0] == 0xFF and greeting[10] == 3 and greeting[12:16] == b"NULL"
            rest = await asyncio.wait_for(reader.read(), 5)  # until the router closes the connection
            assert rest == zmtp.ready(b"ROUTER"), "the router closes the connection after its handshake"
            assert received == [], "nothing reaches the owner"
            # and it still serves a well-behaved peer
            ok = zmq.Context.instance().socket(zmq.DEALER)
            ok.setsockopt(zmq.LINGER, 0)
            ok.connect(f"ipc://{path}")
            ok.send(b"fine")
            await _until(lambda: received)
            assert received[0][1] == b"fine"
            ok.close(0)
        finally:
            writer.close()
            router.close()

    with caplog.at_level("WARNING", logger="rafka.zmtp"):
        _run(main)
    assert any("closing a rail connection" in r.getMessage() for r in caplog.records), name


async def _router_and_raw_peer(path: Path) -> tuple[zmtp.Router, asyncio.StreamReader, asyncio.StreamWriter]:
    router = zmtp.Router(lambda frames: None, lambda: None)
    await router.bind(f"ipc://{path}")
    reader, writer = await asyncio.open_unix_connection(str(path))
    return router, reader, writer


def test_a_ping_is_answered_with_a_pong(tmp_path: Path) -> None:
    path = tmp_path / "z.sock"

    async def main() -> None:
        router, reader, writer = await _router_and_raw_peer(path)
        try:
            writer.write(_greeting() + _ready(b"DEALER") + zmtp.command(b"PING", b"\x00\x0actx"))
            await asyncio.wait_for(reader.readexactly(64 + len(zmtp.ready(b"ROUTER"))), 5)
            pong = zmtp.command(b"PONG", b"ctx")
            assert await asyncio.wait_for(reader.readexactly(len(pong)), 5) == pong
        finally:
            writer.close()
            router.close()

    _run(main)


def test_the_owner_hears_of_a_read_once_its_messages_are_all_delivered(tmp_path: Path) -> None:
    """``on_read`` (where a shard flushes its replies) runs once per read that completed
    messages, after all of them, and not for a read that completed none."""
    path = tmp_path / "z.sock"

    async def main() -> None:
        events: list[Any] = []
        router = zmtp.Router(lambda frames: events.append(frames[1]), lambda: events.append("read"))
        await router.bind(f"ipc://{path}")
        reader, writer = await asyncio.open_unix_connection(str(path))
        try:
            writer.write(_greeting() + _ready(b"DEALER") + zmtp.command(b"PING", b"\x00\x0a"))
            await asyncio.wait_for(reader.readexactly(64 + len(zmtp.ready(b"ROUTER"))), 5)
            await asyncio.wait_for(reader.readexactly(len(zmtp.command(b"PONG", b""))), 5)
            assert events == [], "a handshake and a ping deliver no message"
            one, two = zmtp.frame(b"one") + b"one", zmtp.frame(b"two") + b"two"
            writer.write(one + two + one[:2])
            await _until(lambda: "read" in events)
            assert events == [b"one", b"two", "read"]
            writer.write(one[2:3])
            await asyncio.sleep(0.05)
            assert events == [b"one", b"two", "read"], "a read that completes nothing is not told"
            writer.write(one[3:])
            await _until(lambda: len(events) == 5)
            assert events[3:] == [b"one", "read"]
        finally:
            writer.close()
            router.close()

    _run(main)


def test_libzmq_heartbeats_keep_a_connection(tmp_path: Path) -> None:
    """A libzmq peer with ZMQ_HEARTBEAT_* set pings and drops a connection that does not pong."""
    endpoint = f"ipc://{tmp_path}/z.sock"

    async def main() -> None:
        received: list[list[bytes]] = []
        router = zmtp.Router(received.append, lambda: None)
        await router.bind(endpoint)
        dealer = zmq.Context.instance().socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.HEARTBEAT_IVL, 20)
        dealer.setsockopt(zmq.HEARTBEAT_TIMEOUT, 100)
        dealer.connect(endpoint)
        try:
            dealer.send(b"one")
            await _until(lambda: len(received) == 1)
            await asyncio.sleep(0.5)  # many heartbeat intervals, several timeouts
            dealer.send(b"two")
            await _until(lambda: len(received) == 2)
            assert received[0][0] == received[1][0], "the same connection: heartbeats were answered"
        finally:
            dealer.close(0)
            router.close()

    _run(main)


@pytest.mark.parametrize("endpoint", ["shard-0", "inproc://x", "tcp://host", "tcp://host:port", "ipc://"])
def test_bad_endpoints_are_refused(endpoint: str) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        zmtp.parse_endpoint(endpoint)


def test_endpoints_parse() -> None:
    assert zmtp.parse_endpoint("ipc:///run/rafka/shard-0.sock") == ("ipc", "/run/rafka/shard-0.sock")
    assert zmtp.parse_endpoint("tcp://10.0.0.5:5701") == ("tcp", ("10.0.0.5", 5701))
    assert zmtp.parse_endpoint("tcp://*:5701") == ("tcp", ("0.0.0.0", 5701))
    assert zmtp.parse_endpoint("tcp://[::1]:5701") == ("tcp", ("::1", 5701))


def test_a_peer_that_never_completes_its_handshake_is_disconnected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zmtp, "HANDSHAKE_IVL", 0.2)
    path = tmp_path / "z.sock"

    async def main() -> None:
        router, reader, writer = await _router_and_raw_peer(path)
        try:
            writer.write(_greeting())  # and then nothing
            start = asyncio.get_running_loop().time()
            await asyncio.wait_for(reader.read(), 5)  # until the router closes the connection
            assert asyncio.get_running_loop().time() - start < 2
        finally:
            writer.close()
            router.close()

    _run(main)


def test_a_callback_that_raises_costs_its_message_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    endpoint = f"ipc://{tmp_path}/z.sock"

    async def main() -> None:
        received: list[bytes] = []

        def on_message(frames: list[bytes]) -> None:
            if frames[1] == b"bad":
                raise ValueError("a bug in the owner")
            received.append(frames[1])

        router = zmtp.Router(on_message, lambda: None)
        await router.bind(endpoint)
        dealer = zmq.Context.instance().socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(endpoint)
        try:
            for body in (b"one", b"bad", b"two"):
                dealer.send(body)
            await _until(lambda: len(received) == 2)
            assert received == [b"one", b"two"], "the connection goes on"
            assert len(router._peers) == 1
        finally:
            dealer.close(0)
            router.close()

    with caplog.at_level("ERROR", logger="rafka.zmtp"):
        _run(main)
    assert any("rail callback failed" in r.getMessage() for r in caplog.records)


def test_a_dealer_closed_during_its_handshake_drops_that_connection(tmp_path: Path) -> None:
    path = tmp_path / "z.sock"

    async def main() -> None:
        accepted: list[asyncio.StreamReader] = []

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(reader)  # reads the greeting, never answers

        server = await asyncio.start_unix_server(silent, str(path))
        dealer = zmtp.Dealer(f"ipc://{path}", lambda frames: None)
        dealer.start()
        try:
            await _until(lambda: accepted)
            await asyncio.sleep(0.05)
            dealer.close()
            assert await asyncio.wait_for(accepted[0].read(), 2) == GREETING_AND_READY, "then the end of the stream"
            assert not dealer.connected
        finally:
            server.close()

    _run(main)


def test_a_dealer_says_once_that_its_peer_is_not_zmtp(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "z.sock"

    async def main() -> None:
        async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(_greeting() + zmtp.command(b"ERROR", b"\x0bnot allowed"))
            await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(refuse, str(path))
        dealer = zmtp.Dealer(f"ipc://{path}", lambda frames: None, reconnect_ivl=0.01)
        dealer.start()
        await asyncio.sleep(0.5)  # dozens of tries
        dealer.close()
        server.close()

    with caplog.at_level("WARNING", logger="rafka.zmtp"):
        _run(main)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "not allowed" in lines[0], lines


def test_an_abstract_ipc_endpoint(tmp_path: Path) -> None:
    name = f"ipc://@rafka-test-{tmp_path.name}"

    async def main() -> None:
        router = zmtp.Router(lambda frames: router.send([frames[0], b"re:" + frames[1]]), lambda: None)
        await router.bind(name)
        dealer = zmq.Context.instance().socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(name)  # libzmq's spelling of the same abstract socket
        try:
            dealer.send(b"hi")
            assert await _zmq_recv(dealer) == [b"re:hi"]
        finally:
            dealer.close(0)
            router.close()

    _run(main)


def test_a_peer_that_stops_reading_is_dropped_not_buffered_without_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(zmtp, "MAX_BUFFERED", 1 << 20)
    path = tmp_path / "z.sock"

    async def main() -> None:
        router, _reader, writer = await _router_and_raw_peer(path)
        try:
            writer.write(_greeting() + _ready(b"DEALER"))  # then reads nothing
            await _until(lambda: router._peers)
            [rid] = router._peers
            sent = 0
            while router.send([rid, bytes(100_000)]):
                sent += 1
                assert sent < 1000, "still buffering"
                await asyncio.sleep(0)
            assert not router._peers, "the stuck peer is dropped"
        finally:
            writer.close()
            router.close()

    with caplog.at_level("WARNING", logger="rafka.zmtp"):
        _run(main)
    assert any("unread" in r.getMessage() for r in caplog.records)
