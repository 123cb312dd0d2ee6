"""A bounds check of a request body before kio decodes it.

How this works: kio's native reader pre-allocates every array with the element
count read from the wire, so a 30-byte request claiming 2 billion elements makes
the allocation fail and aborts the whole gateway process (Rust aborts on
allocation failure; Python cannot catch it). Kafka's own parser refuses a count
larger than the bytes that remain; this module does the same, walking the body
by the request class's schema (the same field layout kio reads: legacy or compact
strings, bytes and arrays, KIP-893 nullable structs, tagged fields) without
building anything. A walker is generated once per class as straight-line Python
(runs of fixed-size fields become one addition); the walk costs about a
microsecond per partition and rejects with ``WireError`` any length that runs
past the end of the frame. It also refuses a null where the schema has a
non-nullable array (kio reads it as None; handlers trust the schema). Other
value checks stay with kio.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from rafka.protocol.codec import DecodeError, read_uvarint

Walk = Callable[[bytes, int, int], int]  # (buffer, position, end) -> position after the value

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_FIXED = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
          "timedelta_i32": 4, "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
          "uuid": 16}


class WireError(ValueError):
    """A length in the request runs past the end of the frame."""


def _short(what: str = "field") -> int:
    raise WireError(f"truncated {what}")


def _null(name: str) -> None:
    raise WireError(f"null in non-nullable array {name}")


def _too_many(n: int, left: int) -> None:
    raise WireError(f"an array of {n} elements cannot fit in the {left} bytes left")


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    try:
        return read_uvarint(buf, pos, end)
    except DecodeError as exc:
        raise WireError(str(exc)) from None


def _tags(buf: bytes, pos: int, end: int, known: dict[int, Walk]) -> int:
    count, pos = _uvarint(buf, pos, end)
    if count > end - pos:
        raise WireError(f"{count} tagged fields cannot fit in the {end - pos} bytes left")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        stop = pos + size
        if stop > end:
            raise WireError(f"tagged field {tag} of {size} bytes runs past the end of the request")
        walk = known.get(tag)
        if walk is not None and walk(buf, pos, stop) > stop:
            raise WireError(f"tagged field {tag} runs past its size")
        pos = stop
    return pos


# --------------------------------------------------------------------------
# code generation: one straight-line function per entity class

_LEGACY_LEN = {2: "_I16", 4: "_I32"}


def _sized(flexible: bool, width: int, ind: str) -> list[str]:
    """Skip a string/bytes: a compact (uvarint) or legacy (int16/int32) length, then that many bytes."""
    if flexible:
        return [f"{ind}if pos >= end: _short()",
                f"{ind}n = buf[pos]",
                f"{ind}if n < 0x80: pos += n if n else 1",  # one-byte length: n - 1 bytes after it
                f"{ind}else:",
                f"{ind}    n, pos = _uvarint(buf, pos, end)",
                f"{ind}    pos += n - 1 if n else 0"]
    return [f"{ind}if pos + {width} > end: _short()",
            f"{ind}n = {_LEGACY_LEN[width]}(buf, pos)[0]",
            f"{ind}pos += {width} + (n if n > 0 else 0)"]


def _count(flexible: bool, ind: str) -> list[str]:
    """Read an array's element count into n (null and empty both give n <= 0)."""
    if flexible:
        return [f"{ind}if pos >= end: _short()",
                f"{ind}n = buf[pos]",
                f"{ind}if n < 0x80: pos += 1",
                f"{ind}else: n, pos = _uvarint(buf, pos, end)",
                f"{ind}n -= 1"]
    return [f"{ind}if pos + 4 > end: _short()", f"{ind}n = _I32(buf, pos)[0]", f"{ind}pos += 4"]


