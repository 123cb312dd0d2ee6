"""One line per event on stderr, prefixed with the process name; ``Throttled`` for events
a client can repeat thousands of times a second."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any


def setup(process: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s {process} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class Throttled:
    """Log each kind of line at most once per ``interval`` seconds; the next line that is
    logged says how many of its kind were skipped since the last."""

    def __init__(self, logger: logging.Logger, interval: float = 1.0) -> None:
        self.logger = logger
        self.interval = interval
        self._next: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def warning(self, kind: str, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now < self._next.get(kind, 0.0):
            self._skipped[kind] = self._skipped.get(kind, 0) + 1
            return
        self._next[kind] = now + self.interval
        skipped = self._skipped.pop(kind, 0)
        if skipped:
            msg += " (%d more %s since the last line)"
            args = (*args, skipped, kind)
        self.logger.warning(msg, *args)
