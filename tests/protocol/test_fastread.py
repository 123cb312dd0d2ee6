"""fastread gives the old path's op dict (wirecheck, kio, to_op) exactly, and refuses what it refuses,
but for unknown tagged fields: kio refuses them, fastread skips them as Kafka does."""

from __future__ import annotations

import dataclasses
import io
import struct
import time
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.serial._introspect import get_field_tag

from rafka.gateway import handlers  # noqa: F401  (fills the registry)
from rafka.gateway.api import REGISTRY
from rafka.protocol import codec, fastread, wirecheck
from tests.protocol.strategies import entities

SERVED = [(s.key, v) for s in REGISTRY.values() for v in range(s.min_version, s.max_version + 1)]
# heartbeat, offset commit, fetch, metadata, produce, create topics, join group, describe configs; legacy and flexible
MUTATED = [(12, 3), (12, 4), (8, 2), (8, 9), (1, 4), (1, 12), (1, 17), (3, 4), (3, 12), (0, 3), (0, 9),
           (19, 2), (19, 7), (11, 5), (11, 9), (32, 1), (32, 4)]
assert set(MUTATED) <= set(SERVED)


def typed(v: Any) -> Any:
    """``v`` with the type of every value made part of it (so 1 != True and b"" != "")."""
    if isinstance(v, dict):
        return {k: typed(x) for k, x in v.items()}, list(v)
    if isinstance(v, list):
        return [typed(x) for x in v]
    return type(v), v


def frame_of(cls: type, body: bytes) -> tuple[bytes, int]:
    """A request frame (header v1 or v2, then ``body``) and the offset of its body."""
    head = struct.pack(">hhih", cls.__api_key__, cls.__version__, 7, 4) + b"test"  # type: ignore[attr-defined]
    if cls.__header_schema__.__flexible__:  # type: ignore[attr-defined]
        head += b"\0"
    return head + body, len(head)


def encode(cls: type, entity: Any) -> tuple[bytes, int]:
    out = io.BytesIO()
    entity_writer(cls)(out, entity)  # type: ignore[arg-type]
    return frame_of(cls, out.getvalue())


UNKNOWN_TAG = object()  # kio refused an unknown tagged field, which fastread skips


def old(cls: type, frame: bytes, offset: int) -> Any:
    """The gateway's old three steps: the op dict, None if they refuse the body, UNKNOWN_TAG if kio
    refused it only for a tagged field it does not know."""
    try:
        wirecheck.check_body(cls, frame, offset)
        return codec.to_op(codec.decode_request(cls, frame, offset))
    except codec.DecodeError as exc:
        return UNKNOWN_TAG if "Unknown tagged field" in str(exc) else None
    except wirecheck.WireError:
        return None


def new(cls: type, frame: bytes, offset: int) -> Any:
    try:
        return fastread.decode_request(cls, frame, offset)
    except codec.DecodeError:
        return None


def agree(cls: type, frame: bytes, offset: int) -> Any:
    expected = old(cls, frame, offset)
    got = new(cls, frame, offset)
    if expected is UNKNOWN_TAG:  # no oracle for what follows the tag: test_unknown_tagged_fields_* cover it
        return got
    assert (got is None) == (expected is None), f"old {expected!r}, new {got!r} for {frame.hex()}"
    if expected is not None:
        assert typed(got) == typed(expected)
    return expected


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@settings(max_examples=10, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_same_op_dict_as_kio(api_key: int, version: int, data: st.DataObject) -> None:
    """Any valid request reads to the dict ``to_op`` makes of kio's entity: same keys, values and types."""
    cls = codec.request_class(api_key, version)
    frame, offset = encode(cls, data.draw(entities(cls)))  # type: ignore[arg-type]
    expected = codec.to_op(codec.decode_request(cls, frame, offset))  # type: ignore[arg-type]
    got = fastread.decode_request(cls, frame, offset)  # type: ignore[arg-type]
    assert typed(got) == typed(expected)
    assert fastread.decode_request(cls, bytearray(frame), offset) == expected  # type: ignore[arg-type]
    assert fastread.decode_request(cls, frame + b"trailing", offset) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("api_key", "version"), MUTATED)
