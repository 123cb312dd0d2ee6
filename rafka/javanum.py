"""Numbers as Kafka's ConfigDef reads and prints them: Java's parsing, not Python's.

How this works: a config value is trimmed as Java's ``String.trim`` does (every char up to
U+0020 at either end), then parsed with Java's grammar — ``Integer.parseInt`` /
``Long.parseLong`` (an optional sign and decimal digits, Unicode digits included, within
the type's range) or ``Double.parseDouble`` (ASCII only: ``NaN``, ``Infinity``, decimal or
hexadecimal floats, an optional ``f``/``d`` suffix). Python's own parsers accept more
(underscores, inner whitespace, ``inf``, ``nan``) and refuse some of Java's forms, so
neither is used on the raw text. ``java_str`` prints a value as Java's ``toString`` would,
for the "Invalid value X" part of Kafka's messages.
"""

from __future__ import annotations

import math
import re
import unicodedata
from decimal import Decimal

_JAVA_WHITESPACE = "".join(map(chr, range(0x21)))
_INTEGER = re.compile(r"[+-]?\d+")  # \d: any Unicode decimal digit, as Character.digit
_DOUBLE = re.compile(
    r"[+-]?(?:(?P<special>NaN|Infinity)"
    r"|(?P<hex>0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?"
    r"|(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?)")
BITS = {"INT": 32, "LONG": 64}


def java_trim(text: str) -> str:
    return text.strip(_JAVA_WHITESPACE)


def parse_integer(text: str, kind: str) -> int | None:
    """Java's parseInt (``kind`` INT) or parseLong (LONG) of the trimmed text; None if it fails."""
    trimmed = java_trim(text)
    if not _INTEGER.fullmatch(trimmed):
        return None
    sign = trimmed[0] if trimmed[0] in "+-" else ""
    digits = "".join(str(unicodedata.decimal(c)) for c in trimmed[len(sign):]).lstrip("0") or "0"
    if len(digits) > 20:  # past any LONG (and Python's int() refuses over 4,300 digits)
        return None
    value = int(sign + digits)
    limit = 1 << (BITS[kind] - 1)
    return value if -limit <= value < limit else None


def parse_double(text: str) -> float | None:
    """Java's Double.parseDouble of the trimmed text; None if it fails."""
    trimmed = java_trim(text)
    match = _DOUBLE.fullmatch(trimmed)
    if match is None:
        return None
    negative = trimmed.startswith("-")
    if match["special"]:
        value = math.nan if match["special"] == "NaN" else math.inf
    elif match["hex"]:
        try:
            value = float.fromhex(match["hex"])
        except OverflowError:  # Java rounds to Infinity
            value = math.inf
    else:
        value = float(match["dec"])
    return -value if negative else value


def java_str(value: float) -> str:
    """``value`` as Java's Integer/Long/Double ``toString`` prints it."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)  # Python's shortest digits, always with a fraction: 2.0, 0.5, 1234.5
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{exponent + len(text) - 1}"
