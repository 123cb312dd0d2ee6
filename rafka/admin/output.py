"""Output for the admin commands: aligned tables for people, JSON for scripts, and a
progress line on stderr for long work. Dependency-free."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, Self, TextIO

MISSING = "-"


def cell(value: Any) -> str:
    """How a value reads in a table: None as '-', booleans as yes/no, lists comma-joined."""
    if value is None or value == "":
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(cell(v) for v in value) or MISSING
    return str(value)


def _numeric(column: list[Any]) -> bool:
    values = [v for v in column if v is not None and v != ""]
    return bool(values) and all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Rows under upper-case headers, columns two spaces apart; numbers right-aligned."""
    raw = [list(r) for r in rows]
    texts = [[cell(v) for v in r] for r in raw]
    widths = [len(h) for h in headers]
    for r in texts:
        for i, t in enumerate(r):
            widths[i] = max(widths[i], len(t))
    right = [_numeric([r[i] for r in raw]) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        out = [v.rjust(widths[i]) if right[i] else v.ljust(widths[i]) for i, v in enumerate(values)]
        return "  ".join(out).rstrip()

    return "\n".join([line([h.upper() for h in headers]), *(line(r) for r in texts)])


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """``NAME  value`` lines, the names padded to one width (a record's header block)."""
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k.upper().ljust(width)}  {cell(v)}".rstrip() for k, v in pairs)


def to_json(value: Any) -> str:
    """Pretty JSON (keys in insertion order)."""
    return json.dumps(value, indent=2, default=str)


def assignment_text(assignment: dict[str, list[int]] | None) -> str:
    """``topic:0,1 other:3`` for a topic→partitions map."""
    if not assignment:
        return MISSING
    return " ".join(f"{t}:{','.join(str(p) for p in ps)}" for t, ps in sorted(assignment.items()))


class Progress:
    """``label: done/total (pct%)`` rewritten in place on a terminal; silent otherwise.

    Redraws at most every ``interval`` seconds; ``close`` ends the line.
    """

    def __init__(self, total: int, label: str, stream: TextIO | None = None, enabled: bool | None = None,
                 interval: float = 0.1) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.enabled = isatty() if enabled is None else enabled
        self.interval = interval
        self.done = 0
        self._last = 0.0
        self._drawn = False

    def render(self) -> str:
        pct = 100 if self.total == 0 else self.done * 100 // self.total
        return f"{self.label}: {self.done}/{self.total} ({pct}%)"

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        now = time.monotonic()
        if self.enabled and (now - self._last >= self.interval or self.done == self.total):
            self._last = now
            self.stream.write("\r" + self.render())
            self.stream.flush()
            self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
