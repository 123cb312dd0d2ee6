"""Connection limits: count cap, idle timeout, in-flight cap, request size; each logs and counts a hit."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from rafka.gateway.server import Gateway, limit_hits
from tests.gateway.harness import Driver, FakeRouter, encode_request, make_gateway

API_VERSIONS = encode_request(18, 0, {})


def hits(limit: str) -> float:
    return limit_hits().labels(limit)._value.get()  # type: ignore[no-any-return]


async def serve(**options: Any) -> tuple[Gateway, int]:
    gw = make_gateway(host="127.0.0.1", port=0, **options)
    await gw.start()
    assert gw._server is not None
    return gw, gw._server.sockets[0].getsockname()[1]


async def is_open(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """True if the gateway answers an ApiVersions on this connection."""
    try:
        writer.write(API_VERSIONS)
        await writer.drain()
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 2))[0]
        await asyncio.wait_for(reader.readexactly(size), 2)
        return True
    except (asyncio.IncompleteReadError, ConnectionError):
        return False


async def closed_by_peer(reader: asyncio.StreamReader, timeout: float = 3.0) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout) == b""
    except ConnectionError:
        return True


def test_max_connections_closes_new_connections(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        gw, port = await serve(max_connections=2)
        before = hits("max_connections")
        try:
            a = await asyncio.open_connection("127.0.0.1", port)
            b = await asyncio.open_connection("127.0.0.1", port)
            assert await is_open(*a) and await is_open(*b)
            c = await asyncio.open_connection("127.0.0.1", port)
            assert await closed_by_peer(c[0])
            assert hits("max_connections") == before + 1
            assert any("max_connections 2" in r.getMessage() for r in caplog.records)
            assert await is_open(*a) and len(gw.connections) == 2
            a[1].close()
            await asyncio.sleep(0.1)
            d = await asyncio.open_connection("127.0.0.1", port)  # a slot is free again
            assert await is_open(*d)
            for _, w in (b, c, d):
                w.close()
        finally:
            await gw.shutdown(1)

    asyncio.run(main())


def test_idle_connections_are_closed(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        gw, port = await serve(idle_timeout_ms=500)
        before = hits("idle_timeout")
        try:
            idle = await asyncio.open_connection("127.0.0.1", port)
            busy = await asyncio.open_connection("127.0.0.1", port)
            loop = asyncio.get_running_loop()
            start = loop.time()
            while loop.time() - start < 1.0:  # keep one connection busy past the timeout
                assert await is_open(*busy)
                await asyncio.sleep(0.1)
            assert await closed_by_peer(idle[0], 1.5)
            assert await is_open(*busy)
            assert hits("idle_timeout") >= before + 1
            assert any("idle for more than 500 ms" in r.getMessage() for r in caplog.records)
            busy[1].close()
        finally:
            await gw.shutdown(1)

    asyncio.run(main())


def test_oversized_request_closes_and_counts() -> None:
    async def main() -> None:
        gw = make_gateway(max_request_bytes=1000)
        before = hits("max_request_bytes")
        d = Driver(gw)
        await d.feed(struct.pack(">i", 1001) + b"x" * 100)
        assert d.closed and hits("max_request_bytes") == before + 1

    asyncio.run(main())


def test_inflight_cap_pauses_reading_and_counts() -> None:
    class SlowRouter(FakeRouter):
        def call(self, shard: int, op: Any, org_id: str, payload: Any, trace: str | None = None) -> Any:
            self.calls.append((shard, op, org_id))
            fut = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(0.05, fut.set_result, {"error_code": 0, "groups": []})
            return fut

    async def main() -> None:
        gw = make_gateway(max_inflight_per_connection=2)
        gw.router = SlowRouter()  # type: ignore[assignment]
        before = hits("max_inflight")
        d = Driver(gw)
        d.conn.data_received(b"".join(encode_request(16, 4, {"states_filter": []}, i) for i in range(4)))
        assert d.transport.paused
        await d.settle()
        assert not d.transport.paused and len(d.frames()) == 4 and not d.closed
        assert hits("max_inflight") == before + 1

    asyncio.run(main())
