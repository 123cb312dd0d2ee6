import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.protocol.framing import FrameDecoder, FrameTooLarge, frame


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(min_value=1, max_value=64))
def test_frames_survive_any_chunking(payloads: list[bytes], chunk: int) -> None:
    stream = b"".join(frame(p) for p in payloads)
    dec = FrameDecoder()
    out: list[bytes] = []
    for i in range(0, len(stream), chunk):
        out += dec.feed(stream[i : i + chunk])
    assert out == payloads
    assert dec.buffered == 0


def test_oversized_prefix_is_refused_before_buffering() -> None:
    dec = FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(FrameTooLarge):
        dec.feed(struct.pack(">i", 2**31 - 1) + b"x" * 10)


def test_negative_prefix_is_refused() -> None:
    with pytest.raises(FrameTooLarge):
        FrameDecoder().feed(struct.pack(">i", -5))


def test_partial_frame_waits_for_the_rest() -> None:
    dec = FrameDecoder()
    data = frame(b"hello world")
    assert dec.feed(data[:7]) == []
    assert dec.feed(data[7:]) == [b"hello world"]
