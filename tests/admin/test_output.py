"""Tables, field blocks and the progress line read well and stay aligned."""

from __future__ import annotations

import io

from rafka.admin import output


def test_table_aligns_columns_and_right_aligns_numbers() -> None:
    text = output.table(["topic", "partition", "lag"], [["orders", 0, 5], ["payments-eu", 12, None]])
    assert text.splitlines() == [
        "TOPIC        PARTITION  LAG",
        "orders               0    5",
        "payments-eu         12    -",
    ]


def test_table_without_rows_is_the_header() -> None:
    assert output.table(["group", "state"], []) == "GROUP  STATE"


def test_cells_render_none_booleans_and_lists() -> None:
    assert [output.cell(v) for v in (None, "", True, False, [0, 1], 7)] == ["-", "-", "yes", "no", "0,1", "7"]


def test_fields_pad_names_to_one_width() -> None:
    assert output.fields([("group", "g"), ("group uid", "cgp_x"), ("protocol", None)]).splitlines() == [
        "GROUP      g", "GROUP UID  cgp_x", "PROTOCOL   -"]


def test_assignment_text() -> None:
    assert output.assignment_text({"b": [2], "a": [0, 1]}) == "a:0,1 b:2"
    assert output.assignment_text({}) == "-"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_in_place_on_a_terminal() -> None:
    stream = Tty()
    with output.Progress(4, "resetting", stream, interval=0) as p:
        p.advance(1)
        p.advance(3)
    assert stream.getvalue() == "\rresetting: 1/4 (25%)\rresetting: 4/4 (100%)\n"


def test_progress_is_silent_when_not_a_terminal() -> None:
    stream = io.StringIO()
    with output.Progress(10, "resetting", stream) as p:
        p.advance(10)
    assert stream.getvalue() == ""
    assert p.render() == "resetting: 10/10 (100%)"


def test_progress_throttles_redraws_but_always_shows_the_end() -> None:
    stream = Tty()
    with output.Progress(1000, "x", stream, interval=60) as p:
        for _ in range(1000):
            p.advance()
    lines = stream.getvalue().split("\r")[1:]
    assert len(lines) == 2 and lines[-1] == "x: 1000/1000 (100%)\n"