class _Gen:
    def __init__(self) -> None:
        self.ns: dict[str, Any] = {"_short": _short, "_too_many": _too_many, "_null": _null, "_uvarint": _uvarint,
                                   "_tags": _tags, "_I16": _I16, "_I32": _I32}
        self.names: dict[type, str] = {}
        self.info: dict[type, tuple[int, int | None]] = {}  # class -> (smallest size, fixed size or None)

    def _define(self, name: str, body: list[str], label: str) -> None:
        source = f"def {name}(buf, pos, end):\n" + "\n".join(body) + "\n    if pos > end: _short()\n    return pos\n"
        exec(compile(source, f"<wirecheck {label}>", "exec"), self.ns)  # noqa: S102  (generated from kio schemas)

    def field(self, field: Any, flexible: bool, tagged: bool) -> tuple[list[str], int, int | None]:
        """Statements that skip one field's value; its smallest size; its size if always the same."""
        kind = classify_field(field)
        if isinstance(kind, (PrimitiveTupleField, EntityTupleField)):
            if isinstance(kind, EntityTupleField):
                child: str | None = self.entity(kind.type_)
                child_min, child_fixed = self.info[kind.type_]
            else:
                ktype = get_schema_field_type(field)
                child, child_fixed = None, _FIXED.get(ktype)
                child_min = child_fixed or (1 if flexible else (2 if ktype == "string" else 4))
            lines = _count(flexible, "    ")
            if not tagged and type(None) not in typing.get_args(field.type):
                # kio reads a null here as None although the schema forbids it; Kafka refuses it
                lines.append(f"    if n < 0: _null({field.name!r})")
            lines.append("    if n > 0:")
            lines.append(f"        if n * {max(child_min, 1)} > end - pos: _too_many(n, end - pos)")
            if child_fixed is not None:
                lines.append(f"        pos += n * {child_fixed}")
            elif child is not None:
                lines += ["        for _ in range(n):", f"            pos = {child}(buf, pos, end)"]
            else:  # an array of strings or bytes
                width = 2 if get_schema_field_type(field) == "string" else 4
                lines.append("        for _ in range(n):")
                lines += _sized(flexible, width, "            ")
            return lines, (1 if flexible else 4), None
        if isinstance(kind, EntityField):
            child = self.entity(kind.type_)
            child_min, child_fixed = self.info[kind.type_]
            if not tagged and is_optional(field):  # KIP-893 nullable struct: an int8 marker, -1 for null
                return ["    if pos >= end: _short()", "    if buf[pos] == 0xFF: pos += 1",
                        f"    else: pos = {child}(buf, pos + 1, end)"], 1, None
            if child_fixed is not None:
                return [f"    pos += {child_fixed}"], child_fixed, child_fixed
            return [f"    pos = {child}(buf, pos, end)"], child_min, None
        ktype = get_schema_field_type(field)
        if ktype in _FIXED:
            return [f"    pos += {_FIXED[ktype]}"], _FIXED[ktype], _FIXED[ktype]
        width = 2 if ktype == "string" else 4
        return _sized(flexible, width, "    "), (1 if flexible else width), None

    def entity(self, cls: type) -> str:
        """Generate (once) the walker of ``cls``; its name in the namespace."""
        if cls in self.names:
            return self.names[cls]
        name = f"_w{len(self.names)}"
        self.names[cls] = name
        flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
        body: list[str] = []
        fixed_run = min_size = 0
        all_fixed = not flexible
        tags: dict[int, Walk] = {}
        for field in dataclasses.fields(cls):
            tag = get_field_tag(field)
            lines, smallest, fixed = self.field(field, flexible, tag is not None)
            if tag is not None:
                tag_name = f"{name}_tag{int(tag)}"
                self._define(tag_name, lines, f"{cls.__qualname__}.{field.name}")
                tags[int(tag)] = self.ns[tag_name]
                continue
            min_size += smallest
            if fixed is not None:
                fixed_run += fixed  # runs of fixed-size fields become one addition
                continue
            all_fixed = False
            if fixed_run:
                body.append(f"    pos += {fixed_run}")
                fixed_run = 0
            body += lines
        if fixed_run:
            body.append(f"    pos += {fixed_run}")
        if flexible:
            min_size += 1
            self.ns[f"{name}_tags"] = tags
            body += ["    if pos >= end: _short()",
                     "    if buf[pos] == 0: pos += 1",
                     f"    else: pos = _tags(buf, pos, end, {name}_tags)"]
        self._define(name, body or ["    pass"], f"{cls.__module__}.{cls.__qualname__}")
        self.info[cls] = (min_size, min_size if all_fixed else None)
        return name


_GEN = _Gen()


@cache
def walker(cls: type) -> Walk:
    """The compiled bounds walker of request class ``cls``."""
    return _GEN.ns[_GEN.entity(cls)]  # type: ignore[no-any-return]


def check_body(cls: Any, frame: bytes, offset: int) -> None:
    """Raise WireError if a length in the body of request ``cls`` at ``offset`` overruns ``frame``."""
    walker(cls)(frame, offset, len(frame))
