"""Hypothesis strategies for kio entities, built from their fields' Kafka types."""

from __future__ import annotations

import dataclasses
import datetime
import typing
from functools import cache

from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _bounded(bits: int) -> st.SearchStrategy[int]:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def _for(kafka_type: str | None, tp: typing.Any) -> st.SearchStrategy[typing.Any]:
    optional = type(None) in typing.get_args(tp)
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    inner = args[0] if optional and len(args) == 1 else tp
    if typing.get_origin(inner) is tuple:
        elem = typing.get_args(inner)[0]
        base = st.lists(entities(elem) if dataclasses.is_dataclass(elem) else _for(kafka_type, elem), max_size=3).map(tuple)
    elif dataclasses.is_dataclass(inner):
        base = entities(inner)
    elif kafka_type in INTS:
        base = _bounded(INTS[kafka_type])
    elif kafka_type == "uint16":
        base = st.integers(0, 2**16 - 1)
    elif kafka_type == "timedelta_i32":
        base = _bounded(32).map(lambda ms: datetime.timedelta(milliseconds=ms))
    elif kafka_type == "timedelta_i64":
        base = st.integers(-(2**40), 2**40).map(lambda ms: datetime.timedelta(milliseconds=ms))
    elif kafka_type == "datetime_i64":
        base = st.integers(0, 2**41).map(lambda ms: datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC))
    elif kafka_type == "error_code":
        base = st.sampled_from(list(ErrorCode))
    elif kafka_type == "bool":
        base = st.booleans()
    elif kafka_type == "float64":
        base = st.floats(allow_nan=False, allow_infinity=False)
    elif kafka_type == "uuid":
        base = st.uuids()
    elif kafka_type in ("bytes", "records"):
        base = st.binary(max_size=16)
    else:
        base = st.text(max_size=12)
    return st.one_of(st.none(), base) if optional else base


@cache
def entities(cls: type) -> st.SearchStrategy[typing.Any]:
    """A strategy for valid instances of kio entity ``cls``."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: _for(f.metadata.get("kafka_type"), hints[f.name]) for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)
