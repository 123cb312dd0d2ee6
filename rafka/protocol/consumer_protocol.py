"""The "consumer" embedded protocol of classic groups (Kafka's ConsumerProtocol).

How this works: a classic consumer puts a ConsumerProtocolSubscription in each
JoinGroup protocol's metadata and gets a ConsumerProtocolAssignment back from
SyncGroup. Both start with an int16 version; later versions only append fields,
so a reader of version N ignores what follows the fields it knows (as Kafka does).

* Subscription: v0 topics ([string]), user_data (nullable bytes); v1
  owned_partitions ([topic string, [int32]]); v2 generation_id (int32); v3
  rack_id (nullable string).
* Assignment: assigned_partitions ([topic string, [int32]]), user_data.

Used by the broker when classic members live in a KIP-848 consumer group (their
subscription is read from JoinGroup and their assignment is written for SyncGroup),
by the REST admin API to show members' assignments, and by tests and tools.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field


@dataclass
class Subscription:
    version: int
    topics: list[str]
    owned_partitions: dict[str, set[int]] = field(default_factory=dict)
    generation_id: int = -1
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def int16(self) -> int:
        (v,) = struct.unpack_from(">h", self.data, self.pos)
        self.pos += 2
        return int(v)

    def int32(self) -> int:
        (v,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return int(v)

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise ValueError("truncated string")
        s = bytes(self.data[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return s

    def skip_bytes(self) -> None:
        n = self.int32()
        if n > 0:
            self.pos += n
        if self.pos > len(self.data):
            raise ValueError("truncated bytes")

    def count(self) -> int:
        n = self.int32()
        if n < 0 or n > len(self.data):
            raise ValueError("bad array length")
        return n

    def topic_partitions(self) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for _ in range(self.count()):
            topic = self.string() or ""
            out.setdefault(topic, set()).update(self.int32() for _ in range(self.count()))
        return out

    @property
    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def parse_subscription(metadata: bytes) -> Subscription | None:
    """The subscription in ``metadata``, or None if it does not parse."""
    try:
        r = _Reader(metadata)
        version = r.int16()
        topics = [r.string() or "" for _ in range(r.count())]
        sub = Subscription(version, topics)
        if r.at_end:
            return sub
        r.skip_bytes()  # user data
        if version >= 1 and not r.at_end:
            sub.owned_partitions = r.topic_partitions()
        if version >= 2 and not r.at_end:
            sub.generation_id = r.int32()
        if version >= 3 and not r.at_end:
            sub.rack_id = r.string()
        return sub
    except (struct.error, ValueError, UnicodeDecodeError):
        return None


def parse_assignment(data: bytes) -> dict[str, set[int]] | None:
    """The partitions of a ConsumerProtocolAssignment (``{}`` for empty bytes), or None."""
    if not data:
        return {}
    try:
        r = _Reader(data)
        if r.int16() < 0:
            return None
        return r.topic_partitions()
    except (struct.error, ValueError, UnicodeDecodeError):
        return None


def decode_assignment(data: bytes | None) -> dict[str, list[int]]:
    """``{topic: sorted partitions}`` of an assignment (``{}`` when empty); ValueError if it does not parse."""
    parts = parse_assignment(data or b"")
    if parts is None:
        raise ValueError("not a consumer protocol assignment")
    return {t: sorted(ps) for t, ps in sorted(parts.items())}


def encode_assignment(partitions: dict[str, set[int]] | dict[str, list[int]], version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment (no user data) of ``version`` (0–3, same layout)."""
    out = bytearray(struct.pack(">hi", max(0, min(version, 3)), len(partitions)))
    for topic in sorted(partitions):
        raw = topic.encode("utf-8")
        parts = sorted(partitions[topic])
        out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(parts))
        out += struct.pack(f">{len(parts)}i", *parts)
    out += struct.pack(">i", -1)
    return bytes(out)


def encode_subscription(topics: list[str], version: int = 0, owned: dict[str, list[int]] | None = None,
                        generation_id: int = -1, rack_id: str | None = None) -> bytes:
    """A ConsumerProtocolSubscription (no user data); used by tests and tools."""
    out = bytearray(struct.pack(">hi", version, len(topics)))
    for t in topics:
        raw = t.encode("utf-8")
        out += struct.pack(">h", len(raw)) + raw
    out += struct.pack(">i", -1)
    if version >= 1:
        owned = owned or {}
        out += struct.pack(">i", len(owned))
        for t in sorted(owned):
            raw = t.encode("utf-8")
            out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(owned[t]))
            out += struct.pack(f">{len(owned[t])}i", *sorted(owned[t]))
    if version >= 2:
        out += struct.pack(">i", generation_id)
    if version >= 3:
        if rack_id is None:
            out += struct.pack(">h", -1)
        else:
            raw = rack_id.encode("utf-8")
            out += struct.pack(">h", len(raw)) + raw
    return bytes(out)
