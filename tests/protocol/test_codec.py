"""Round trips through kio and rafka's version-independent dicts, for every API served."""

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from rafka.gateway import handlers  # noqa: F401  (fills the registry)
from rafka.gateway.api import REGISTRY
from rafka.protocol import codec
from tests.protocol.strategies import entities

SERVED = [(s.key, v) for s in REGISTRY.values() for v in range(s.min_version, s.max_version + 1)]


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@settings(max_examples=8, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_request_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    """Any valid request decodes, becomes a dict, and rebuilds to the same entity."""
    cls = codec.request_class(api_key, version)
    entity = data.draw(entities(cls))
    buf = io.BytesIO()
    entity_writer(cls)(buf, entity)
    decoded = codec.decode_request(cls, buf.getvalue(), 0)
    assert decoded == entity
    assert codec.from_op(cls, codec.to_op(decoded)) == entity


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@settings(max_examples=8, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_response_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    cls = codec.response_class(api_key, version)
    entity = data.draw(entities(cls))
    assert codec.from_op(cls, codec.to_op(entity)) == entity
    encoded = codec.encode_response(cls, 42, entity)
    assert int.from_bytes(encoded[:4], "big") == len(encoded) - 4
    assert int.from_bytes(encoded[4:8], "big") == 42


def test_an_api_is_registered_only_for_versions_kafka_defines() -> None:
    """The registry's check reads kio's index (no schema imported at start); it agrees with
    loading each schema, and a version Kafka lacks is refused."""
    for key in range(100):
        for version in range(20):
            assert codec.has_request_schema(key, version) == (codec.request_class(key, version) is not None)
    from rafka.gateway.api import api

    async def handler(ctx: object, body: object) -> None: ...

    with pytest.raises(ValueError, match=r"no schema for versions \[0\]"):
        api(38, 0, 3, "test.create_delegation_token")(handler)  # Kafka defines CreateDelegationToken v1-3
    assert 38 not in REGISTRY


def test_from_op_fills_missing_fields_and_drops_unknown_ones() -> None:
    cls = codec.response_class(11, 0)  # JoinGroup v0 has no protocol_type, and a non-null protocol_name
    entity = codec.from_op(cls, {"error_code": 79, "member_id": "m", "protocol_type": "consumer",
                                 "protocol_name": None, "skip_assignment": True})
    assert entity.error_code.value == 79
    assert entity.protocol_name == ""
    assert entity.members == ()


def test_request_header_flexible_skips_tagged_fields() -> None:
    # api 18 v3, corr 7, client "ab", one tagged field (tag 0, 2 bytes)
    frame = bytes.fromhex("0012000300000007") + b"\x00\x02ab" + b"\x01\x00\x02zz" + b"rest"
    hdr = codec.read_request_header(frame, flexible=True)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id) == (18, 3, 7, "ab")
    assert frame[hdr.body_offset :] == b"rest"


def test_request_header_flexible_without_tagged_fields_and_a_null_client_id() -> None:
    frame = bytes.fromhex("0008000900000005") + b"\xff\xff" + b"\x00" + b"body"
    hdr = codec.read_request_header(frame, flexible=True)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id) == (8, 9, 5, None)
    assert frame[hdr.body_offset :] == b"body"
    with pytest.raises(codec.DecodeError):
        codec.read_request_header(frame[:10], flexible=True)  # the tagged-field count is missing


def test_truncated_header_is_a_decode_error() -> None:
    with pytest.raises(codec.DecodeError):
        codec.read_request_header(b"\x00\x12\x00", flexible=False)
