"""Decode a request body straight into its op dict, without building kio entities.

How this works: the gateway used to walk each body three times — a bounds check
(``wirecheck``), kio's native reader, then ``codec.to_op`` on the entity. This module
generates, once per kio request class, straight-line Python from the same schema
metadata (each field's ``kafka_type``, tag and optionality, the class's flexible flag)
that reads the wire bytes and builds the op dict directly. Nested structs are inlined;
runs of fixed-size fields are one ``struct.unpack_from`` that also takes the first byte
of the field after them (a compact length or count, whose one-byte case is inlined);
every array count that cannot fit in the bytes left is refused, as wirecheck does.
Values follow kio's reader (bools only 0 or 1, a zero uuid is None, strict UTF-8, null
refused where the schema forbids it, trailing bytes ignored) in ``to_op``'s form
(timedeltas as int ms, arrays as lists, structs as dicts). Unknown tagged fields are
skipped, as Kafka's generated readers skip them (kio refuses them): a newer client
may send tags this broker's schemas do not have.
A tagged field shorter than its declared size, the one input the old steps read from
different places, goes to the old path. ``tests/protocol/test_fastread.py`` checks the
dicts against ``to_op`` of kio's entity for every API and version served.
"""

from __future__ import annotations

import ast
import dataclasses
import datetime
import enum
import struct
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial._parse import get_reader
from kio.serial.errors import SerialError

from rafka.protocol import codec, wirecheck
from rafka.protocol.codec import DecodeError, read_uvarint, to_op

_TD64 = (2**63 - 1) // 1000  # kio keeps timedelta_i64 milliseconds whose microseconds fit an int64
# kafka type -> (struct code, size, statement checking/converting variable V, or "")
_FIXED = {"int8": ("b", 1, ""), "int16": ("h", 2, ""), "int32": ("i", 4, ""), "int64": ("q", 8, ""),
          "uint8": ("B", 1, ""), "uint16": ("H", 2, ""), "uint32": ("I", 4, ""), "uint64": ("Q", 8, ""),
          "float64": ("d", 8, ""), "timedelta_i32": ("i", 4, ""),
          "timedelta_i64": ("q", 8, f"if not -{_TD64} <= V <= {_TD64}: _bad('timedelta_i64 out of range')"),
          "bool": ("B", 1, "V = _BOOL[V]"),  # IndexError (refused) unless 0 or 1, like kio
          "error_code": ("h", 2, "if V not in _ERRORS: _bad('unknown error code')"),
          "uuid": ("16s", 16, "V = None if V == _ZERO else _UUID(bytes=V)"),
          "_len16": ("h", 2, ""), "_len32": ("i", 4, ""),  # legacy lengths and counts
          "_peek": ("B", 0, "")}  # the first byte of the next field, read along (its reader does not reread it)
_PREFIX = {"string": ("_len16", 2), "bytes": ("_len32", 4), "records": ("_len32", 4)}


class _Diverge(Exception):
    """A known tagged field is shorter than its size: wirecheck and kio read on from different places."""


def _bad(what: str) -> None:
    raise DecodeError(what)


def _compact(buf: bytes, pos: int, end: int, text: bool, nullable: bool) -> tuple[Any, int]:
    """A compact string or bytes whose length is not one byte (the generated code inlines that case)."""
    n, pos = read_uvarint(buf, pos, end)
    if not n:
        if nullable:
            return None, pos
        _bad("null string or bytes")
    v = buf[pos : pos + n - 1]
    return (v.decode() if text else v), pos + n - 1


def _check_count(c: int, left: int, size: int, nullable: bool, name: str) -> None:
    """Refuse an array count that is negative (but for a null where allowed) or cannot fit in the bytes left."""
    if c == -1:
        if not nullable:
            _bad(f"null in non-nullable array {name}")
    elif c < 0:
        _bad("negative array length")
    elif c * size > left:
        raise DecodeError(f"an array of {c} elements cannot fit in the {left} bytes left")


def _count(buf: bytes, pos: int, end: int, size: int, nullable: bool, name: str) -> tuple[int, int]:
    """A compact array count (-1 for null) not in the fast path."""
    n, pos = read_uvarint(buf, pos, end)
    _check_count(n - 1, end - pos, size, nullable, name)
    return n - 1, pos


