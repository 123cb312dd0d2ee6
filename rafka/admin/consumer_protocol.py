"""Decoding the consumer protocol's member assignment (``ConsumerProtocolAssignment``).

Layout (all versions, big-endian): int16 version, int32 topic count, then per topic
an int16-length string and an int32 count of int32 partitions, then nullable bytes
of user data (ignored here). Version 3 adds nothing before the user data.
"""

from __future__ import annotations

import struct


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ValueError("truncated consumer protocol data")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def string(self) -> str:
        n = self.take(">h")
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("bad string in consumer protocol data")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s


def decode_assignment(data: bytes | None) -> dict[str, list[int]]:
    """``{topic: sorted partitions}`` from a consumer-protocol assignment ({} when empty).

    Raises ValueError on data that is not a consumer-protocol assignment.
    """
    if not data:
        return {}
    r = _Reader(bytes(data))
    version = r.take(">h")
    if version < 0:
        raise ValueError(f"bad consumer protocol version {version}")
    out: dict[str, list[int]] = {}
    count = r.take(">i")
    if count < 0 or count > len(data):
        raise ValueError("bad topic count")
    for _ in range(count):
        topic = r.string()
        n = r.take(">i")
        if n < 0 or n * 4 > len(data):
            raise ValueError("bad partition count")
        out.setdefault(topic, []).extend(r.take(">i") for _ in range(n))
    return {t: sorted(ps) for t, ps in sorted(out.items())}


def encode_assignment(assignment: dict[str, list[int]], version: int = 0) -> bytes:
    """The inverse of ``decode_assignment`` (no user data); used by tests."""
    out = [struct.pack(">hi", version, len(assignment))]
    for topic, parts in assignment.items():
        raw = topic.encode()
        out.append(struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(parts)))
        out.extend(struct.pack(">i", p) for p in parts)
    out.append(struct.pack(">i", -1))
    return b"".join(out)
