"""A closed connection's memory goes back at once, not at some later pass of the cyclic GC."""

from __future__ import annotations

import asyncio
import gc
import weakref

import uvloop

from rafka.gateway.server import KafkaConnection
from tests.gateway.harness import encode_request, make_gateway, split_frames


def test_a_closed_connection_is_freed_without_the_cyclic_gc() -> None:
    """A client connects over a real socket (uvloop, as the gateway runs), is answered and goes
    away: its connection, with its buffers and transport, is freed by reference counting alone
    (the gateway collects cyclic garbage rarely, so whatever a cycle held would stay)."""
    made: list[KafkaConnection] = []

    async def main() -> weakref.ref[KafkaConnection]:
        gw = make_gateway()
        loop = asyncio.get_running_loop()

        def factory() -> KafkaConnection:
            made.append(KafkaConnection(gw))
            return made[-1]

        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode_request(18, 3, {"client_software_name": "t", "client_software_version": "1"}))
        answer = await asyncio.wait_for(reader.read(65536), 5)
        assert len(split_frames(answer)) == 1
        writer.close()
        await writer.wait_closed()
        for _ in range(200):
            if not gw.connections and made[0]._closed:
                break
            await asyncio.sleep(0.01)
        assert not gw.connections
        server.close()
        await server.wait_closed()
        return weakref.ref(made.pop())

    gc.collect()
    gc.disable()
    try:
        ref = uvloop.run(main())
        assert ref() is None, gc.get_referrers(ref())
    finally:
        gc.enable()
