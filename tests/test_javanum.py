"""Java's number parsing and printing, as Kafka's ConfigDef sees config values. The expected
values were printed by Integer.parseInt / Long.parseLong / Double.parseDouble / Double.toString
of the Java-trimmed text on OpenJDK (X: NumberFormatException)."""

from __future__ import annotations

import math

import pytest

from rafka.javanum import java_str, parse_double, parse_integer

INTEGERS = [  # text, parseInt, parseLong
    ("5", 5, 5), (" +5 ", 5, 5), ("-0", 0, 0), ("1_000", None, None), ("1e3", None, None),
    ("2147483647", 2147483647, 2147483647), ("2147483648", None, 2147483648),
    ("-2147483648", -2147483648, -2147483648), ("９", 9, 9), ("\u00a05", None, None), ("5\u00a0", None, None),
    ("\x015\x02", 5, 5), ("", None, None), ("+", None, None), ("0x10", None, None),
    ("9223372036854775807", None, 9223372036854775807), ("9223372036854775808", None, None),
    ("0" * 5000 + "5", 5, 5), ("9" * 5000, None, None),
]

DOUBLES = [  # text, Double.toString(Double.parseDouble(text.trim()))
    ("0.5", "0.5"), (" 0.5 ", "0.5"), ("0.5d", "0.5"), ("0.5F", "0.5"), ("NaN", "NaN"), ("nan", None),
    ("-NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("inf", None), ("1e3", "1000.0"),
    ("1E-5", "1.0E-5"), (".5", "0.5"), ("5.", "5.0"), ("0x1p-1", "0.5"), ("0x1.8p1d", "3.0"), ("1_0", None),
    ("３", None), ("\u00a00.5", None), ("+.5e+2", "50.0"), ("12345678", "1.2345678E7"), ("1e7", "1.0E7"),
    ("0.001", "0.001"), ("0.0001", "1.0E-4"), ("1e300", "1.0E300"), ("-2.5e-10", "-2.5E-10"),
    ("123456.789", "123456.789"), ("0x1p99999", "Infinity"), ("1e99999", "Infinity"),
]


@pytest.mark.parametrize(("text", "as_int", "as_long"), INTEGERS)
def test_integers_parse_as_java_does(text: str, as_int: int | None, as_long: int | None) -> None:
    assert (parse_integer(text, "INT"), parse_integer(text, "LONG")) == (as_int, as_long)


@pytest.mark.parametrize(("text", "printed"), DOUBLES)
def test_doubles_parse_and_print_as_java_does(text: str, printed: str | None) -> None:
    value = parse_double(text)
    assert (None if value is None else java_str(value)) == printed


def test_integers_print_plainly() -> None:
    assert java_str(-5) == "-5" and java_str(2**63 - 1) == "9223372036854775807"
    nan = parse_double("NaN")
    assert nan is not None and math.isnan(nan)