@settings(max_examples=10, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_truncations_and_flips_decide_alike(api_key: int, version: int, data: st.DataObject) -> None:
    """Cut anywhere or with bytes changed, a frame is refused by both paths or read alike by both."""
    cls = codec.request_class(api_key, version)
    frame, offset = encode(cls, data.draw(entities(cls)))  # type: ignore[arg-type]
    for cut in range(offset, len(frame)):
        agree(cls, frame[:cut], offset)  # type: ignore[arg-type]
    if len(frame) > offset:
        flips = data.draw(st.lists(st.tuples(st.integers(offset, len(frame) - 1), st.integers(0, 255)),
                                   min_size=1, max_size=4))
        mutant = bytearray(frame)
        for at, value in flips:
            mutant[at] = value
        agree(cls, bytes(mutant), offset)  # type: ignore[arg-type]
    agree(cls, *frame_of(cls, data.draw(st.binary(max_size=40))))  # type: ignore[arg-type]


FETCH_12 = bytes.fromhex("ffffffff" "000001f4" "00000001" "7fffffff" "00" "00000000" "ffffffff" "01" "01" "01")
HEARTBEAT_4 = b"\x02g" + b"\x00\x00\x00\x03" + b"\x02m" + b"\x00"


@pytest.mark.parametrize(("api_key", "version", "body"), [
    (12, 4, HEARTBEAT_4 + b"\x00"),
    (12, 4, HEARTBEAT_4 + b"\x80\x00"),  # a tag count of 0 in two bytes
    (12, 4, b"\x82\x00" + b"g" * 129 + b"\x00\x00\x00\x03\x02m\x00\x00"),  # a two-byte length
    (12, 4, b"\x82\x80\x00g\x00\x00\x00\x03\x02m\x00\x00"),  # a length in more bytes than it needs
    (12, 4, b"\x00\x00\x00\x00\x03\x02m\x00\x00"),  # null group id
    (12, 4, b"\x03\xed\xa0\x00\x00\x00\x03\x02m\x00\x00"),  # not UTF-8 (a surrogate)
    (12, 3, b"\x00\x01g\x00\x00\x00\x03\x00\x01m\xff\xfe"),  # a length of -2
    (1, 12, FETCH_12 + b"\x00"),
    (1, 12, FETCH_12 + b"\x01\x00\x03\x02xy"),  # cluster id, and a byte it does not read
    (1, 12, FETCH_12 + b"\x01\x00\x04\x02xyz"),  # tagged field shorter than its size: kio and wirecheck part
    (1, 12, FETCH_12 + b"\x02\x00\x04\x02xyz\x00"),
    (1, 12, FETCH_12 + b"\x01\x00\x02\x03xy"),  # tagged field longer than its size
    (1, 12, FETCH_12 + b"\x02\x00\x02\x02x\x00\x02\x02z"),  # the same tag twice: the last wins
    (1, 12, FETCH_12 + b"\x01\x00\x01\x00"),  # a null in a tagged string: kio refuses it
    (1, 12, FETCH_12 + b"\x05\x00"),  # more tags than bytes
    (3, 4, b"\xff\xff\xff\xff\x01"),  # null topics: all of them
    (3, 4, b"\xff\xff\xff\xfe\x01"),  # negative count
    (3, 4, b"\x00\x00\x00\x00\x02"),  # a bool of 2
    (3, 10, b"\x02" + bytes(16) + b"\x00\x00\x01\x00\x01\x00"),  # zero topic id: None
    (1, 9, bytes.fromhex("ffffffff00000000000000007fffffff0000000000ffffffffffffffff00000000")),  # null topics
    *[(8, 2, b"\x00\x01g\x00\x00\x00\x01\x00\x01m" + ms.to_bytes(8, "big", signed=True) + bytes(4))
      for ms in (-1, 2**53, 9223372036854775, 9223372036854776, -9223372036854775, -9223372036854776)],
])
def test_edge_cases_decide_alike(api_key: int, version: int, body: bytes) -> None:
    cls = codec.request_class(api_key, version)
    agree(cls, *frame_of(cls, body))  # type: ignore[arg-type]


UNKNOWN = b"\x90\x4e\x03abc"  # tag 10000, three bytes of value


@pytest.mark.parametrize(("api_key", "version"), [(k, v) for k, v in SERVED if codec.request_class(k, v).__flexible__
                                                  and not any(get_field_tag(f) is not None
                                                              for f in dataclasses.fields(codec.request_class(k, v)))])
@settings(max_examples=5, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_unknown_tagged_fields_are_skipped_at_the_top_level(api_key: int, version: int, data: st.DataObject) -> None:
    """A body with no tagged fields of its own ends in a zero tag count; one unknown tag there changes nothing."""
    cls = codec.request_class(api_key, version)
    frame, offset = encode(cls, data.draw(entities(cls)))  # type: ignore[arg-type]
    assert frame[-1] == 0
    expected = codec.to_op(codec.decode_request(cls, frame, offset))  # type: ignore[arg-type]
    assert fastread.decode_request(cls, frame[:-1] + b"\x01" + UNKNOWN, offset) == expected  # type: ignore[arg-type]
    assert fastread.decode_request(cls, frame[:-1] + b"\x02" + UNKNOWN + UNKNOWN, offset) == expected  # type: ignore[arg-type]
    with pytest.raises(codec.DecodeError, match="runs past the end"):
        fastread.decode_request(cls, frame[:-1] + b"\x01" + UNKNOWN[:-1], offset)  # type: ignore[arg-type]


def offset_commit_9(partition_tags: bytes, topic_tags: bytes, tags: bytes) -> bytes:
    """OffsetCommit v9: group g, generation 3, member m, topic t, partition 0 at offset 42."""
    partition = b"\x00\x00\x00\x00" + (42).to_bytes(8, "big") + b"\xff\xff\xff\xff" + b"\x01" + partition_tags
    return b"\x02g\x00\x00\x00\x03\x02m\x00" + b"\x02" + b"\x02t" + b"\x02" + partition + topic_tags + tags


@pytest.mark.parametrize(("api_key", "version", "plain", "tagged"), [
    (12, 4, HEARTBEAT_4 + b"\x00", HEARTBEAT_4 + b"\x01" + UNKNOWN),
    (1, 12, FETCH_12 + b"\x01\x00\x02\x02x", FETCH_12 + b"\x03" + UNKNOWN + b"\x00\x02\x02x" + UNKNOWN),
    (8, 9, offset_commit_9(b"\x00", b"\x00", b"\x00"), offset_commit_9(b"\x01" + UNKNOWN, b"\x01" + UNKNOWN, b"\x00")),
])
def test_unknown_tagged_fields_are_skipped_where_they_nest(api_key: int, version: int, plain: bytes, tagged: bytes) -> None:
    cls = codec.request_class(api_key, version)
    expected = agree(cls, *frame_of(cls, plain))  # type: ignore[arg-type]
    assert expected is not None
    assert old(cls, *frame_of(cls, tagged)) is UNKNOWN_TAG  # type: ignore[arg-type]
    assert fastread.decode_request(cls, *frame_of(cls, tagged)) == expected  # type: ignore[arg-type]


def test_a_tagged_field_shorter_than_its_size_reads_as_kio_reads_it() -> None:
    cls = codec.request_class(1, 12)
    assert agree(cls, *frame_of(cls, FETCH_12 + b"\x01\x00\x04\x02xyz"))["cluster_id"] == "x"  # type: ignore[arg-type]


@pytest.mark.parametrize(("api_key", "version", "body"), [
    (1, 12, FETCH_12[:-3] + b"\xff\xff\xff\xff\x0f"),  # 4 billion topics
    (3, 4, b"\x7f\xff\xff\xff"),  # 2 billion topics
    (2, 8, bytes.fromhex("d0b400000086efe8e77eca49cd")),  # the fuzzer's ListOffsets bomb in test_wirecheck
])
def test_an_absurd_array_count_is_refused_at_once(api_key: int, version: int, body: bytes) -> None:
    cls = codec.request_class(api_key, version)
    started = time.perf_counter()
    with pytest.raises(codec.DecodeError, match="cannot fit"):
        fastread.decode_request(cls, *frame_of(cls, body))  # type: ignore[arg-type]
    assert time.perf_counter() - started < 0.1


def test_defaults_are_fresh_for_every_request() -> None:
    """A tagged struct absent from the wire reads as its default dict, never one shared between requests."""
    cls = codec.request_class(1, 17)
    frame, offset = encode(cls, codec.from_op(cls, {"topics": [{"partitions": [{}]}]}))  # type: ignore[arg-type]
    first = fastread.decode_request(cls, frame, offset)  # type: ignore[arg-type]
    assert first["replica_state"] == {"replica_id": -1, "replica_epoch": -1}
    first["replica_state"]["replica_id"] = 99
    first["topics"].append("x")
    expected = codec.to_op(codec.decode_request(cls, frame, offset))  # type: ignore[arg-type]
    assert fastread.decode_request(cls, frame, offset) == expected  # type: ignore[arg-type]


def test_a_uuid_reads_as_kio_reads_it() -> None:
    cls = codec.request_class(3, 12)
    topic_id = uuid.UUID(int=5)
    body = b"\x02" + topic_id.bytes + b"\x02t\x00" + b"\x01\x00\x00"
    assert agree(cls, *frame_of(cls, body))["topics"] == [{"topic_id": topic_id, "name": "t"}]  # type: ignore[arg-type]