def _skip_tags(buf: bytes, pos: int, end: int) -> int:
    """The tagged fields of a struct that knows none: each is skipped, as Kafka does."""
    count, pos = read_uvarint(buf, pos, end)
    if count > end - pos:
        _bad(f"{count} tagged fields cannot fit in the bytes left")
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos, end)
        size, pos = read_uvarint(buf, pos, end)
        pos += size
        if pos > end:
            _bad(f"tagged field {tag} runs past the end of the request")
    return pos


def _op_default(v: Any) -> Any:
    """A field default as ``to_op`` gives it."""
    if isinstance(v, datetime.timedelta):
        return v // datetime.timedelta(milliseconds=1)
    if isinstance(v, enum.Enum):
        return int(v.value)
    if dataclasses.is_dataclass(v):
        return to_op(v)
    if isinstance(v, tuple):
        return [_op_default(x) for x in v]
    return bytes(v) if isinstance(v, bytes) else v


def _old_path(cls: type, frame: bytes, offset: int) -> dict[str, Any]:
    """The gateway's old three steps, for the inputs they read differently from each other."""
    try:
        wirecheck.check_body(cls, frame, offset)
    except wirecheck.WireError as exc:
        raise DecodeError(str(exc)) from None
    return codec.to_op(codec.decode_request(cls, frame, offset))


def _block(head: str, lines: list[str]) -> list[str]:
    return [head] + ["    " + line for line in lines]


