"""Runs of OffsetCommit requests that differ only in their offsets: one handler call for a run.

How this works: a consumer committing asynchronously sends its commits back to back, and
under load one client read holds dozens of them, byte for byte the same but for the
correlation id and the committed offsets (the same group, member, generation, partitions,
leader epochs and metadata). An OffsetCommit frame opens a ``CommitRun``; when a second one
follows it in the read, ``commit_layout`` walks the first (versions 2–10) for the byte
ranges outside those fields, and a frame of the same length whose bytes in those ranges are
equal has the same fields, so it joins the run with a bytes comparison, without being
decoded. When the run ends (at the end of the read, or before any other frame of the
connection is handled) the handler runs once, on the run's last frame (a run of one is an
ordinary request): its commits are the ones that stand once the run's commits
have been applied in order, as the coordinator would apply them one by one. The run is
answered as one: every request of it gets that response, under its own correlation id,
in its place in the connection's response order, once the last frame's commit is durable
— nothing acknowledges a commit before the offsets that replace it are stored. The
request counters count every request of a run. A frame this walk does not accept (tagged
fields in the body, a null array, bytes left over) takes the ordinary path.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from rafka.protocol.codec import DecodeError, read_request_header, read_uvarint

OFFSET_COMMIT = 8
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Spans = tuple[tuple[int, int], ...]


def _string(frame: bytes, pos: int, flexible: bool) -> int:
    """The position after a (nullable) string at ``pos``."""
    if flexible:
        n = frame[pos]
        if n < 0x80:  # a length under 127: one byte
            return pos + max(n, 1)
        n, pos = read_uvarint(frame, pos)
        return pos + max(n - 1, 0)
    (n,) = _I16.unpack_from(frame, pos)
    return pos + 2 + max(n, 0)


def _array(frame: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's item count and the position after it (-1: null, refused by the caller)."""
    if flexible:
        n = frame[pos]
        if n < 0x80:
            return n - 1, pos + 1
        n, pos = read_uvarint(frame, pos)
        return n - 1, pos
    (n,) = _I32.unpack_from(frame, pos)
    return n, pos + 4


def commit_layout(frame: bytes, version: int) -> Spans | None:
    """The byte ranges of an OffsetCommit request frame (size prefix excluded) other than its
    correlation id and committed offsets, or None if it is not one this walk accepts."""
    if not 2 <= version <= 10:
        return None
    flexible = version >= 8
    end = len(frame)
    offsets: list[int] = []
    try:
        pos = read_request_header(frame, flexible).body_offset
        pos = _string(frame, pos, flexible) + 4  # group_id, generation_id_or_member_epoch
        pos = _string(frame, pos, flexible)  # member_id
        if version >= 7:
            pos = _string(frame, pos, flexible)  # group_instance_id
        if version <= 4:
            pos += 8  # retention_time_ms
        topics, pos = _array(frame, pos, flexible)
        if topics < 0:
            return None
        for _ in range(topics):
            pos = pos + 16 if version >= 10 else _string(frame, pos, flexible)  # topic id (v10) or name
            partitions, pos = _array(frame, pos, flexible)
            if partitions < 0 or pos > end:
                return None
            for _ in range(partitions):
                offsets.append(pos + 4)  # after partition_index
                pos += 12 + (4 if version >= 6 else 0)  # committed_offset, committed_leader_epoch
                pos = _string(frame, pos, flexible)  # committed_metadata
                if flexible:
                    if frame[pos] != 0:
                        return None
                    pos += 1
                if pos > end:
                    return None
            if flexible:
                if frame[pos] != 0:
                    return None
                pos += 1
        if flexible:
            if frame[pos] != 0:
                return None
            pos += 1
    except (IndexError, struct.error, DecodeError):
        return None
    if pos != end:
        return None
    spans = [(0, 4)]  # api key and version; the correlation id follows
    start = 8
    for at in offsets:
        spans.append((start, at))
        start = at + 8
    spans.append((start, end))
    return tuple(spans)


class CommitRun:
    """OffsetCommit frames of one connection that differ only in correlation ids and offsets,
    and, once a second frame has joined, the run's place in the response order (``slot``),
    which takes every response of the run at once. The first frame is walked only when a
    second one could join it: a lone commit (a synchronous one) costs no walk and is an
    ordinary request."""

    __slots__ = ("frames", "pieces", "slot", "version")

    def __init__(self, frame: bytes, version: int) -> None:
        self.version = version
        self.pieces: tuple[tuple[int, bytes], ...] | None = None  # the first frame's bytes outside the holes
        self.frames = [frame]
        self.slot: asyncio.Future[bytes | None] | None = None

    def matches(self, frame: bytes) -> bool:
        first = self.frames[0]
        if len(frame) != len(first):
            return False
        pieces = self.pieces
        if pieces is None:
            spans = commit_layout(first, self.version)  # None: not one the walk accepts
            pieces = self.pieces = tuple((a, first[a:b]) for a, b in spans) if spans else ()
        if not pieces:
            return False
        startswith = frame.startswith  # compared in place: no slice of the frame is made
        for at, piece in pieces:
            if not startswith(piece, at):
                return False
        return True

    def answer(self, request: asyncio.Future[Any]) -> None:
        """Give every request of the run the response of its handler call (``request``, for the
        last frame), under its own correlation id, written together in the run's slot; a failure
        or cancellation likewise."""
        slot = self.slot
        assert slot is not None  # a run is answered as one only once a second frame gave it its slot
        if slot.done():  # cancelled: the connection is gone
            return
        if request.cancelled():
            slot.cancel()
            return
        exc = request.exception()
        if exc is not None:
            slot.set_exception(exc)
            return
        data = request.result()
        if not data:  # None, or b"": nothing is written for the run
            slot.set_result(data)
            return
        # a response's correlation id (after its size) is its request's (after key and version)
        head, tail = data[:4], data[8:]
        parts = []
        for frame in self.frames:
            parts += (head, frame[4:8], tail)
        slot.set_result(type(data)(b"".join(parts)))
