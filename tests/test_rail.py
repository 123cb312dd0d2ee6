"""The gateway↔shard envelope: what goes over ZeroMQ comes back the same, garbage is refused."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.rail import OP_NAMES, Op, Status, pack, unpack

payloads = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(st.lists(st.tuples(st.integers(1, 2**40), st.sampled_from(list(Op)), st.text(max_size=10),
                          st.none() | st.text(max_size=55), payloads), max_size=10))
def test_request_batches_round_trip(envelopes: list[tuple]) -> None:
    batch = [[rid, int(op), org, trace, payload] for rid, op, org, trace, payload in envelopes]
    assert unpack(pack(batch)) == batch


def test_reply_envelope_round_trip() -> None:
    batch = [[7, int(Status.OK), {"error_code": 0, "members": [{"member_id": "m", "metadata": b"\x00\x01"}]}],
             [-3, int(Status.OK), {"incarnation": "abc"}], [8, int(Status.LOADING), None]]
    assert unpack(pack(batch)) == batch


@pytest.mark.parametrize("garbage", [b"", b"\xc1", b"\x92\x01", pack({"not": "a list"})])
def test_garbage_is_refused(garbage: bytes) -> None:
    with pytest.raises(ValueError):
        unpack(garbage)


def test_every_op_has_a_span_name() -> None:
    assert set(OP_NAMES) == set(Op)
    assert len(set(OP_NAMES.values())) == len(Op)