class _Gen:
    """Source generation: nested structs are inlined, their locals suffixed by depth. Positions only
    grow, so a read past the end is caught by the next read (IndexError, struct.error) or by the final
    ``pos > end`` check: slices need no check of their own."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "_bad": _bad, "_count": _count, "_check_count": _check_count, "_uvarint": read_uvarint,
            "_compact": _compact, "_skip_tags": _skip_tags, "_DecodeError": DecodeError, "_Diverge": _Diverge,
            "_BOOL": (False, True), "_ERRORS": frozenset(int(e.value) for e in ErrorCode), "_ZERO": bytes(16),
            "_UUID": uuid.UUID, "_unpack": struct.unpack_from,
            "_INVALID": (IndexError, ValueError, OverflowError, struct.error, SerialError)}
        self.mins: dict[type, int] = {}  # smallest wire size of each struct (bounds array counts)

    def const(self, value: Any) -> str:
        name = f"_k{len(self.ns)}"
        self.ns[name] = value
        return name

    def literal(self, value: Any) -> str:
        """Source for ``value``: a literal (a fresh list or dict per call) if it has one."""
        try:
            if ast.literal_eval(repr(value)) == value:
                return repr(value)
        except (ValueError, SyntaxError):
            pass
        return self.const(value)

    def fixed(self, run: list[tuple[str, str]]) -> list[str]:
        """Read a run of (variable, kafka type) fixed-size fields with one unpack."""
        unpack = self.const(struct.Struct(">" + "".join(_FIXED[t][0] for _, t in run)).unpack_from)
        lines = [f"{', '.join(v for v, _ in run)}, = {unpack}(buf, pos)", f"pos += {sum(_FIXED[t][1] for _, t in run)}"]
        return lines + [_FIXED[t][2].replace("V", v) for v, t in run if _FIXED[t][2]]

    def sized(self, ktype: str, flexible: bool, nullable: bool, v: str, peeked: bool) -> list[str]:
        """Read a string or bytes into ``v`` (legacy, or ``peeked``: its length or first byte is in ``n``)."""
        text = ktype == "string"
        decode = ".decode()" if text else ""
        if flexible:  # fast path: a one-byte length of a non-null value
            return [*([] if peeked else ["n = buf[pos]"]), *_block("if 0 < n < 0x80:", [
                "stop = pos + n", f"{v} = buf[pos + 1:stop]{decode}", "pos = stop"]),
                *(["elif n == 0:", f"    {v} = None", "    pos += 1"] if nullable else []),
                f"else: {v}, pos = _compact(buf, pos, end, {text}, {nullable})"]
        return [*_block("if n >= 0:", ["stop = pos + n", f"{v} = buf[pos:stop]{decode}", "pos = stop"]),
                *([f"elif n == -1: {v} = None"] if nullable else []), "else: _bad('null or negative length')"]

    def value(self, field: dataclasses.Field[Any], flexible: bool, tagged: bool, v: str, d: int,
              peeked: bool = False) -> tuple[list[str], int]:
        """Statements reading one field into ``v`` at depth ``d``; its smallest size."""
        kind = classify_field(field)
        if isinstance(kind, (PrimitiveTupleField, EntityTupleField)):
            return self.array(field, kind, flexible, tagged, v, d, peeked)
        if isinstance(kind, EntityField):
            lines, expr = self.entity(kind.type_, d + 1)
            if not tagged and is_optional(field):  # KIP-893 nullable struct: an int8 marker, -1 for null
                return ["if buf[pos] == 0xFF:", f"    {v} = None", "    pos += 1",
                        *_block("else:", ["pos += 1", *lines, f"{v} = {expr}"])], 1
            return [*lines, f"{v} = {expr}"], self.mins[kind.type_]
        return self.primitive(get_schema_field_type(field), flexible, not tagged and is_optional(field), v, peeked)

    def primitive(self, ktype: str, flexible: bool, nullable: bool, v: str,
                  peeked: bool = False) -> tuple[list[str], int]:
        if ktype in _FIXED:
            return self.fixed([(v, ktype)]), _FIXED[ktype][1]
        if ktype in _PREFIX:
            return self.sized(ktype, flexible, nullable, v, peeked), 1 if flexible else _PREFIX[ktype][1]
        read = self.const(get_reader(ktype, flexible, nullable))  # e.g. datetime_i64: kio's own reader
        return [f"{v}, n = {read}(buf, pos)", "pos += n"], 1

    def array(self, field: Any, kind: Any, flexible: bool, tagged: bool, v: str, d: int,
              peeked: bool) -> tuple[list[str], int]:
        """Read an array into ``v`` (legacy: its count is already in ``c{d}``, from the run of fixed fields)."""
        ktype = None if isinstance(kind, EntityTupleField) else get_schema_field_type(field)
        if ktype is None:
            item, expr = self.entity(kind.type_, d + 1)
            smallest = max(self.mins[kind.type_], 1)
        else:
            expr = f"x{d}"
            item, smallest = self.primitive(ktype, flexible, False, expr)
            if ktype in _PREFIX and not flexible:
                item = self.fixed([("n", _PREFIX[ktype][0])]) + item
        # kio reads a null as None even where the schema forbids it; Kafka and wirecheck refuse it there
        c, nullable = f"c{d}", tagged or type(None) in getattr(field.type, "__args__", ())
        if flexible:  # fast path: a one-byte count that fits in the bytes left
            lines = [f"{c} -= 1" if peeked else f"{c} = buf[pos] - 1",
                     f"if {c} < 0 or {c} > 0x7E or {c} * {smallest} > end - pos - 1:",
                     f"    {c}, pos = _count(buf, pos, end, {smallest}, {nullable}, {field.name!r})", "else: pos += 1"]
        else:
            check = f"_check_count({c}, end - pos, {smallest}, {nullable}, {field.name!r})"
            lines = [f"if {c} < 0 or {c} * {smallest} > end - pos: {check}"]
        if ktype in _FIXED and not _FIXED[ktype][2]:
            code, size, _ = _FIXED[ktype]
            read = [f"{v} = list(_unpack('>%d{code}' % {c}, buf, pos))", f"pos += {c} * {size}"]
        else:
            read = [f"{v} = []", *_block(f"while {c}:", [f"{c} -= 1", *item, f"{v}.append({expr})"])]
        if nullable:
            return lines + [f"if {c} < 0: {v} = None", *_block("else:", read)], 1 if flexible else 4
        return lines + read, 1 if flexible else 4

    def entity(self, cls: type, d: int) -> tuple[list[str], str]:
        """Statements reading struct ``cls`` at nesting depth ``d``; the expression of its op dict."""
        flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
        body: list[str] = []
        run: list[tuple[str, str]] = []
        tags: list[str] = []
        items: list[str] = []
        smallest = 1 if flexible else 0
        for i, field in enumerate(dataclasses.fields(cls)):
            v, tag = f"v{d}_{i}", get_field_tag(field)
            items.append(f"{field.name!r}: {v}")
            if tag is not None:
                body.insert(0, f"{v} = {self.literal(_op_default(get_tagged_field_default(field)))}")
                tags += _block(f"{'el' if tags else ''}if tag{d} == {int(tag)}:",
                               self.value(field, flexible, True, v, d)[0])
                continue
            kind = classify_field(field)
            ktype = None if isinstance(kind, (EntityField, EntityTupleField)) else get_schema_field_type(field)
            if ktype in _FIXED and not kind.is_array:
                run.append((v, ktype))
                smallest += _FIXED[ktype][1]
                continue
            peeked = bool(run) and flexible and (kind.is_array or ktype in _PREFIX)
            if peeked:  # its first byte joins the run of fixed fields
                run.append((f"c{d}", "_peek") if kind.is_array else ("n", "_peek"))
            if not flexible and (kind.is_array or ktype in _PREFIX):  # its length joins the run of fixed fields
                run.append((f"c{d}", "_len32") if kind.is_array else ("n", _PREFIX[ktype][0]))  # type: ignore[index]
            if run:
                body += self.fixed(run)
                run = []
            lines, size = self.value(field, flexible, False, v, d, peeked)
            body += lines
            smallest += size
        first = "buf[pos]"
        if run and flexible:  # the tagged fields' count
            run.append((first := f"t{d}", "_peek"))
        if run:
            body += self.fixed(run)
        if flexible and tags:
            t, stop, count = f"tag{d}", f"tstop{d}", f"tc{d}"
            loop = [f"{t}, pos = _uvarint(buf, pos, end)", "n, pos = _uvarint(buf, pos, end)", f"{stop} = pos + n",
                    f"if {stop} > end: _bad(f'tagged field {{{t}}} runs past the end of the request')",
                    *tags, f"else: pos = {stop}",  # an unknown tag: skipped
                    f"if pos > {stop}: _bad(f'tagged field {{{t}}} runs past its size')",
                    f"if pos < {stop}: raise _Diverge"]  # kio reads on from the value's end, wirecheck from its size
            body += [f"if {first} == 0: pos += 1", *_block("else:", [
                f"{count}, pos = _uvarint(buf, pos, end)",
                f"if {count} > end - pos: _bad(f'{{{count}}} tagged fields cannot fit in the bytes left')",
                *_block(f"for _ in range({count}):", loop)])]
        elif flexible:
            body += [f"if {first}: pos = _skip_tags(buf, pos, end)", "else: pos += 1"]
        self.mins[cls] = smallest
        return body or ["pass"], "{" + ", ".join(items) + "}"

    def request(self, cls: type) -> Callable[[bytes, int], dict[str, Any]]:
        """Compile the reader of request class ``cls``."""
        lines, expr = self.entity(cls, 0)
        source = "\n    ".join([
            "def read(buf, pos):", "if type(buf) is not bytes: buf = bytes(buf)", "end = len(buf)",
            *_block("try:", lines),
            f"except _INVALID as exc: raise _DecodeError(f'{cls.__name__}: {{type(exc).__name__}}: {{exc}}') from None",
            f"if pos > end: _bad('{cls.__name__}: truncated request')", f"return {expr}"]) + "\n"
        ns = dict(self.ns)
        exec(compile(source, f"<fastread {cls.__module__}.{cls.__qualname__}>", "exec"), ns)  # noqa: S102
        return ns["read"]  # type: ignore[no-any-return]


_GEN = _Gen()
_READERS: dict[type, Callable[[bytes, int], dict[str, Any]]] = {}


def decode_request(cls: type, frame: bytes, offset: int) -> dict[str, Any]:
    """The op dict of the request body of kio request class ``cls`` at ``offset`` (raises codec.DecodeError)."""
    try:
        read = _READERS[cls]
    except KeyError:
        read = _READERS[cls] = _GEN.request(cls)
    try:
        return read(frame, offset)
    except _Diverge:
        return _old_path(cls, frame, offset)
