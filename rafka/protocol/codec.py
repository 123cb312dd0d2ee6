"""Kafka message codec: kio entities at the edge, version-independent dicts inside.

How this works: kio (generated from Kafka's JSON schemas) gives one frozen
dataclass per API *version* and native readers/writers. rafka handlers never see
versions: ``to_op`` turns any version's request entity into a plain dict keyed by
kio's field names (timedeltas as int milliseconds, error codes as ints, nested
entities as dicts), and ``from_op`` builds the response entity of the version the
client asked for from a dict that may hold more fields than that version has
(extra keys are dropped, missing ones take the field default or a zero value).
Readers, writers and per-class converters are cached on first use.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import io
import struct
import typing
import uuid
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

_HDR = struct.Struct(">hhi")
_HDR_CLIENT = struct.Struct(">hhih")  # the header's fixed part, and the client id's length
_I32 = struct.Struct(">i")
_MS_DELTA = datetime.timedelta(milliseconds=1)


class DecodeError(Exception):
    """A frame could not be decoded."""


class RequestHeader(typing.NamedTuple):
    """The parts of a request header rafka uses (a tuple: built once per request)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


_new_header = tuple.__new__  # a RequestHeader without its generated __new__ (a Python call)


def read_uvarint(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """An unsigned varint at ``pos`` (at most 5 bytes, as Kafka reads them) and the next position."""
    end = len(buf) if end is None else end
    shift = result = 0
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise DecodeError("varint too long")


_CLIENT_IDS: dict[bytes, str] = {}  # a connection sends the same client id with every request


def read_request_header(frame: bytes, flexible: bool) -> RequestHeader:
    """Parse a request header (v1, or v2 with tagged fields when ``flexible``)."""
    if len(frame) < 10:
        raise DecodeError("request shorter than its header")
    api_key, api_version, correlation_id, n = _HDR_CLIENT.unpack_from(frame, 0)
    pos = 10
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise DecodeError("truncated client_id")
        raw = frame[pos : pos + n]
        client_id = _CLIENT_IDS.get(raw)
        if client_id is None:
            client_id = raw.decode("utf-8", "replace")
            if n <= 255:  # a long id is decoded each time rather than pinned in memory
                if len(_CLIENT_IDS) >= 4096:
                    _CLIENT_IDS.clear()
                _CLIENT_IDS[raw] = client_id
        pos += n
    if flexible:
        if pos < len(frame) and frame[pos] == 0:  # no tagged fields: what clients send
            pos += 1
        else:
            count, pos = read_uvarint(frame, pos)
            for _ in range(count):
                _tag, pos = read_uvarint(frame, pos)
                size, pos = read_uvarint(frame, pos)
                pos += size
            if pos > len(frame):
                raise DecodeError("truncated tagged fields")
    return _new_header(RequestHeader, (api_key, api_version, correlation_id, client_id, pos))


def peek_key_version_correlation(frame: bytes) -> tuple[int, int, int]:
    """The api key, version and correlation id of a frame (DecodeError if too short)."""
    if len(frame) < 8:
        raise DecodeError("request shorter than its header")
    return _HDR.unpack_from(frame, 0)


def has_request_schema(api_key: int, version: int) -> bool:
    """Whether Kafka defines ``api_key`` at ``version``, from kio's index: without importing
    the schema, which ``request_class`` does on first use (importing them all costs a gateway
    a second at start)."""
    versions = schema_name_map.get(api_key_map.get(api_key, ""), {})
    return EntityType.request in versions.get(version, {})


@cache
def request_class(api_key: int, version: int) -> type | None:
    """kio's request class for ``api_key``/``version``, or None if Kafka defines none."""
    try:
        return load_request_schema(api_key, version)
    except Exception:
        return None


@cache
def response_class(api_key: int, version: int) -> type:
    """kio's response class for ``api_key``/``version``."""
    return load_response_schema(api_key, version)


@cache
def _reader(cls: type) -> Callable[..., Any]:
    return entity_reader(cls)


@cache
def _writer(cls: type) -> Callable[..., Any]:
    return entity_writer(cls)


def decode_request(cls: type, frame: bytes, offset: int) -> Any:
    """Decode the body of a request of class ``cls`` starting at ``offset``."""
    try:
        entity, _size = _reader(cls)(memoryview(frame), offset)
    except Exception as exc:  # kio raises several types on malformed input
        raise DecodeError(f"{cls.__name__}: {exc}") from exc
    return entity


def encode_response(cls: type, correlation_id: int, entity: Any) -> bytes:
    """Encode ``entity`` with its response header, size-prefixed, ready to write."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(_I32.pack(correlation_id))
    if cls.__header_schema__.__flexible__:
        out.write(b"\0")  # no tagged fields in the response header
    _writer(cls)(out, entity)
    data = out.getbuffer()
    _I32.pack_into(data, 0, len(data) - 4)
    return bytes(data)


# --------------------------------------------------------------------------
# entity <-> dict conversion


def _is_optional(tp: Any) -> bool:
    return type(None) in typing.get_args(tp)


def _strip_optional(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType) and len(args) == 1:
        return args[0]
    return tp


def _elem_entity(tp: Any) -> type | None:
    """The entity class of a ``tuple[Entity, ...]`` field, else None."""
    tp = _strip_optional(tp)
    if typing.get_origin(tp) is tuple:
        (elem, *_rest) = typing.get_args(tp)
        if dataclasses.is_dataclass(elem):
            return elem  # type: ignore[return-value]
    return None


def _base(tp: Any) -> Any:
    tp = _strip_optional(tp)
    # kio primitives and phantoms are NewType-like subclasses of int/str
    for root in (bool, datetime.timedelta, enum.Enum, uuid.UUID, int, str, bytes, float):
        try:
            if isinstance(tp, type) and issubclass(tp, root):
                return root
        except TypeError:
            pass
    return tp


_PLAIN, _MANY, _ONE, _MS, _ENUM, _BYTES, _LIST = range(7)


@cache
def _to_op_plan(cls: type) -> tuple[tuple[str, int, Any], ...]:
    """Per field: (name, conversion, nested class) — decided once per class, not per value."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        elem = _elem_entity(tp)
        kind = _base(tp)
        if elem:
            plan.append((f.name, _MANY, elem))
        elif dataclasses.is_dataclass(kind):
            plan.append((f.name, _ONE, kind))
        elif kind is datetime.timedelta:
            plan.append((f.name, _MS, None))
        elif kind is enum.Enum:
            plan.append((f.name, _ENUM, None))
        elif kind is bytes:
            plan.append((f.name, _BYTES, None))
        elif typing.get_origin(_strip_optional(tp)) is tuple:
            plan.append((f.name, _LIST, None))
        else:
            plan.append((f.name, _PLAIN, None))
    return tuple(plan)


def to_op(entity: Any) -> dict[str, Any]:
    """A kio entity as a plain dict (timedeltas → ms, enums → int, nested → dicts)."""
    return _converter(type(entity))(entity)


def _ms(value: Any) -> int:
    return value // _MS_DELTA if isinstance(value, datetime.timedelta) else int(value)


@cache
def _converter(cls: type) -> Callable[[Any], dict[str, Any]]:
    """Compile ``to_op`` for one class into a single dict expression (it runs per request)."""
    env: dict[str, Any] = {"_ms": _ms, "_bytes": bytes, "_list": list}
    items = []
    for i, (name, conv, nested) in enumerate(_to_op_plan(cls)):
        v = f"e.{name}"
        if conv is _PLAIN:
            items.append(f"{name!r}: {v}")
            continue
        if conv is _MANY or conv is _ONE:
            env[f"_c{i}"] = _converter(nested)
            expr = f"[_c{i}(x) for x in {v}]" if conv is _MANY else f"_c{i}({v})"
        elif conv is _MS:
            expr = f"_ms({v})"
        elif conv is _ENUM:
            expr = f"int({v}.value)"
        elif conv is _BYTES:
            expr = f"_bytes({v})"
        else:
            expr = f"_list({v})"
        items.append(f"{name!r}: None if {v} is None else {expr}")
    src = "def convert(e):\n    return {" + ", ".join(items) + "}\n"
    exec(compile(src, f"<to_op {cls.__module__}.{cls.__name__}>", "exec"), env)  # noqa: S102 (generated from kio's schema, not input)
    return env["convert"]  # type: ignore[no-any-return]


def _zero(tp: Any) -> Any:
    if _is_optional(tp):
        return None
    base = _base(tp)
    if dataclasses.is_dataclass(base):
        return from_op(base, {})  # type: ignore[arg-type]
    if typing.get_origin(_strip_optional(tp)) is tuple:
        return ()
    return {
        bool: False,
        int: 0,
        str: "",
        bytes: b"",
        float: 0.0,
        datetime.timedelta: datetime.timedelta(0),
        enum.Enum: ErrorCode.none,
        uuid.UUID: uuid.UUID(int=0),
    }.get(base)


@cache
def _from_op_plan(cls: type) -> tuple[tuple[str, Any, Any, Any, bool], ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = _zero(tp)
        elem = _elem_entity(tp)
        plan.append((f.name, elem, _base(tp), default, _is_optional(tp)))
    return tuple(plan)


def from_op(cls: type, data: dict[str, Any]) -> Any:
    """Build entity ``cls`` from ``data``, ignoring keys the class lacks."""
    kwargs: dict[str, Any] = {}
    for name, elem, base, default, optional in _from_op_plan(cls):
        value = data.get(name, default)
        if value is None:
            kwargs[name] = None if optional else default
        elif value is default:
            kwargs[name] = value
        elif elem is not None:
            kwargs[name] = tuple(from_op(elem, v) for v in value)
        elif isinstance(value, dict) and dataclasses.is_dataclass(base):
            kwargs[name] = from_op(base, value)
        elif base is datetime.timedelta:
            kwargs[name] = value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
        elif base is enum.Enum:
            kwargs[name] = value if isinstance(value, ErrorCode) else ErrorCode(value)
        elif base is uuid.UUID and not isinstance(value, uuid.UUID):
            kwargs[name] = uuid.UUID(bytes=value) if isinstance(value, bytes) else uuid.UUID(str(value))
        elif isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)
