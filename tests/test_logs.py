"""Throttled: a line a client can trigger thousands of times a second is logged once a second,
and the next one says how many were skipped."""

from __future__ import annotations

import logging

import pytest

from rafka import logs


def test_a_kind_of_line_is_logged_once_per_interval_with_the_count_skipped(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: now[0])
    lines = logs.Throttled(logging.getLogger("rafka.test"), interval=1.0)
    with caplog.at_level("WARNING", logger="rafka.test"):
        for _ in range(2000):
            lines.warning("cache answers", "answered %s from the cache", "t")
        lines.warning("other", "another kind")
        now[0] += 1.0
        lines.warning("cache answers", "answered %s from the cache", "u")
    assert [r.getMessage() for r in caplog.records] == [
        "answered t from the cache", "another kind",
        "answered u from the cache (1999 more cache answers since the last line)"]
