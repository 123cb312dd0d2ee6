"""Size-prefixed Kafka framing, sans I/O.

How this works: every Kafka request and response is an int32 big-endian length
followed by that many bytes. ``FrameDecoder.feed`` accumulates bytes and returns
every complete frame; a length that is negative or above ``max_frame_bytes`` raises
``FrameTooLarge`` *before* any of the body is buffered, so a 2 GiB prefix costs
nothing but a closed connection.
"""

from __future__ import annotations

import struct

_LEN = struct.Struct(">i")


class FrameError(Exception):
    """The byte stream cannot be framed; the connection must be closed."""


class FrameTooLarge(FrameError):
    """A size prefix above the configured cap (or negative)."""


class FrameDecoder:
    """Incremental decoder of size-prefixed frames."""

    __slots__ = ("_buf", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = 100 * 1024 * 1024) -> None:
        self._buf = bytearray()
        self.max_frame_bytes = max_frame_bytes

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return the frames it completes, in order."""
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = _LEN.unpack_from(buf, pos)
            if size < 0 or size > self.max_frame_bytes:
                raise FrameTooLarge(f"frame size {size} outside [0, {self.max_frame_bytes}]")
            if end - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buf)


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its int32 length."""
    return _LEN.pack(len(payload)) + payload
