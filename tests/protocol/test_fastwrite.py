"""The dict-driven response writer produces exactly kio's bytes, for every API served."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafka.gateway import handlers  # noqa: F401  (fills the registry)
from rafka.gateway.api import REGISTRY
from rafka.protocol import codec, fastwrite
from tests.protocol.strategies import entities

SERVED = [(s.key, v) for s in REGISTRY.values() for v in range(s.min_version, s.max_version + 1)]


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@settings(max_examples=12, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_same_bytes_as_kio(api_key: int, version: int, data: st.DataObject) -> None:
    """Any valid response, as an op dict, encodes to the bytes kio writes for the entity."""
    cls = codec.response_class(api_key, version)
    entity = data.draw(entities(cls))
    expected = codec.encode_response(cls, 7, entity)
    assert fastwrite.encode_response(cls, 7, codec.to_op(entity)) == expected


@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_missing_keys_take_from_op_defaults(api_key: int, version: int) -> None:
    """A handler may leave fields out: the writer fills them exactly as codec.from_op does."""
    cls = codec.response_class(api_key, version)
    assert fastwrite.encode_response(cls, 1, {}) == codec.encode_response(cls, 1, codec.from_op(cls, {}))


def test_op_values_and_kio_values_encode_alike() -> None:
    cls = codec.response_class(12, 4)  # Heartbeat v4: throttle_time_ms (timedelta), error_code
    resp = {"throttle_time": 3, "error_code": 27}
    assert fastwrite.encode_response(cls, 9, resp) == codec.encode_response(cls, 9, codec.from_op(cls, resp))
