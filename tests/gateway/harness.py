"""Drive a real ``KafkaConnection`` in-process: a fake transport, a fake shard router, no sockets."""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any

from kio.serial import entity_writer

from rafka.config import Config
from rafka.gateway.router import ShardUnavailable
from rafka.gateway.server import Gateway, KafkaConnection
from rafka.protocol import codec


class FakeRouter:
    """Records every call; every shard is down (handlers answer with retriable errors)."""

    shard_count = 2

    def __init__(self) -> None:
        self.calls: list[tuple[int, Any, str]] = []

    def shard_for_group(self, org_id: str, group_id: str) -> int:
        return 0

    def shard_for_partition(self, org_id: str, topic: str, partition: int) -> int:
        return partition % 2

    def shard_for_catalog(self, org_id: str) -> int:
        return 1

    def is_alive(self, shard: int) -> bool:
        return False

    def flush(self) -> None:
        """Nothing waits to be sent: every call is answered at once."""

    def call(self, shard: int, op: Any, org_id: str, payload: Any, trace: str | None = None) -> asyncio.Future[Any]:
        self.calls.append((shard, op, org_id))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_exception(ShardUnavailable(f"shard {shard} is down (fake)"))
        return fut


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False
        self.paused = False
        self.writes_after_close = 0
        self.protocol: KafkaConnection | None = None

    def write(self, data: Any) -> None:
        if self.closed:
            self.writes_after_close += 1
        self.out += data

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.protocol is not None:
                asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000)}.get(name, default)


def make_gateway(**options: Any) -> Gateway:
    cfg = Config(shards=2, data_dir="/nonexistent-rafka-test", **options)
    return Gateway(cfg, FakeRouter())  # type: ignore[arg-type]


def encode_request(api_key: int, version: int, body: dict[str, Any] | Any, correlation_id: int = 1,
                   client_id: str = "test") -> bytes:
    """A size-prefixed request frame (``body`` a dict or a kio entity)."""
    cls = codec.request_class(api_key, version)
    assert cls is not None
    out = io.BytesIO()
    out.write(struct.pack(">hhi", api_key, version, correlation_id))
    cid = client_id.encode()
    out.write(struct.pack(">h", len(cid)) + cid)
    if cls.__header_schema__.__flexible__:
        out.write(b"\0")
    entity = body if not isinstance(body, dict) else codec.from_op(cls, body)
    entity_writer(cls)(out, entity)
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


def split_frames(data: bytes) -> list[bytes]:
    frames, pos = [], 0
    while len(data) - pos >= 4:
        (size,) = struct.unpack_from(">i", data, pos)
        if len(data) - pos - 4 < size:
            break
        frames.append(bytes(data[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return frames


def decode_response(frame: bytes, api_key: int, version: int) -> dict[str, Any]:
    cls = codec.response_class(api_key, version)
    offset = 4 + (1 if cls.__header_schema__.__flexible__ else 0)
    entity, _ = codec._reader(cls)(memoryview(frame), offset)
    out = codec.to_op(entity)
    out["_correlation_id"] = struct.unpack(">i", frame[:4])[0]
    return out


class Driver:
    """One connection: feed bytes, let its tasks finish, read what it wrote."""

    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        self.transport = FakeTransport()
        self.conn = KafkaConnection(gateway)
        self.transport.protocol = self.conn
        self.conn.connection_made(self.transport)
        self.read = 0

    async def feed(self, data: bytes, timeout: float = 2.0) -> None:
        self.conn.data_received(data)
        await self.settle(timeout)

    async def settle(self, timeout: float = 2.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            pending = self.conn.inflight()
            if pending:
                await asyncio.wait(pending, timeout=max(0.0, deadline - loop.time()))
            for _ in range(3):  # done callbacks, close → connection_lost
                await asyncio.sleep(0)
            if self.conn.idle() or self.closed:  # answered and written, nothing held back
                return
        raise AssertionError("requests still in flight")

    def frames(self) -> list[bytes]:
        return split_frames(bytes(self.transport.out))

    def new_frames(self) -> list[bytes]:
        frames = self.frames()
        fresh = frames[self.read :]
        self.read = len(frames)
        return fresh

    async def request(self, api_key: int, version: int, body: dict[str, Any], correlation_id: int = 1) -> dict[str, Any] | None:
        """Send one request; its response, or None if the connection wrote nothing more."""
        await self.feed(encode_request(api_key, version, body, correlation_id))
        fresh = self.new_frames()
        if not fresh:
            return None
        assert len(fresh) == 1, fresh
        return decode_response(fresh[0], api_key, version)

    @property
    def closed(self) -> bool:
        return self.transport.closed
