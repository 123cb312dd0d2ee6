from __future__ import annotations

import pytest

from rafka.protocol.consumer_protocol import decode_assignment, encode_assignment


@pytest.mark.parametrize("version", [0, 1, 3])
def test_assignment_round_trip(version: int) -> None:
    data = encode_assignment({"orders": [2, 0], "payments": [1]}, version)
    assert decode_assignment(data) == {"orders": [0, 2], "payments": [1]}


def test_empty_assignment() -> None:
    assert decode_assignment(b"") == {}
    assert decode_assignment(None) == {}
    assert decode_assignment(encode_assignment({})) == {}


@pytest.mark.parametrize("garbage", [b"\x00", b"\x00\x00\x00\x00\x00\x05\x00", b"\xff\xff\x00\x00\x00\x00",
                                     encode_assignment({"t": [1, 2]})[:12]])
def test_garbage_is_rejected(garbage: bytes) -> None:
    with pytest.raises(ValueError):
        decode_assignment(garbage)
