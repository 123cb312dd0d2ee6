"""A minimal blocking Kafka client for tests: kio-encoded requests over a raw socket."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any, Self

from kio.index import load_request_schema
from kio.serial import entity_writer

from rafka.protocol import codec


class RawClient:
    def __init__(self, host: str, port: int, timeout: float = 10.0, client_id: str = "raw-test") -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def encode(self, api_key: int, version: int, body: dict[str, Any], correlation_id: int | None = None) -> bytes:
        cls = load_request_schema(api_key, version)
        self.correlation += 1
        corr = self.correlation if correlation_id is None else correlation_id
        out = io.BytesIO()
        out.write(struct.pack(">hhi", api_key, version, corr))
        cid = self.client_id.encode()
        out.write(struct.pack(">h", len(cid)) + cid)
        if cls.__header_schema__.__flexible__:
            out.write(b"\0")
        entity_writer(cls)(out, codec.from_op(cls, body))
        data = out.getvalue()
        return struct.pack(">i", len(data)) + data

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exact(4))[0]
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.send_raw(self.encode(api_key, version, body))
        return self.read_response(api_key, version)

    def read_response(self, api_key: int, version: int) -> dict[str, Any]:
        frame = self.recv_frame()
        cls = codec.response_class(api_key, version)
        offset = 4 + (1 if cls.__header_schema__.__flexible__ else 0)
        entity, _ = codec._reader(cls)(memoryview(frame), offset)
        out = codec.to_op(entity)
        out["_correlation_id"] = struct.unpack(">i", frame[:4])[0]
        return out
