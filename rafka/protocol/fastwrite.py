"""Encode responses straight from op dicts, without building kio entities.

How this works: kio's writer validates every value by constructing typed entities
first (``codec.from_op``), which costs ~45 µs for even a tiny OffsetCommit response —
the largest single cost per request in the gateway (see BENCHMARKS.md). This module
generates, once per kio response class, straight-line Python from the same schema
metadata kio uses (each field's ``kafka_type``, tag, optionality and the class's
flexible flag), as ``fastread`` does for requests: nested structs are inlined, each run
of fixed-size fields is one ``struct.pack``, and the response header is written by the
same function, appending to one ``bytearray``. Missing keys and ``None`` for
non-nullable fields take the same defaults ``codec.from_op`` uses; a tagged field is
written, in tag order, only when it differs from its default — so the bytes are
identical to kio's, which
``tests/protocol/test_fastwrite.py`` checks for every API and version the gateway
serves. Values may be in op form (ms ints, error-code ints) or kio form.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import struct
import uuid
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)

Write = Callable[[bytearray, Any], None]

_ZERO_UUID = bytes(16)


def _uvarint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _num(v: Any) -> Any:
    """An op value as a plain number (error codes, timedeltas, bools, floats)."""
    if isinstance(v, enum.Enum):
        return int(v.value)
    if isinstance(v, datetime.timedelta):
        return round(v.total_seconds() * 1000)
    return v


def _uuid(out: bytearray, v: Any) -> None:
    if v is None:
        out += _ZERO_UUID
    elif isinstance(v, uuid.UUID):
        out += v.bytes
    elif isinstance(v, (bytes, bytearray)):
        out += v
    else:
        out += uuid.UUID(str(v)).bytes


def _datetime(nullable: bool) -> Write:
    def write(out: bytearray, v: Any) -> None:
        if v is None and nullable:
            ms = -1
        elif isinstance(v, datetime.datetime):
            ms = round(v.timestamp() * 1000)
        else:
            ms = int(v)
        out += ms.to_bytes(8, "big", signed=True)

    return write


def _op_form(v: Any) -> Any:
    """A default value as it appears in an op dict (for comparing tagged fields)."""
    if isinstance(v, (enum.Enum, datetime.timedelta)):
        return _num(v)
    if dataclasses.is_dataclass(v):
        from rafka.protocol.codec import to_op

        return to_op(v)
    if isinstance(v, tuple):
        return list(v)
    return v


# kafka type -> struct code of the fixed-size fields the generated code packs in runs
_CODES = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint8": "B", "uint16": "H", "uint32": "I",
          "uint64": "Q", "error_code": "h", "timedelta_i32": "i", "timedelta_i64": "q", "float64": "d", "bool": "?"}


def _block(head: str, lines: list[str]) -> list[str]:
    return [head] + ["    " + line for line in lines]


class _Gen:
    """Source generation, as ``fastread`` does for requests: nested structs are inlined (their
    locals suffixed by depth) and each run of fixed-size fields is one ``struct.pack``."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {"_num": _num, "_uvarint": _uvarint, "_uuid": _uuid, "_op_form": _op_form,
                                   "_h": struct.Struct(">h").pack, "_i": struct.Struct(">i").pack,
                                   "_head": struct.Struct(">Ii").pack, "_size": struct.Struct(">I").pack}

    def const(self, value: Any) -> str:
        name = f"_k{len(self.ns)}"
        self.ns[name] = value
        return name

    def literal(self, value: Any) -> str:
        """Source for an immutable default (its literal), else a shared constant (never mutated)."""
        if value is None or type(value) in (int, str, bool):
            return repr(value)
        return self.const(value)

    def pack(self, run: list[tuple[str, str]]) -> list[str]:
        """Write a run of (variable, kafka type) fixed-size fields with one pack; op-form numbers pass
        as they are, anything else (error-code enums, timedeltas) through ``_num``."""
        if not run:
            return []
        pack = self.const(struct.Struct(">" + "".join(_CODES[t] for _, t in run)).pack)
        args = [v if t == "bool" else f"{v} if type({v}) is int else _num({v})" for v, t in run]
        return [f"out += {pack}({', '.join(args)})"]

    def sized(self, ktype: str, flexible: bool, v: str) -> list[str]:
        """A string or bytes ``v`` (None writes null, as kio does where the field is nullable)."""
        encode = f"b = {v}.encode() if type({v}) is str else {v}"
        if flexible:
            return _block(f"if {v} is None: out.append(0)", []) + _block("else:", [
                encode, "n = len(b) + 1", "if n < 0x80: out.append(n)", "else: _uvarint(out, n)", "out += b"])
        null, size = ('b"\\xff\\xff"', "_h") if ktype == "string" else ('b"\\xff\\xff\\xff\\xff"', "_i")
        return [f"if {v} is None: out += {null}", *_block("else:", [encode, f"out += {size}(len(b))", "out += b"])]

    def primitive(self, ktype: str, flexible: bool, nullable: bool, v: str) -> list[str]:
        """Write primitive ``v`` that is not part of a run."""
        if ktype in _CODES:
            return self.pack([(v, ktype)])
        if ktype in ("string", "bytes", "records"):
            return self.sized(ktype, flexible, v)
        if ktype == "uuid":
            return [f"_uuid(out, {v})"]
        if ktype == "datetime_i64":
            return [f"{self.const(_datetime(nullable))}(out, {v})"]
        raise NotImplementedError(f"no writer for Kafka type {ktype!r}")

    def array(self, items: list[str], flexible: bool, v: str, d: int) -> list[str]:
        """Write list ``v``, each element ``x{d}`` by ``items``."""
        if flexible:
            count = ["n = len(" + v + ") + 1", "if n < 0x80: out.append(n)", "else: _uvarint(out, n)"]
            head = [f"if {v} is None: out.append(0)"]
        else:
            count = [f"out += _i(len({v}))"]
            head = [f'if {v} is None: out += b"\\xff\\xff\\xff\\xff"']
        return head + _block("else:", [*count, *_block(f"for x{d} in {v}:", items)])

    def struct(self, cls: type, src: str, d: int) -> list[str]:
        """Statements writing the dict ``src`` as struct ``cls`` at nesting depth ``d``."""
        from rafka.protocol.codec import _from_op_plan

        flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
        defaults = {name: (default, optional) for name, _elem, _base, default, optional in _from_op_plan(cls)}
        body = [f"g{d} = {src}.get"]
        run: list[tuple[str, str]] = []
        tagged: list[tuple[int, str, Any, dataclasses.Field[Any]]] = []
        for i, field in enumerate(dataclasses.fields(cls)):
            default, optional = defaults[field.name]
            tag = get_field_tag(field)
            if tag is not None:
                tagged.append((int(tag), f"v{d}_{i}", _op_form(default), field))
                continue
            v, k = f"v{d}_{i}", self.literal(_op_form(default))
            body.append(f"{v} = g{d}({field.name!r}, {k})")
            if not optional and k != "None":
                body.append(f"if {v} is None: {v} = {k}")
            kind = classify_field(field)
            if isinstance(kind, PrimitiveField) and get_schema_field_type(field) in _CODES:
                run.append((v, get_schema_field_type(field)))
                continue
            body += self.pack(run)
            run = []
            body += self.value(field, flexible, optional, v, d)
        body += self.pack(run)
        if flexible:
            body += self.tags(sorted(tagged, key=lambda t: t[0]), flexible, d) if tagged else ["out.append(0)"]
        return body

    def value(self, field: dataclasses.Field[Any], flexible: bool, optional: bool, v: str, d: int) -> list[str]:
        """Statements writing field value ``v`` of a struct at depth ``d``."""
        kind = classify_field(field)
        if isinstance(kind, PrimitiveField):
            return self.primitive(get_schema_field_type(field), flexible, optional, v)
        if isinstance(kind, PrimitiveTupleField):
            return self.array(self.primitive(get_schema_field_type(field), flexible, False, f"x{d}"), flexible, v, d)
        if isinstance(kind, EntityField):
            inner = self.struct(kind.type_, v, d + 1)
            return [f"if {v} is None: out.append(0xFF)", *_block("else:", ["out.append(1)", *inner])] if optional else inner
        if isinstance(kind, EntityTupleField):
            return self.array(self.struct(kind.type_, f"x{d}", d + 1), flexible, v, d)
        raise NotImplementedError(f"field {field.name}: unsupported kind {kind!r}")

    def tags(self, tagged: list[tuple[int, str, Any, dataclasses.Field[Any]]], flexible: bool, d: int) -> list[str]:
        """A struct's tagged fields, in tag order: each that is set and differs from its default is
        written into a buffer of its own (``out`` stands for it meanwhile), then tag, size, bytes."""
        lines = [f"t{d} = []"]
        for tag, v, default, field in tagged:
            lines += [f"{v} = g{d}({field.name!r})", *_block(
                f"if {v} is not None and _op_form({v}) != {self.const(default)}:",
                [f"o{d}, out = out, bytearray()", *self.value(field, flexible, False, v, d),
                 f"t{d}.append(({tag}, out))", f"out = o{d}"])]
        return [*lines, f"_uvarint(out, len(t{d}))", *_block(f"for tag, b in t{d}:", [
            "_uvarint(out, tag)", "_uvarint(out, len(b))", "out += b"])]

    def compile(self, name: str, head: str, lines: list[str]) -> Callable[..., Any]:
        source = "\n    ".join([head, *lines]) + "\n"
        ns = dict(self.ns)
        exec(compile(source, name, "exec"), ns)  # noqa: S102
        return ns[head[4:head.index("(")]]  # type: ignore[no-any-return]


_GEN = _Gen()


@cache
def writer(cls: type) -> Write:
    """The dict writer for kio entity class ``cls``."""
    return _GEN.compile(f"<fastwrite {cls.__module__}.{cls.__qualname__}>", "def write(out, d0):",
                        _GEN.struct(cls, "d0", 0))


@cache
def _encoder(cls: type) -> Callable[[int, dict[str, Any]], bytes]:
    """``encode_response`` of ``cls``: its header and body in one generated function."""
    header = ["out = bytearray(_head(0, cid))"] + (["out.append(0)"] if cls.__header_schema__.__flexible__ else [])
    return _GEN.compile(f"<fastwrite {cls.__module__}.{cls.__qualname__}>", "def encode(cid, d0):", [
        *header, *_GEN.struct(cls, "d0", 0), "out[0:4] = _size(len(out) - 4)", "return bytes(out)"])


def encode_response(cls: type, correlation_id: int, data: dict[str, Any]) -> bytes:
    """``data`` encoded as ``cls`` with its response header, size-prefixed (same bytes as kio)."""
    return _encoder(cls)(correlation_id, data)
