"""The bounds walker that runs before kio: valid requests pass whole, absurd counts and forbidden nulls do not."""

from __future__ import annotations

import asyncio
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records

from rafka.gateway import handlers  # noqa: F401  (fills the registry)
from rafka.gateway.api import REGISTRY
from rafka.protocol import codec, wirecheck
from tests.gateway.harness import Driver, make_gateway

SERVED = [(s.key, v) for s in REGISTRY.values() for v in range(s.min_version, s.max_version + 1)]
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

# ListOffsets v8 found by the fuzzer: a compact array count of ~34 billion topics in a 28-byte frame.
# Without the walker, kio's native reader tries to allocate 272 GB and aborts the process.
LIST_OFFSETS_BOMB = bytes.fromhex("0002000801d70001000474652d7400d0b400000086efe8e77eca49cd")


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_valid_request_walks_to_its_end(data: st.DataObject) -> None:
    api_key, version = data.draw(st.sampled_from(SERVED))
    cls = codec.request_class(api_key, version)
    entity = data.draw(st.from_type(cls))  # type: ignore[arg-type]
    buf = io.BytesIO()
    entity_writer(cls)(buf, entity)  # type: ignore[arg-type]
    body = buf.getvalue()
    assert wirecheck.walker(cls)(body, 0, len(body)) == len(body)  # type: ignore[arg-type]
    if body:  # one byte short never passes
        with pytest.raises(wirecheck.WireError):
            wirecheck.check_body(cls, body[:-1], 0)


def test_an_absurd_array_count_is_refused_before_kio() -> None:
    cls = codec.request_class(2, 8)
    header = codec.read_request_header(LIST_OFFSETS_BOMB, True)
    with pytest.raises(wirecheck.WireError, match="cannot fit"):
        wirecheck.check_body(cls, LIST_OFFSETS_BOMB, header.body_offset)


def test_null_only_where_the_schema_allows_it() -> None:
    fetch = codec.request_class(1, 9)  # topics: non-nullable array; a -1 count is a null
    body = bytes.fromhex("ffffffff" "00000000" "00000000" "7fffffff" "00" "00000000" "ffffffff" "ffffffff" "00000000")
    with pytest.raises(wirecheck.WireError, match="null in non-nullable array topics"):
        wirecheck.check_body(fetch, body, 0)
    wirecheck.check_body(codec.request_class(3, 1), bytes.fromhex("ffffffff"), 0)  # Metadata: null means all topics


def test_the_connection_closes_instead_of_aborting() -> None:
    async def main() -> None:
        d = Driver(make_gateway())
        await d.feed(len(LIST_OFFSETS_BOMB).to_bytes(4, "big") + LIST_OFFSETS_BOMB)
        assert d.closed and d.frames() == []

    asyncio.run(main())
